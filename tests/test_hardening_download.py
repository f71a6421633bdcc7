"""Hardening, downloads: a partial file that is not a prefix of the real file is discarded (never
resumed), a mirror answering an HTML page is skipped without keeping its bytes, and bad options or
a malformed data manifest give one line before any network work."""

from __future__ import annotations

import hashlib
import json
import pickle
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hardening_inputs import assert_one_line_error, run_cli, small_subsets

from metashift_hf.core.sources import KnownFile
from metashift_hf.sources.download import download_file, part_path


PAYLOAD = pickle.dumps(small_subsets(), protocol=4)
KNOWN = KnownFile("hardening", "hardening.pkl", len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest(), (), "test file")
HTML = b"<!DOCTYPE html><html><body>mirror maintenance</body></html>"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.server.mode == "html":  # 200, a web page, no Content-Length
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(HTML)
            self.close_connection = True
            return
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
        body = PAYLOAD[start:]
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def mirror(mode: str):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.mode = mode
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{KNOWN.file_name}"
    finally:
        server.shutdown()
        server.server_close()


def test_part_with_a_wrong_prefix_is_discarded_not_resumed(tmp_path):
    part = part_path(tmp_path / KNOWN.file_name)
    part.write_bytes(HTML)  # what an earlier run kept from a mirror that answered an error page
    with mirror("ok") as good:
        path, url = download_file(KNOWN, tmp_path, urls=[good], progress=False, retries=0, timeout=5)
    assert path.read_bytes() == PAYLOAD and url == good


def test_html_mirror_is_skipped_and_keeps_nothing(tmp_path):
    with mirror("html") as bad, mirror("ok") as good:
        path, url = download_file(KNOWN, tmp_path, urls=[bad, good], progress=False, retries=1, timeout=5)
    assert path.read_bytes() == PAYLOAD and url == good


@pytest.mark.parametrize(
    "option",
    [
        ["--timeout", "0"],
        ["--timeout", "-5"],
        ["--timeout", "nan"],
        ["--mirror", "notaurl"],
        ["--retries", "-1"],
        ["--dir", "FILE"],
    ],
)
def test_bad_download_options_fail_at_once(tmp_path, capsys, option):
    (tmp_path / "FILE").write_text("a file, not a folder")
    option = [str(tmp_path / "FILE") if o == "FILE" else o for o in option]
    t0 = time.monotonic()
    code, _, err = run_cli(
        capsys, "download", "--what", "attributes", "--manifest", tmp_path / "m.json", "--no-progress", *option
    )
    assert_one_line_error(code, err, option[0])
    assert time.monotonic() - t0 < 5


def test_manifest_entry_whose_path_is_an_object(tmp_path, capsys):
    man = tmp_path / "m.json"
    man.write_text(
        json.dumps(
            {
                "format": "metashift-hf-data-manifest",
                "format_version": 1,
                "inputs": {"attributes": {"path": {"evil": 1}}},
            }
        )
    )
    code, _, err = run_cli(capsys, "download", "--status", "--manifest", man)
    assert_one_line_error(code, err, "has no path string")


def test_html_only_mirror_leaves_no_part_file(tmp_path):
    """Its page once stayed in .part, and the next run against a good mirror resumed from it."""
    from metashift_hf.core.errors import MetashiftError

    with mirror("html") as bad, pytest.raises(MetashiftError, match="web page"):
        download_file(KNOWN, tmp_path, urls=[bad], progress=False, retries=1, timeout=5)
    assert list(tmp_path.iterdir()) == []
