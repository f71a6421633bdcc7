"""Issue 27.5: a task read from the Hub is recorded with its repo id and the commit sha its revision resolved to."""

from __future__ import annotations

import json
import subprocess
import sys

from fixtures.fake_hub import client_env, running_hub


TOKEN = "hf_test_write_token_123"
SCRIPT = """
import json, sys
from huggingface_hub import HfApi
from metashift_hf.hub.task_repo import hub_commit
api = HfApi()
api.create_repo("tester/metashift-x", repo_type="dataset")
first = api.upload_file(path_or_fileobj=b"a", path_in_repo="a.txt", repo_id="tester/metashift-x", repo_type="dataset").oid
api.upload_file(path_or_fileobj=b"b", path_in_repo="b.txt", repo_id="tester/metashift-x", repo_type="dataset")
head = api.dataset_info("tester/metashift-x").sha
print(json.dumps({"first": first, "head": head, "main": hub_commit("tester/metashift-x", None),
                  "pinned": hub_commit("tester/metashift-x", first), "missing": hub_commit("tester/nothing-here", None)}))
"""


def test_hub_commit_resolves_the_revision_to_its_sha(tmp_path):
    with running_hub() as (endpoint, _):
        r = subprocess.run(
            [sys.executable, "-c", SCRIPT],
            env=client_env(endpoint, str(tmp_path / "hf"), TOKEN),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["main"] == got["head"] and got["pinned"] == got["first"] != got["head"]
    assert got["missing"] is None  # a repo that cannot be asked: no sha, a warning, never a crash
