"""Issue 37 (hardening round 5, B1/B6 task requests) and issue 36 "Offline", the hub room's cases.

Each test names the review case ids (../shared/reviews/hardening-round5-cases.tsv) it covers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import metashift_hf
from fixtures.fake_hub import client_env, running_hub
from fixtures.tasks import EXPORTED_TASK
from metashift_hf import cli
from metashift_hf.core import options as opt
from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.hub.publish import TIMEOUT_MAX, PushOptions
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin, open_task


TOKEN = "hf_test_write_token_123"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"options": [1]},  # N-T03
        {"options": "scale=0.5"},  # N-T04
        {"options": {1: 0.5}},
        {"seed": "x"},
        {"seed": -1},
        {"config": 3},
    ],
)
def test_task_ref_checks_its_arguments_where_it_is_made(kwargs):
    """N-T03, N-T04: a TaskRef with options that are no mapping of names (or a seed that is no seed) is one clear
    OptionError when it is made, not a TypeError/ValueError deep in a resolver."""
    with pytest.raises(opt.OptionError):
        TaskRef("paper-subpop-cat-dog-p12", **kwargs)


def test_task_origin_checks_its_arguments_where_it_is_made():
    """N-T24: task_options that are no mapping (a list) is an OptionError naming it, not an AttributeError."""
    with pytest.raises(opt.OptionError, match="task_options must be a mapping"):
        TaskOrigin(artifact="ART", task_options=["paper-dg-cat-dog-1"])
    with pytest.raises(opt.OptionError, match=r"task_options\['t'\] must be a mapping"):
        TaskOrigin(artifact="ART", task_options={"t": 0.5})
    with pytest.raises(opt.OptionError, match="seed"):
        TaskOrigin(artifact="ART", seed=1.5)


def test_task_requests_are_hashable():
    """N-T15: hash(TaskRef(...)) was a TypeError (the read-only options mapping); equal requests hash equal."""
    a = TaskRef("paper-subpop-cat-dog-p12", artifact="ART", seed=1, options={"scale": 0.5, "x": [1, 2]})
    b = TaskRef("paper-subpop-cat-dog-p12", artifact="ART", seed=1, options={"x": [1, 2], "scale": 0.5})
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert hash(TaskOrigin(artifact="ART", task_options={"t": {"scale": 0.5}})) == hash(
        TaskOrigin(artifact="ART", task_options={"t": {"scale": 0.5}})
    )


def test_a_seed_given_as_text_is_the_number_it_spells(exported_task):
    """N-T08: TaskRef(P12, seed='0') said 'sampled with seed 0; --seed 0 cannot change it': the seed is checked
    (and converted) where the request is made, so '0' is seed 0 and agrees with the folder's own seed."""
    folder, _ = exported_task
    assert TaskRef(folder, seed="0").seed == 0
    assert open_task(TaskRef(folder, seed="0")).task_id == EXPORTED_TASK


@pytest.mark.parametrize("task", ["", "   ", "\n"])
def test_an_empty_task_is_named_as_empty(task, tmp_path, monkeypatch):
    """N-T18: Evaluator('') said '. holds 0 configs with a shift_spec.json' (the current folder); one check, in
    TaskRef, for the Evaluator, score and open_task alike."""
    monkeypatch.chdir(tmp_path)  # it used to open the current folder
    with pytest.raises(opt.OptionError, match="empty string: no task is named"):
        metashift_hf.Evaluator(task)


def test_a_namespace_with_a_space_is_refused_as_a_namespace(tmp_path, monkeypatch):
    """N-T27: TaskOrigin(source='ns x').open said 'made from an artifact'."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputFormatError, match="namespace 'ns x' would be refused by the Hub"):
        TaskOrigin(source="ns x")


@pytest.mark.parametrize("task", ["ns x/metashift-a", "ns/metashift a"])
def test_a_repo_id_with_a_space_names_the_bad_part(task, tmp_path, monkeypatch):
    """N-T27 (variant): a repo id with a space was 'made from an artifact, and none was given'."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputFormatError, match="would be refused by the Hub"):
        open_task(task)


def test_revision_is_refused_for_a_folder(exported_task, capsys):
    """N-T05, N-T31: a folder has no revision; --revision (Python: revision=) was ignored without a word."""
    folder, _ = exported_task
    with pytest.raises(InputFormatError, match="--revision nosuchbranch names a Hub revision"):
        open_task(TaskRef(folder, revision="nosuchbranch"))
    assert cli.main(["tasks", "show", str(folder), "--revision", "nosuchbranch"]) == 2
    assert "is a local folder" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["README.md", f"{EXPORTED_TASK}/shift_spec.json"])
