"""A Hub endpoint that accepts connections and never answers ends in one error/fix line, not a hang
(review case A1-78): huggingface_hub passes timeout=None per request, so the bound lives in the transport."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest


@pytest.fixture()
def silent_endpoint():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept every connection, read nothing, answer nothing
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.slow
def test_a_hub_that_never_answers_is_an_error_within_a_bound(silent_endpoint, tmp_path):
    env = {**os.environ, "HF_ENDPOINT": silent_endpoint, "HF_HUB_DOWNLOAD_TIMEOUT": "1", "HF_HUB_ETAG_TIMEOUT": "1",
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    run = subprocess.run([sys.executable, "-m", "metashift_hf", "tasks", "show", "ns/metashift-task"], env=env,
                         capture_output=True, text=True, timeout=120)  # 6 tries x 1 s + 23 s of backoff, then the error
    assert run.returncode == 2, run.stderr[-2000:]
    assert "no answer from the Hub" in run.stderr and "fix:" in run.stderr
    assert "Traceback" not in run.stderr
