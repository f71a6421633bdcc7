"""Downloader against loopback HTTP servers: Range resume, dropped connections, servers that ignore
Range, wrong bytes, 404 fall-over, disk-space check, scene-graph zip extraction."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from metashift_hf import cli
from metashift_hf.core.errors import ChecksumError, InputFormatError
from metashift_hf.core.sources import KNOWN_FILES, KnownFile
from metashift_hf.sources import download as dl
from metashift_hf.sources import manifest as manifest_mod


PAYLOAD = np.random.default_rng(7).integers(0, 256, size=3 * (1 << 20) + 12345, dtype=np.uint8).tobytes()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        name = self.path.rsplit("/", 1)[-1]
        behaviour = srv.behaviour
        data = srv.files.get(name)
        if data is None or behaviour == "404":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if behaviour == "wrong":
            data = bytes(reversed(data))
        start = 0
        rng = self.headers.get("Range")
        if rng and behaviour != "norange":
            start = int(rng.split("=")[1].split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        if behaviour == "longer":  # no length announced, body runs past the known size, ends at close
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body + b"trailing junk")
            self.close_connection = True
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if behaviour == "drop" and srv.drops_left > 0:
            srv.drops_left -= 1
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        srv.bytes_sent += len(body)
        self.wfile.write(body)


class LoopbackServer:
    def __init__(self, files: dict[str, bytes], behaviour: str = "ok", drops: int = 1) -> None:
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.files, self.httpd.behaviour, self.httpd.drops_left = files, behaviour, drops
        self.httpd.requests, self.httpd.bytes_sent = [], 0
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/files"

    @property
    def requests(self) -> list:
        return self.httpd.requests

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers: list[LoopbackServer] = []

    def start(behaviour: str = "ok", files: dict[str, bytes] | None = None, drops: int = 1) -> LoopbackServer:
        s = LoopbackServer(files if files is not None else {"blob.bin": PAYLOAD}, behaviour, drops)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


def _known(*bases: str, data: bytes = PAYLOAD, name: str = "blob.bin") -> KnownFile:
    return KnownFile(
        key="subsets",
        file_name=name,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        urls=tuple(f"{b}/{name}" for b in bases),
        description="test blob",
    )


def _fetch(kf, dest, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("timeout", 5)
    return dl.download_file(kf, dest, **kw)


def test_plain_download_verifies_and_moves_into_place(serve, tmp_path):
    s = serve()
    path, url = _fetch(_known(s.base), tmp_path)
    assert path == tmp_path / "blob.bin" and path.read_bytes() == PAYLOAD
    assert url == f"{s.base}/blob.bin"
    assert not (tmp_path / "blob.bin.part").exists()
    assert s.requests == [("/files/blob.bin", None)]


def test_resume_continues_a_part_file_left_by_a_crash(serve, tmp_path):
    s = serve()
    half = len(PAYLOAD) // 2
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD[:half])
    path, _ = _fetch(_known(s.base), tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert s.requests == [("/files/blob.bin", f"bytes={half}-")]
    assert s.httpd.bytes_sent == len(PAYLOAD) - half  # only the missing tail crossed the wire


def test_dropped_connection_is_resumed_with_range(serve, tmp_path, caplog):
    s = serve("drop")
    path, _ = _fetch(_known(s.base), tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert len(s.requests) == 2 and s.requests[0][1] is None
    offset = int(s.requests[1][1].split("=")[1].rstrip("-"))
    assert 0 < offset < len(PAYLOAD)  # the second request continued, it did not start over
    assert any("resuming at byte" in m for m in caplog.messages)


def test_ctrl_c_keeps_the_part_file_and_the_next_run_resumes(serve, tmp_path, monkeypatch):
    import tqdm

    s = serve()
    calls = {"n": 0}
    real_update = tqdm.tqdm.update

    def interrupt_after_first_block(self, n=1):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_update(self, n)

    monkeypatch.setattr(tqdm.tqdm, "update", interrupt_after_first_block)
    with pytest.raises(KeyboardInterrupt):
        _fetch(_known(s.base), tmp_path)
    kept = (tmp_path / "blob.bin.part").stat().st_size
    assert 0 < kept < len(PAYLOAD) and not (tmp_path / "blob.bin").exists()
    assert not (tmp_path / "blob.bin.part.lock").exists()
    monkeypatch.setattr(tqdm.tqdm, "update", real_update)
    path, _ = _fetch(_known(s.base), tmp_path)
    assert path.read_bytes() == PAYLOAD and s.requests[-1][1] == f"bytes={kept}-"


def test_second_concurrent_download_of_the_same_file_is_refused(serve, tmp_path):
    import fcntl

    s = serve()
    lock = tmp_path / "blob.bin.part.lock"
    with open(lock, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process holds it
        with pytest.raises(dl.MetashiftError, match="another process is downloading"):
            _fetch(_known(s.base), tmp_path)
    assert s.requests == []


def test_server_ignoring_range_restarts_cleanly(serve, tmp_path, caplog):
    s = serve("norange")
    (tmp_path / "blob.bin.part").write_bytes(b"garbage from an older, different file" * 1000)
    path, _ = _fetch(_known(s.base), tmp_path)
    assert path.read_bytes() == PAYLOAD
    assert s.requests[0][1] is not None  # it asked to resume ...
    assert any("ignored the Range request" in m for m in caplog.messages)  # ... and started over on a 200


def test_wrong_bytes_keep_nothing_and_name_the_mirror(serve, tmp_path):
    s = serve("wrong")
    with pytest.raises(ChecksumError) as err:
        _fetch(_known(s.base), tmp_path)
    assert f"{s.base}/blob.bin" in err.value.what and "nothing was kept" in err.value.what
    assert list(tmp_path.iterdir()) == []


def test_404_falls_over_to_the_next_mirror(serve, tmp_path):
    missing, good = serve("404"), serve()
    path, url = _fetch(_known(missing.base, good.base), tmp_path)
    assert path.read_bytes() == PAYLOAD and url == f"{good.base}/blob.bin"
    assert len(missing.requests) == 1


def test_bad_mirror_then_good_mirror(serve, tmp_path, caplog):
    bad, good = serve("wrong"), serve()
    path, url = _fetch(_known(bad.base, good.base), tmp_path)
    assert path.read_bytes() == PAYLOAD and url.startswith(good.base)
    assert any("checksum mismatch from " + bad.base in m for m in caplog.messages)
    assert good.requests == [("/files/blob.bin", None)]  # started from byte 0, nothing reused


def test_wrong_size_is_rejected_before_downloading(serve, tmp_path):
    other = serve(files={"blob.bin": PAYLOAD[:1000]})
    good = serve()
    path, url = _fetch(_known(other.base, good.base), tmp_path)
    assert url.startswith(good.base) and path.read_bytes() == PAYLOAD


def test_body_longer_than_the_known_size_keeps_nothing(serve, tmp_path):
    s = serve("longer")
    with pytest.raises(dl.DownloadError, match="sends more than the expected"):
        _fetch(_known(s.base), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_mirror_option_and_env_go_first(serve, tmp_path, monkeypatch):
    s = serve()
    kf = _known("http://127.0.0.1:9/never")
    assert dl.mirror_urls(kf, s.base + "/")[0] == f"{s.base}/blob.bin"
    monkeypatch.setenv(dl.MIRROR_ENV, s.base)
    assert dl.mirror_urls(kf) == [f"{s.base}/blob.bin", "http://127.0.0.1:9/never/blob.bin"]
    path, url = _fetch(kf, tmp_path)
    assert url == f"{s.base}/blob.bin"


def test_all_mirrors_unreachable_is_a_clear_error(tmp_path):
    kf = _known("http://127.0.0.1:9/a", "http://127.0.0.1:9/b")
    with pytest.raises(dl.DownloadError) as err:
        _fetch(kf, tmp_path, retries=0)
    assert "127.0.0.1:9/a/blob.bin" in err.value.what and "127.0.0.1:9/b/blob.bin" in err.value.what
    assert "--mirror" in err.value.fix


def test_disk_space_is_checked_before_any_request(serve, tmp_path, monkeypatch):
    s = serve()
    (tmp_path / "blob.bin.part").write_bytes(PAYLOAD[:1000])
    seen: list[int] = []

    def tiny(path):
        return type("U", (), {"total": 10**9, "used": 0, "free": 1000})()

    monkeypatch.setattr(dl.shutil, "disk_usage", tiny)
    with pytest.raises(dl.DiskSpaceError) as err:
        _fetch(_known(s.base), tmp_path)
    assert "--dir" in err.value.fix and s.requests == []
    # The check counts only the bytes still missing: with enough room for the rest, it passes.
    monkeypatch.setattr(
        dl.shutil, "disk_usage", lambda p: seen.append(1) or type("U", (), {"free": len(PAYLOAD) - 1000})()
    )
    path, _ = _fetch(_known(s.base), tmp_path)
    assert path.read_bytes() == PAYLOAD and seen


def test_existing_file_is_verified_not_refetched(serve, tmp_path):
    s = serve()
    (tmp_path / "blob.bin").write_bytes(PAYLOAD)
    path, url = _fetch(_known(s.base), tmp_path)
    assert url is None and s.requests == []
    (tmp_path / "blob.bin").write_bytes(PAYLOAD[:-1] + b"x")
    with pytest.raises(ChecksumError, match="exists but its sha256"):
        _fetch(_known(s.base), tmp_path)


def _scene_graph_zip(path: Path, members: dict[str, object]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, doc in members.items():
            zf.writestr(name, json.dumps(doc))
    return path


TINY_SG = {
    "2375429": {
        "width": 500,
        "height": 333,
        "location": "outdoors",
        "objects": {
            "1": {
                "name": "horse",
                "x": 1,
                "y": 2,
                "w": 30,
                "h": 40,
                "attributes": ["white"],
                "relations": [{"name": "near", "object": "2"}],
            },
            "2": {"name": "fence", "x": 5, "y": 6, "w": 70, "h": 20, "attributes": ["wood"], "relations": []},
        },
    }
}


def test_extract_scene_graphs_atomic_and_idempotent(tmp_path):
    z = _scene_graph_zip(
        tmp_path / "sceneGraphs.zip",
        {"sceneGraphs/train_sceneGraphs.json": TINY_SG, "val_sceneGraphs.json": {}, "readme.txt": "x"},
    )
    out = tmp_path / "out"
    files = dl.extract_scene_graphs(z, out)
    assert [f.name for f in files] == ["train_sceneGraphs.json", "val_sceneGraphs.json"]
    assert json.loads(files[0].read_text()) == TINY_SG
    assert sorted(p.name for p in out.iterdir()) == ["train_sceneGraphs.json", "val_sceneGraphs.json"]
    before = files[0].stat().st_mtime_ns
    assert dl.extract_scene_graphs(z, out) == files and files[0].stat().st_mtime_ns == before


def test_extract_scene_graphs_bad_zips(tmp_path):
    z = _scene_graph_zip(tmp_path / "other.zip", {"questions.json": {}})
    with pytest.raises(InputFormatError, match="holds none of"):
        dl.extract_scene_graphs(z, tmp_path / "out")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(InputFormatError, match="not a readable zip"):
        dl.extract_scene_graphs(broken, tmp_path / "out")
    # A member whose bytes were damaged fails its CRC check and leaves no file behind.
    good = _scene_graph_zip(tmp_path / "sg.zip", {"train_sceneGraphs.json": {"k": "v" * 5000}})
    raw = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as zf:
        info = zf.getinfo("train_sceneGraphs.json")
    start = info.header_offset + 30 + len(info.filename) + 20
    raw[start : start + 8] = bytes(8)
    good.write_bytes(bytes(raw))
    with pytest.raises(InputFormatError, match="corrupt"):
        dl.extract_scene_graphs(good, tmp_path / "out2")
    assert not any((tmp_path / "out2").glob("*.json"))


def test_download_records_manifest_and_extracts_scene_graphs(serve, tmp_path, monkeypatch):
    z = _scene_graph_zip(tmp_path / "src.zip", {"train_sceneGraphs.json": TINY_SG})
    data = z.read_bytes()
    s = serve(files={"sceneGraphs.zip": data})
    kf = _known(s.base, data=data, name="sceneGraphs.zip")
    monkeypatch.setitem(KNOWN_FILES, "scene-graphs", KnownFile(**{**kf.__dict__, "key": "scene-graphs"}))
    man = tmp_path / "m.json"
    paths = manifest_mod.download(["scene-graphs"], tmp_path / "cache", progress=False, manifest=man, timeout=5)
    assert paths["scene-graphs"].read_bytes() == data
    entry = json.loads(man.read_text())["inputs"]["scene-graphs"]
    assert entry["url"] == f"{s.base}/sceneGraphs.zip" and entry["origin"] == "downloaded"
    assert [Path(p).name for p in entry["extracted"]] == ["train_sceneGraphs.json"]
    assert json.loads(Path(entry["extracted"][0]).read_text()) == TINY_SG
    # Second run: nothing fetched, digest trusted from the manifest (file unchanged).
    monkeypatch.setattr(dl, "sha256_file", lambda *a, **k: pytest.fail("re-hashed an unchanged file"))
    manifest_mod.download(["scene-graphs"], tmp_path / "cache", progress=False, manifest=man)
    assert len(s.requests) == 1


def test_real_pinned_file_through_the_cli_with_a_mirror(serve, tmp_path, shared_ref, capsys):
    data = (shared_ref / "metashift" / "attributes-candidate-subsets.pkl").read_bytes()
    s = serve(files={"attributes-candidate-subsets.pkl": data})
    man = tmp_path / "manifest.json"
    rc = cli.main(
        [
            "download",
            "--what",
            "attributes",
            "--dir",
            str(tmp_path / "d"),
            "--mirror",
            s.base,
            "--manifest",
            str(man),
            "--no-progress",
            "--timeout",
            "5",
        ]
    )
    assert rc == 0
    assert (tmp_path / "d" / "attributes-candidate-subsets.pkl").read_bytes() == data
    assert json.loads(man.read_text())["inputs"]["attributes"]["sha256"] == KNOWN_FILES["attributes"].sha256
    assert s.requests == [("/files/attributes-candidate-subsets.pkl", None)]


def test_cli_reports_checksum_error(serve, tmp_path, shared_ref, capsys, monkeypatch):
    data = (shared_ref / "metashift" / "attributes-candidate-subsets.pkl").read_bytes()
    bad = serve("wrong", files={"attributes-candidate-subsets.pkl": data})
    # Only the loopback mirror: the published URLs are dropped so the test stays offline.
    monkeypatch.setitem(KNOWN_FILES, "attributes", KnownFile(**{**KNOWN_FILES["attributes"].__dict__, "urls": ()}))
    rc = cli.main(
        [
            "download",
            "--what",
            "attributes",
            "--dir",
            str(tmp_path / "d"),
            "--mirror",
            bad.base,
            "--manifest",
            str(tmp_path / "m.json"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "error:" in err and bad.base in err and "fix:" in err
    assert not any((tmp_path / "d").iterdir())


def test_file_url_mirror_for_a_local_copy(tmp_path):
    src = tmp_path / "copy"
    src.mkdir()
    (src / "blob.bin").write_bytes(PAYLOAD)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "blob.bin.part").write_bytes(PAYLOAD[:100])  # file:// ignores Range: start over
    path, url = _fetch(_known("http://127.0.0.1:9/unused"), tmp_path / "d", mirror=src.as_uri(), retries=0)
    assert path.read_bytes() == PAYLOAD and url == f"{src.as_uri()}/blob.bin"


def test_coco_files_are_pinned_and_a_wrong_copy_is_refused(serve, tmp_path, capsys, monkeypatch):
    # sizes and sha256 of COCO 2017 as pinned by TensorFlow Datasets (url_checksums/coco.txt)
    assert {
        k: (KNOWN_FILES[k].file_name, KNOWN_FILES[k].size)
        for k in ("coco-annotations", "coco-images", "coco-val-images")
    } == {
        "coco-annotations": ("annotations_trainval2017.zip", 252_907_541),
        "coco-images": ("train2017.zip", 19_336_861_798),
        "coco-val-images": ("val2017.zip", 815_585_330),
    }
    assert all(len(KNOWN_FILES[k].sha256) == 64 for k in ("coco-annotations", "coco-images", "coco-val-images"))
    s = serve(files={"annotations_trainval2017.zip": b"not the real zip"})
    for k in ("coco-annotations", "coco-images"):
        monkeypatch.setitem(KNOWN_FILES, k, KnownFile(**{**KNOWN_FILES[k].__dict__, "urls": ()}))
    monkeypatch.setattr("metashift_hf.sources.manifest.check_disk_space", lambda *a, **k: None)
    rc = cli.main(
        [
            "download",
            "--what",
            "coco-annotations,coco-images",
            "--dir",
            str(tmp_path / "d"),
            "--mirror",
            s.base,
            "--manifest",
            str(tmp_path / "m.json"),
            "--no-progress",
            "--timeout",
            "5",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "annotations_trainval2017.zip" in err and "fix:" in err
    assert not [p for p in (tmp_path / "d").iterdir() if not p.name.endswith(".part")]
