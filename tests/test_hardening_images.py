"""Hardening, images and scene graphs: bounded reads, safe zip paths, decodable exports, one-line errors.

Zip entries are inflated only up to their declared size and the cap; image folders yield regular
files only (a FIFO or a link to /dev/zero is never read); zip ids come from safe member paths only;
an image whose header claims more pixels than PIL decodes, or whose scan data is scrambled, is
reported; malformed scene graphs give one `error:`/`fix:` line.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import tracemalloc
import zipfile
import zlib

import numpy as np
import pytest
from hardening_inputs import assert_one_line_error, run_cli
from PIL import Image

from metashift_hf.builders.images import FolderImages, ZipImages, open_images
from metashift_hf.builders.scene_graphs import read_scene_graphs
from metashift_hf.core.errors import InputFormatError, MissingImagesError


def jpeg(seed: int = 0, side: int = 96) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (side, side, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90)
    return out.getvalue()


def _deflated_zip(path, name: str, size: int, declared: int | None = None) -> None:
    """A zip with one deflated entry of ``size`` zero bytes; ``declared`` patches the directory's size."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = bytes(1 << 20)
    body = b"".join(comp.compress(chunk) for _ in range(size >> 20)) + comp.flush()
    crc = 0
    for _ in range(size >> 20):
        crc = zlib.crc32(chunk, crc)
    # written by hand (local header, data, central directory) so the directory can state any size
    name_b = name.encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(body), size, len(name_b), 0) + name_b
    central = (
        struct.pack(
            "<4s6H3L5H2L",
            b"PK\x01\x02",
            20,
            20,
            0,
            8,
            0,
            0,
            crc,
            len(body),
            size if declared is None else declared,
            len(name_b),
            0,
            0,
            0,
            0,
            0,
            0,
        )
        + name_b
    )
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(body), 0)
    path.write_bytes(local + body + central + end)


