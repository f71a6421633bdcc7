"""Hardening, leaks: publish uploads only the repo layout's regular files, cards carry no markup from
names, the token never appears in any case or piece, and a Hub that hangs, answers HTML or drops the
connection gives one line (every request has a timeout)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import datasets
import pytest
from hardening_inputs import assert_one_line_error, run_cli, tiny_artifact

from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.hub.api import PreparedTask
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.publish import push_repos, scrub_token
from metashift_hf.hub.shards import repo_files
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.tasks.spec import GroupSpec, ShiftSpec


TOKEN = "hf_SecretToken1234567890abcdef"
README = """---
license: cc-by-4.0
configs:
- config_name: t
  default: true
  data_files:
  - split: train
    path: t/train-*
---
# t
"""


def fake_repo(root: Path) -> Path:
    repo = root / "metashift-t"
    (repo / "t").mkdir(parents=True)
    (repo / "README.md").write_text(README)
    (repo / "t" / "train-00000-of-00001.parquet").write_bytes(b"PAR1 not really PAR1")
    return repo


def hostile_repo(tmp_path: Path) -> tuple[Path, Path]:
    private = tmp_path / "private.key"
    private.write_text("-----BEGIN PRIVATE KEY-----")
    repo = fake_repo(tmp_path / "export")
    (repo / "images").mkdir()
    (repo / "images" / "leak.png").symlink_to(private)
    (repo / "t" / "train-00001-of-00001.parquet").symlink_to(private)
    (repo / ".env").write_text("HF_TOKEN=" + TOKEN)
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("secret")
    (repo / "notes.txt").write_text("not part of the layout")
    (repo / "t" / "linked").symlink_to(tmp_path, target_is_directory=True)
    return repo, private


def test_publish_plans_only_regular_layout_files(tmp_path, capsys):
    repo, _ = hostile_repo(tmp_path)
    assert repo_files(repo) == ("README.md", "t/train-00000-of-00001.parquet")
    code, out, err = run_cli(capsys, "publish", "--namespace", "tester", "--from-export", repo.parent, "--dry-run")
    assert code == 0, err
    planned = [line.split()[1] for line in out.splitlines() if line.startswith("  upload")]
    assert planned == ["README.md", "t/train-00000-of-00001.parquet"]
    assert "leak" not in out and ".env" not in out and "00001-of" not in out


def test_publish_from_export_skips_a_linked_repo_folder(tmp_path, capsys):
    outside = fake_repo(tmp_path / "elsewhere")
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "metashift-linked").symlink_to(outside, target_is_directory=True)
    code, _, err = run_cli(capsys, "publish", "--namespace", "tester", "--from-export", folder, "--dry-run")
    assert_one_line_error(code, err, "holds no exported repo folders")


@pytest.mark.parametrize("name", ["<img src=x onerror=alert(1)>", "cat|dog", "a/b", "[x](http://evil)", "tab\there"])
def test_export_refuses_markup_in_names(tmp_path, name):
    art = tiny_artifact(tmp_path / "art")
    ds = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"image_id": ["1"], "label": [0]})})
    spec = ShiftSpec(
        "t",
        "none",
        (name, "dog"),
        0,
        {},
        train_groups=(GroupSpec(group=f"{name}(x)", cls=name, contexts=("x",), n=1),),
    )
    with pytest.raises(InputFormatError, match="not plain text"):
        export_prepared([PreparedTask("t", ds, spec)], TaskOrigin(artifact=art), tmp_path / "out")
    spec = ShiftSpec(
        "t",
        "none",
        ("cat", "dog"),
        0,
        {},
        train_groups=(GroupSpec(group="cat(y)", cls="cat", contexts=("<script>",), n=1),),
    )
    with pytest.raises(InputFormatError, match="context name"):
        export_prepared([PreparedTask("t", ds, spec)], TaskOrigin(artifact=art), tmp_path / "out2")


def test_token_is_scrubbed_in_any_case_and_any_piece():
    text = (
        f"bad token {TOKEN.lower()} / {TOKEN.upper()} / prefix {TOKEN[:12]}... / suffix ...{TOKEN[-10:]} / ok hf_other"
    )
    scrubbed = scrub_token(text, TOKEN)
    low = scrubbed.lower()
    assert TOKEN.lower()[:12] not in low and TOKEN.lower()[-10:] not in low
    assert "ok hf_other" in scrubbed


# -- hostile Hubs on loopback --------------------------------------------------------------------


@contextmanager
def http_server(handler_cls):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_cls)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server():
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for c in held:
            c.close()
        sock.close()


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass


class _EchoLowerToken(_Quiet):
    def do_GET(self):
        body = f'{{"error": "token {TOKEN.lower()} is invalid, starts {TOKEN[:10]}"}}'.encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Html(_Quiet):
    def do_GET(self):
        body = b"<html><body>Please log in to the proxy</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


class _Drop(_Quiet):
    def do_GET(self):
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    do_POST = do_GET


def _push(tmp_path, endpoint, **kw):
    return push_repos([fake_repo(tmp_path)], "tester", token=TOKEN, endpoint=endpoint, **kw)


def test_hub_echoing_the_token_lower_cased_never_prints_it(tmp_path):
    with http_server(_EchoLowerToken) as endpoint, pytest.raises(MetashiftError) as exc:
        _push(tmp_path, endpoint)
    text = f"{exc.value.what} {exc.value.fix}".lower()
    assert TOKEN.lower() not in text and TOKEN.lower()[:10] not in text


def test_hub_that_never_answers_times_out(tmp_path):
    t0 = time.monotonic()
    with silent_server() as endpoint, pytest.raises(MetashiftError, match="cannot reach the Hub") as exc:
        _push(tmp_path, endpoint, timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert "\n" not in exc.value.what


def test_publish_cli_timeout_is_validated(tmp_path, capsys):
    code, _, err = run_cli(capsys, "publish", "--namespace", "tester", "--from-export", tmp_path, "--timeout", "0")
    assert_one_line_error(code, err, "--timeout")


@pytest.mark.parametrize(
    "handler,needle",
    [(_Html, "did not answer like the Hub API"), (_Drop, "cannot reach the Hub")],
    ids=["html-whoami", "connection-drop"],
)
def test_hub_answering_html_or_dropping_gives_one_line(tmp_path, handler, needle):
    with http_server(handler) as endpoint, pytest.raises(MetashiftError, match=needle) as exc:
        _push(tmp_path, endpoint, timeout=5)
    assert "\n" not in exc.value.what and TOKEN not in exc.value.what


# -- a real run against the loopback Hub (in process): what it lists, and drops after whoami ------


@contextmanager
def _loopback_hub(monkeypatch, drop: str | None = None):
    """The loopback Hub of tests/fixtures/fake_hub.py; ``drop`` = 'commit' or 'lfs-upload': that
    request's connection is cut without an answer (whoami and planning have succeeded)."""
    import types

    import huggingface_hub.utils._http as hub_http
    from huggingface_hub import constants

    from fixtures.fake_hub import _Handler, running_hub

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(
        hub_http, "time", types.SimpleNamespace(sleep=lambda s: None)
    )  # its retries, without the waits

    def cut(original):
        def handler(self):
            if drop and (f"/{drop}/" in self.path):
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            original(self)

        return handler

    monkeypatch.setattr(_Handler, "do_PUT", cut(_Handler.do_PUT))
    monkeypatch.setattr(_Handler, "do_POST", cut(_Handler.do_POST))
    with running_hub(tokens={TOKEN: ("tester", "write")}) as (endpoint, state):
        yield endpoint, state


def test_a_real_run_lists_every_file_it_uploads(tmp_path, monkeypatch, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="metashift_hf")
    with _loopback_hub(monkeypatch) as (endpoint, state):
        result = _push(tmp_path, endpoint, timeout=5)
    assert not result.dry_run
    plan = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Plan:")]
    assert len(plan) == 1, caplog.text
    listed = [line.split()[1] for line in plan[0].splitlines() if line.startswith("  upload")]
    assert listed == ["README.md", "t/train-00000-of-00001.parquet"]
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("drop", ["commit", "lfs-upload"])
def test_connection_dropped_mid_upload_is_one_line(tmp_path, monkeypatch, drop):
    t0 = time.monotonic()
    with (
        _loopback_hub(monkeypatch, drop=drop) as (endpoint, _),
        pytest.raises(MetashiftError, match="cannot reach the Hub") as exc,
    ):
        _push(tmp_path, endpoint, timeout=5)
    assert time.monotonic() - t0 < 10
    assert "\n" not in exc.value.what and TOKEN not in exc.value.what