def test_a_symlinked_card_or_spec_is_named_as_a_link(exported_task, tmp_path, name):
    """N-R11, N-R12: a card or spec that is a symbolic link was reported as missing ('has no dataset card')."""
    folder, _ = exported_task
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    real = tmp_path / "elsewhere"
    shutil.move(copy / name, real)
    os.symlink(real, copy / name)
    with pytest.raises(InputFormatError, match="is a symbolic link"):
        open_task(copy)


def test_export_of_an_exported_folder_does_not_ask_for_an_artifact(exported_task, capsys, isolated_manifest):
    """N-X11: `export FOLDER` asked for --artifact and --images; it is exported already: say so and how to push."""
    folder, _ = exported_task
    assert cli.main(["export", str(folder), "--out", str(folder.parent.parent / "again")]) == 2
    err = capsys.readouterr().err
    assert "exported already" in err and "publish --from-export" in err and "--artifact and --images" not in err


@pytest.mark.parametrize("timeout", [1e12, TIMEOUT_MAX * 2])
def test_publish_timeout_is_bounded(timeout, capsys):
    """N-P05: publish --timeout 1e12 was an OverflowError traceback."""
    with pytest.raises(opt.OptionError, match="at most"):
        PushOptions(timeout=timeout)
    assert (
        cli.main(["publish", "paper-dg-cat-dog-1", "--namespace", "ns", "--out", "o", "--timeout", str(timeout)]) == 2
    )
    assert "at most" in capsys.readouterr().err


OFFLINE = """
import json, logging, sys
import metashift_hf
from metashift_hf.hub.task_open import open_task
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
repo = sys.argv[1]
if sys.argv[2] == "push":
    from huggingface_hub import HfApi
    HfApi().create_repo(repo, repo_type="dataset")
    HfApi().upload_folder(folder_path=sys.argv[3], repo_id=repo, repo_type="dataset")
td = open_task(repo)
td.verify()
ev = metashift_hf.Evaluator(repo)
print(json.dumps({"task": td.task_id, "rows": sum(len(r) for r in td.plan.splits.values()),
                  "sha": td.origin()["commit"], "classes": ev.classes if hasattr(ev, "classes") else None}))
"""


@pytest.mark.slow  # two subprocess clients against the loopback Hub (~20 s)
def test_a_cached_hub_task_is_used_offline_saying_which_revision(exported_task, tmp_path):
    """Issue 36 "Offline": with HF_HUB_OFFLINE=1 a Hub task already in the cache was refused by the CLI and by
    Evaluator("repo"); it is read from the cache, and the warning names the revision and its commit."""
    folder, _ = exported_task
    repo = f"tester/metashift-{EXPORTED_TASK}"
    with running_hub() as (endpoint, _):
        env = {**client_env(endpoint, str(tmp_path / "home"), TOKEN), "METASHIFT_HF_CACHE": str(tmp_path / "cache")}
        online = subprocess.run(
            [sys.executable, "-c", OFFLINE, repo, "push", str(folder)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert online.returncode == 0, online.stderr[-3000:]
    first = json.loads(online.stdout.strip().splitlines()[-1])
    # the Hub is gone: only the cache answers
    offline_env = {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    offline = subprocess.run(
        [sys.executable, "-c", OFFLINE, repo, "read"], env=offline_env, capture_output=True, text=True, timeout=300
    )
    assert offline.returncode == 0, offline.stderr[-3000:]
    again = json.loads(offline.stdout.strip().splitlines()[-1])
    assert again == first and first["sha"]
    assert f"revision main = commit {first['sha']}" in offline.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "metashift_hf.cli", "tasks", "show", repo],
        env=offline_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"commit {first['sha']}" in shown.stderr and EXPORTED_TASK in shown.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "metashift_hf.cli", "tasks", "show", "tester/metashift-never-loaded"],
        env=offline_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 2 and "does not hold it" in missing.stderr


def test_offline_without_a_cached_copy_says_what_to_do(tmp_path, monkeypatch):
    """Issue 36 "Offline": a repo the cache does not hold is one clear error, not 'unset HF_HUB_OFFLINE' only."""
    from huggingface_hub import constants

    from metashift_hf.hub import repo_files

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(MetashiftError, match="does not hold it"):
        repo_files.hub_files("tester/metashift-x")
    snap = tmp_path / "hub" / "datasets--tester--metashift-x"
    sha = "a" * 40
    (snap / "refs").mkdir(parents=True)
    (snap / "refs" / "main").write_text(sha)
    (snap / "snapshots" / sha / "cfg").mkdir(parents=True)
    (snap / "snapshots" / sha / "cfg" / "shift_spec.json").write_text("{}")
    assert repo_files.hub_files("tester/metashift-x") == {"cfg/shift_spec.json": 2}
    assert repo_files.cached_snapshot("tester/metashift-x", None)[0] == sha