@pytest.mark.parametrize("declared", [None, 1000], ids=["declared-200MB", "declared-1kB-inflates-200MB"])
def test_zip_bomb_entry_is_not_inflated(tmp_path, declared):
    path = tmp_path / "bomb.zip"
    _deflated_zip(path, "images/1.jpg", 200 << 20, declared)
    assert path.stat().st_size < 1 << 20
    src = ZipImages(path)
    tracemalloc.start()
    try:
        with pytest.raises(MissingImagesError):
            src.read("1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, f"peak {peak / 1e6:.0f} MB while refusing"
    report = src.check(["1"])
    assert "1" in report.corrupt


def test_zip_ids_come_from_safe_paths_only(tmp_path):
    good = jpeg(1)
    path = tmp_path / "images.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("../evil/1.jpg", jpeg(2))
        z.writestr("/abs/1.jpg", jpeg(3))
        z.writestr("/abs/2.jpg", jpeg(4))
        z.writestr("images/1.jpg", good)
    with pytest.warns(UserWarning, match="unsafe paths"):
        src = ZipImages(path)
    assert src.read("1") == good
    assert not src.has("2")
    assert "2 entries" not in src.describe() and "unsafe" in src.describe()


def _read_in_child(folder, image_id: str) -> subprocess.CompletedProcess:
    """Read one id from a folder source in a child process with a memory cap and a time limit."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from metashift_hf.builders.images import FolderImages\n"
        "from metashift_hf.core.errors import MissingImagesError\n"
        f"src = FolderImages(__import__('pathlib').Path({str(folder)!r}))\n"
        f"ids, report = src.resolve([{image_id!r}], 'skip')\n"
        "print('usable', ids, 'bad', report.bad_ids)\n"
    )
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError("reading the image folder hung") from exc


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_image_folder_reads_regular_files_only(tmp_path, kind):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "1.jpg").write_bytes(jpeg(1))
    if kind == "fifo":
        os.mkfifo(folder / "2.jpg")
    else:
        (folder / "2.jpg").symlink_to("/dev/zero")
    result = _read_in_child(folder, "2")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usable [] bad ['2']" in result.stdout


def test_image_folder_refuses_a_file_over_the_cap(tmp_path, monkeypatch):
    import metashift_hf.builders.images as images

    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "1.jpg").write_bytes(jpeg(1))
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 100)
    with pytest.raises(MissingImagesError, match="more than the 100"):
        FolderImages(folder).read("1")


def _with_frame_size(data: bytes, width: int, height: int) -> bytes:
    i = data.index(b"\xff\xc0")
    return data[: i + 5] + struct.pack(">HH", height, width) + data[i + 9 :]


def _scrambled(data: bytes, seed: int = 0) -> bytes:
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")
    noise = np.random.default_rng(seed).integers(0, 256, len(data) - 2 - start, dtype=np.uint8).tobytes()
    return data[:start] + noise + b"\xff\xd9"


@pytest.mark.parametrize("case", ["60000x60000-header", "scrambled-scan"])
def test_images_that_would_not_decode_are_reported(tmp_path, case):
    folder = tmp_path / "images"
    folder.mkdir()
    good = jpeg(1)
    bad = _with_frame_size(good, 60000, 60000) if case.startswith("60000") else _scrambled(good)
    (folder / "1.jpg").write_bytes(good)
    (folder / "2.jpg").write_bytes(bad)
    with open_images(folder) as src:
        report = src.check(["1", "2"])
    assert list(report.corrupt) == ["2"], report.summary()
    assert ("too large" if case.startswith("60000") else "damaged") in report.corrupt["2"]


def test_real_jpegs_pass_the_scan_check(shared_ref):
    """No false alarm on real GQA photographs (the shared reference images)."""
    folders = [p for p in sorted((shared_ref / "images").iterdir()) if p.is_dir()]
    checked = 0
    for folder in folders:
        with open_images(folder) as src:
            report = src.check(src.ids())
            assert report.ok, report.summary()
            checked += report.requested
    assert checked > 0


# -- scene graphs -----------------------------------------------------------------------------


def _graph(image_id: str = "1", width="640", relation_object='"2"') -> str:
    return (
        '{"%s": {"width": %s, "height": 480, "objects": {"1": {"name": "cat", "x": 0, "y": 0, "w": 1, "h": 1, '
        '"attributes": [], "relations": [{"name": "on", "object": %s}]}, "2": {"name": "sofa", "x": 0, "y": 0, '
        '"w": 1, "h": 1, "attributes": [], "relations": []}}}}' % (image_id, width, relation_object)
    )


SCENE_GRAPHS = {
    "relation-object-list": _graph(relation_object='["2"]'),
    "relation-object-dict": _graph(relation_object='{"id": "2"}'),
    "width-5001-digits": _graph(width="9" * 5001),
    "width-10^30": _graph(width="1" + "0" * 30),
    "100000-deep-nesting": _graph(relation_object="[" * 100_000 + "]" * 100_000),
    "empty-image-id": _graph(image_id=""),
}


@pytest.mark.parametrize("case", sorted(SCENE_GRAPHS))
def test_malformed_scene_graphs_give_one_line(tmp_path, capsys, case):
    path = tmp_path / "sg.json"
    path.write_text(SCENE_GRAPHS[case])
    with pytest.raises(InputFormatError):
        read_scene_graphs([path])
    code, _, err = run_cli(
        capsys, "build", "--scene-graphs", path, "--out", tmp_path / "art", "--no-plots", "--workers", "1"
    )
    assert_one_line_error(code, err, str(path))
    assert len(err) < 2000


def test_export_refuses_an_image_whose_header_claims_too_many_pixels(tmp_path, capsys):
    from hardening_inputs import tiny_artifact

    art = tiny_artifact(tmp_path / "art")
    ids = sorted(art.class_images("cat"))
    images = tmp_path / "images"
    images.mkdir()
    small = jpeg(1, side=16)
    for i in ids:
        (images / f"{i}.jpg").write_bytes(small)
    (images / f"{ids[0]}.jpg").write_bytes(_with_frame_size(small, 60000, 60000))
    code, _, err = run_cli(
        capsys,
        "export",
        "class-cat",
        "--artifact",
        art.root,
        "--images",
        images,
        "--out",
        tmp_path / "out",
        "--no-verify",
    )
    assert_one_line_error(code, err, "too large to decode", ids[0])
