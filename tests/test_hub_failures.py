"""Hub failures are one error/fix line: a revision the repo lacks (A1-05, A1-07, A1-10), offline mode
(A1-13), and an endpoint that accepts connections and never answers (A1-78; huggingface_hub passes
timeout=None per request, so the bound lives in the transport); a repo's rows are checked against its spec
as a folder's are (A1-18, A1-72)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fixtures.fake_hub import client_env, running_hub
from fixtures.tasks import build_tiny_artifact, sample_jpegs, three_split_task
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.task_open import TaskOrigin


NS, TOKEN = "tester", "hf_test_write_token_123"


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
    env = {
        **os.environ,
        "HF_ENDPOINT": silent_endpoint,
        "HF_HUB_DOWNLOAD_TIMEOUT": "1",
        "HF_HUB_ETAG_TIMEOUT": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    env.pop("HF_HUB_OFFLINE", None)
    run = subprocess.run(
        [sys.executable, "-m", "metashift_hf", "tasks", "show", "ns/metashift-task"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # 6 tries x 1 s + 23 s of backoff, then the error
    assert run.returncode == 2, run.stderr[-2000:]
    assert "no answer from the Hub" in run.stderr and "fix:" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """One task published to the loopback Hub: (endpoint, repo id, working folder)."""
    tmp = tmp_path_factory.mktemp("hub")
    art = build_tiny_artifact(tmp / "artifact")
    task = three_split_task("paper-dg-cat-dog-1", sample_jpegs(tmp / "images", n=12))
    export_prepared([task], TaskOrigin(artifact=art), tmp / "out", namespace=NS)
    with running_hub() as (endpoint, state):
        env = client_env(endpoint, str(tmp / "home"), TOKEN)
        r = subprocess.run(
            [sys.executable, "-m", "metashift_hf", "publish", "--from-export", str(tmp / "out"), "--namespace", NS],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        yield endpoint, f"{NS}/metashift-{task.task_id}", tmp


@pytest.mark.slow
@pytest.mark.parametrize("revision", ["no-such-branch", "0" * 40, "abc1234"], ids=["A1-05", "A1-07", "A1-10"])
def test_a_revision_the_repo_lacks_is_named(published, revision):
    endpoint, repo, tmp = published
    env = client_env(endpoint, str(tmp / f"user-{revision[:8]}"), None)
    r = subprocess.run(
        [sys.executable, "-m", "metashift_hf", "tasks", "show", repo, "--revision", revision],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"has no revision {revision!r}" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_offline_mode_with_a_repo_id_is_one_error(published):
    endpoint, repo, tmp = published
    env = {**client_env(endpoint, str(tmp / "user-offline"), None), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "metashift_hf", "tasks", "show", repo],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "HF_HUB_OFFLINE" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr


def upload(endpoint: str, tmp, repo: str, local, path_in_repo: str) -> None:
    code = (
        "import sys\nfrom huggingface_hub import HfApi\n"
        "HfApi().upload_file(path_or_fileobj=sys.argv[1], path_in_repo=sys.argv[2], repo_id=sys.argv[3], "
        "repo_type='dataset')"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(local), path_in_repo, repo],
        env=client_env(endpoint, str(tmp / "uploader"), TOKEN),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.slow
def test_rows_of_a_hub_repo_are_checked_like_a_folders(published, tmp_path):
    """(A1-18, A1-72 through the Hub) a test shard with every label flipped, pushed to the repo: score and bugs
    refuse it naming the repo and the first bad row, as for a folder (tests/test_hardening_rows.py)."""
    endpoint, repo, tmp = published
    original = next((tmp / "out" / repo.split("/")[1]).glob("*/test-*.parquet"))
    in_repo = f"{original.parent.name}/{original.name}"
    table = pq.read_table(original)
    i = table.schema.get_field_index("label")
    flipped = table.set_column(
        i, table.schema.field(i), pa.array([1 - y for y in table["label"].to_pylist()], table.schema.field(i).type)
    )
    pq.write_table(flipped.replace_schema_metadata(table.schema.metadata), tmp_path / "flipped.parquet")
    (tmp_path / "p.csv").write_text("image_id,prediction\n2400020,cat\n")
    upload(endpoint, tmp, repo, tmp_path / "flipped.parquet", in_repo)
    try:
        for cmd in ("score", "bugs"):
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "metashift_hf",
                    cmd,
                    "--task",
                    repo,
                    "--predictions",
                    str(tmp_path / "p.csv"),
                    "--out",
                    str(tmp_path / cmd),
                ],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
                env=client_env(endpoint, str(tmp_path / f"home-{cmd}"), None),
            )
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
            assert f"Hub dataset repo {repo}" in r.stderr and "split 'test' does not match its shift spec" in r.stderr
            assert "is of class 'cat' in the spec, the label says 'dog'" in r.stderr and "fix:" in r.stderr
            assert not (tmp_path / cmd).exists()
    finally:  # the module's other tests read the repo as published
        upload(endpoint, tmp, repo, original, in_repo)
