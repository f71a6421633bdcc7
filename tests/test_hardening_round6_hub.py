"""Issue 46 (hardening round 6), the Hub/export/inputs room: D12 links and special files named as what they are,
D7 parts of an input dropped without a word, D4 export layouts, D13 offline caches, and the new-user findings.

Each test names the review case ids (../shared/reviews/hardening-round6-cases.tsv) it covers; the checks use
variants of these cases (a FIFO, a folder, a dangling link, a link to a valid file), not only the listed input.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomllib
from spec_versions import as_spec_version

import metashift_hf
from fixtures.tasks import EXPORTED_TASK
from metashift_hf import cli
from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.core.fsutil import check_input_file, describe_path
from metashift_hf.evaluate.predictions import PrecomputedPredictions
from metashift_hf.hub.api import OldCallError
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import open_task, shift_spec, warn_unrecorded_members
from metashift_hf.scoring.predictions import TaskPredictions
from metashift_hf.tasks.spec import split_members


def _copy(folder, tmp_path):
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    return copy, copy / EXPORTED_TASK


def _special(path, kind: str, tmp_path) -> None:
    """Replace ``path`` by a FIFO, a folder, a dangling link, a link to a valid file outside, or a link loop."""
    outside = tmp_path / "outside"
    if os.path.lexists(path):
        if kind == "outside":
            shutil.move(path, outside)
        else:
            os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        os.mkdir(path)
    elif kind == "dangling":
        os.symlink(tmp_path / "nowhere", path)
    elif kind == "outside":
        os.symlink(outside, path)
    elif kind == "passwd":
        os.symlink("/etc/passwd", path)
    elif kind == "loop":
        os.symlink(path, path)


SAID = {
    "fifo": "is a FIFO (named pipe)",
    "folder": "is a folder",
    "dangling": "is a dangling symbolic link",
    "outside": "is a symbolic link (to",
    "passwd": "is a symbolic link (to /etc/passwd",
    "loop": "that loops back on itself",
}


@pytest.mark.parametrize(
    "name, kind",
    [
        ("shift_spec.json", "fifo"),  # S-75
        ("shift_spec.json", "dangling"),
        ("shift_spec.json", "folder"),
        ("meta_graph.parquet", "passwd"),  # S-83
        ("meta_graph.parquet", "outside"),  # S-84
        ("meta_graph.parquet", "fifo"),
        ("test-00000-of-00001.parquet", "passwd"),  # S-86
        ("train-00000-of-00001.parquet", "loop"),
    ],
)
def test_a_task_folder_file_that_is_not_a_regular_file_says_what_it_is(exported_task, tmp_path, name, kind, capsys):
    """S-75, S-83, S-84, S-86: a spec FIFO was 'a file, not a task' or '0 configs', a meta_graph link 'Too many
    levels of symbolic links', a dangling spec link 'not there', a shard link a parquet error naming no link."""
    folder, _ = exported_task
    repo, config = _copy(folder, tmp_path)
    _special(config / name, kind, tmp_path)
    for given in (repo, config):  # the repo folder and its config folder: one wording
        with pytest.raises(InputFormatError) as err:
            open_task(given)
        assert f"{name} of exported folder" in err.value.what and SAID[kind] in err.value.what, err.value.what
        assert err.value.fix
    assert cli.main(["tasks", "show", str(config)]) == 2
    assert SAID[kind] in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["fifo", "dangling"])
def test_a_spec_file_given_as_the_task_says_what_it_is(exported_task, tmp_path, kind):
    """S-75: `tasks show FOLDER/CONFIG/shift_spec.json` with a FIFO said 'is a file, not a task'; a dangling
    link was 'made from an artifact, and none was given'."""
    folder, _ = exported_task
    _, config = _copy(folder, tmp_path)
    spec = config / "shift_spec.json"
    _special(spec, kind, tmp_path)
    with pytest.raises(InputFormatError) as err:
        shift_spec(str(spec))
    assert SAID[kind] in err.value.what and "not a task" in err.value.what
    assert str(config) in err.value.fix


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling", "loop"])
def test_a_predictions_file_that_is_not_a_file_says_what_it_is(tmp_path, kind):
    """Z-19, Z-20: a predictions FIFO or folder 'does not exist'; both readers (score's and predictions:)."""
    path = tmp_path / "preds.csv"
    _special(path, kind, tmp_path)
    for read in (lambda: TaskPredictions.read(path, ("cat", "dog")), lambda: PrecomputedPredictions.read(path)):
        with pytest.raises(InputFormatError) as err:
            read()
        assert SAID[kind] in err.value.what and "does not exist" not in err.value.what, err.value.what
    assert "does not exist" in str(
        pytest.raises(InputFormatError, check_input_file, tmp_path / "no.csv", "x", "f").value
    )


def test_describe_path_follows_a_link_to_say_what_it_points_to(tmp_path):
    (tmp_path / "f").write_text("x")
    os.symlink(tmp_path / "f", tmp_path / "l")
    assert describe_path(tmp_path / "l") == f"a symbolic link (to {tmp_path / 'f'}, a file)"
    assert describe_path(tmp_path / "none") == "nothing"


def test_predictions_with_both_logits_and_an_index_are_refused(tmp_path):
    """Z-28: a logits column and an imagenet_index column: the logits were used, the index dropped without a word."""
    logits = np.zeros((2, 1000), dtype=np.float32)
    logits[:, 404] = 1.0
    frame = pd.DataFrame({"image_id": ["a", "b"], "logits": list(logits), "imagenet_index": [0, 0]})
    frame.to_parquet(tmp_path / "both.parquet")
    with pytest.raises(InputFormatError, match="imagenet_index, logits") as err:
        PrecomputedPredictions.read(tmp_path / "both.parquet")
    assert "keep exactly one" in err.value.fix
    wide = pd.DataFrame({"image_id": ["a"], "imagenet_index": [3], **{f"logit_{i}": [0.0] for i in range(1000)}})
    wide.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(InputFormatError, match="ambiguous"):
        PrecomputedPredictions.read(tmp_path / "wide.csv")
    frame.drop(columns="imagenet_index").to_parquet(tmp_path / "one.parquet")
    assert PrecomputedPredictions.read(tmp_path / "one.parquet").predictions.top1.tolist() == [404, 404]


def test_a_spec_downgraded_to_version_4_says_its_rows_are_unchecked(exported_task, tmp_path, caplog):
    """X-16: a spec (and the card's copy) edited down to spec_version 4 without members was read and scored with
    no word that its rows are no longer checked against their splits; a version 5 spec gives no such warning."""
    folder, _ = exported_task
    data = open_task(folder)
    members = split_members(data.plan.splits)  # (the fixture's spec records none: its rows load with the warning)
    caplog.clear()
    with caplog.at_level("WARNING", logger="metashift_hf.hub.task_open"):  # members recorded: nothing to say
        warn_unrecorded_members(replace(data.spec, members=members), "spec")
    assert "records no split members" not in caplog.text
    repo, config = _copy(folder, tmp_path)
    assert json.loads((config / "shift_spec.json").read_text())["spec_version"] == 6
    as_spec_version(repo, EXPORTED_TASK, 4)  # every copy of the spec, as version 4 wrote it (no members)
    with caplog.at_level("WARNING", logger="metashift_hf.hub.task_open"):
        open_task(repo).verify()
    said = [r.getMessage() for r in caplog.records if "records no split members" in r.getMessage()]
    assert said and f"{EXPORTED_TASK}/shift_spec.json of exported folder {repo}" in said[0]
    assert "spec_version 4" in said[0] and "export or publish the task again" in said[0]


@pytest.mark.parametrize(
    "name, args, kwargs, shown",
    [
        ("plan", ("paper-dg-cat-dog-1",), {"artifact": "ART"}, "plan(TaskRef('paper-dg-cat-dog-1', artifact='ART'))"),
        (
            "plan",
            ("paper-dg-cat-dog-1", "ART"),
            {"seed": 3, "scale": 0.5},
            "plan(TaskRef('paper-dg-cat-dog-1', artifact='ART', seed=3, options={'scale': 0.5}))",
        ),
        (
            "prepare",
            ("t", "ART", "img.zip"),
            {"cache_dir": "c"},
            "prepare(TaskRef('t', artifact='ART', images='img.zip'), cache_dir='c')",
        ),
        (
            "load",
            ("t",),
            {"artifact": "A", "images": "i", "on_missing": "skip"},
            "load(TaskRef('t', artifact='A', images='i'), on_missing='skip')",
        ),
    ],
)
def test_the_old_call_form_is_answered_with_the_new_call(name, args, kwargs, shown):
    """New-user finding: plan("id", artifact=...) (0.1's form) was a bare TypeError; it names the 0.2 call."""
    with pytest.raises(TypeError) as err:  # still a TypeError, as before: code that caught it keeps working
        getattr(metashift_hf, name)(*args, **kwargs)
    assert isinstance(err.value, OldCallError) and "since 0.2.0" in err.value.what
    assert f"metashift_hf.{shown}" in err.value.fix


def test_the_changelog_names_the_package_version():
    """New-user finding: the loader's batch and the API changed with no changelog and the version still 0.1.0."""
    root = Path(__file__).resolve().parent.parent
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    # (metashift_hf.__version__ reads the installed metadata: 0.2.0 once the package is installed again)
    assert version != "0.1.0"
    headings = [line for line in (root / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert headings[0] == f"## {version}"


def _cache_copy(folder, cache, repo: str, sha: str, *, refs=("main",), drop=()) -> Path:
    """The exported ``folder`` as the local Hub cache holds a repo's snapshot (files linked to blobs, as
    huggingface_hub writes them), at commit ``sha`` named by ``refs``; ``drop``: files the copy lacks."""
    root = cache / f"datasets--{repo.replace('/', '--')}"
    snap = root / "snapshots" / sha
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")):
        rel = str(path.relative_to(folder))
        if any(rel.endswith(d) for d in drop):
            continue
        blob = root / "blobs" / f"{sha[:8]}-{rel.replace('/', '_')}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, blob)
        (snap / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, (snap / rel).parent), snap / rel)
    for ref in refs:
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(sha)
    return snap


@pytest.fixture()
def offline_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


REPO = f"tester/metashift-{EXPORTED_TASK}"
OLD, NEW = "0123456789abcdef" * 2 + "01234567", "fedcba9876543210" * 2 + "fedcba98"


def test_offline_a_cached_snapshot_is_read_as_it_is_and_a_pinned_revision_too(exported_task, offline_cache):
    """New-user findings: offline, a repo fetched with `hf download` / snapshot_download was read through
    `datasets`, which cannot load it offline ('no answer from the Hub'); `--revision OLD` with a newer revision
    cached (a short sha: 'has no None/shift_spec.json') blamed the repo. The snapshot is read as a folder."""
    folder, _ = exported_task
    _cache_copy(folder, offline_cache, REPO, OLD, refs=())
    _cache_copy(folder, offline_cache, REPO, NEW)
    for revision, sha in ((None, NEW), (OLD, OLD), (OLD[:8], OLD)):
        data = open_task(TaskRef(REPO, revision=revision))
        data.verify()
        assert data.origin()["commit"] == sha and data.meta_graph is not None
        assert sum(len(r) for r in data.plan.splits.values()) == 48
    with pytest.raises(MetashiftError) as err:  # a revision the cache does not hold: what it holds, how to fetch
        open_task(TaskRef(REPO, revision="v2"))
    assert "does not hold it at revision v2: it holds revision(s) main = commit fedcba987654" in err.value.what
    assert f"hf download {REPO} --repo-type dataset --revision v2" in err.value.fix
    assert "repo itself was not asked" in err.value.what


@pytest.mark.parametrize(
    "drop, lacks",
    [
        (("shift_spec.json", "meta_graph.parquet"), f"{EXPORTED_TASK}/shift_spec.json"),  # what load_dataset fetches
        (("shift_spec.json",), f"{EXPORTED_TASK}/shift_spec.json"),  # Z-62
        (("-00000-of-00001.parquet",), f"{EXPORTED_TASK}/*.parquet"),
        (("meta_graph.parquet",), f"{EXPORTED_TASK}/meta_graph.parquet"),
    ],
)
def test_offline_a_partial_cached_copy_names_what_it_lacks(exported_task, offline_cache, drop, lacks):
    """Z-62 (D13) and the new-user finding: offline, a task fetched only with `load_dataset` (the card and the
    shards), or a snapshot missing its shift_spec.json, was 'holds 0 configs with a shift_spec.json' with a fix
    blaming the repo; the error names what the cache lacks and how to fetch it."""
    folder, _ = exported_task
    _cache_copy(folder, offline_cache, REPO, NEW, drop=drop)
    for request in (REPO, TaskRef(REPO, config=EXPORTED_TASK)):
        with pytest.raises(MetashiftError) as err:
            data = open_task(request)
            data.meta_graph  # noqa: B018 -- the facts are read when first asked for
        assert f"local Hub cache's copy (revision main = commit {NEW}) lacks {lacks}" in err.value.what
        assert "holds 0 configs" not in err.value.what and "repo itself was not asked" in err.value.what
        assert f"hf download {REPO} --repo-type dataset" in err.value.fix and "snapshot_download" in err.value.fix


ONLINE = """
import sys
from huggingface_hub import HfApi, snapshot_download
import datasets
repo, step = sys.argv[1], sys.argv[2]
if step == "push":
    HfApi().create_repo(repo, repo_type="dataset")
    print(HfApi().upload_folder(folder_path=sys.argv[3], repo_id=repo, repo_type="dataset").oid)
elif step == "load_dataset":  # the README's first step: the card and the shards land in the Hub cache
    datasets.load_dataset(repo, sys.argv[3])
else:
    snapshot_download(repo, repo_type="dataset")
"""
OFFLINE_EVALUATOR = """
import sys, metashift_hf
ev = metashift_hf.Evaluator(sys.argv[1])
print(ev.spec.task_id)
"""


@pytest.mark.slow  # subprocess clients against the loopback Hub (~30 s)
def test_offline_after_load_dataset_names_the_fetch_then_reads_the_snapshot(exported_task, tmp_path):
    """New-user finding: a Hub task fetched only with `load_dataset` was refused offline by Evaluator("REPO"),
    evaluate and score with a message that blamed the repo; it names what the cache lacks and the fetch, and after
    that fetch (snapshot_download, no `datasets` cache of it) the task is read offline."""
    import subprocess
    import sys

    from fixtures.fake_hub import client_env, running_hub

    folder, _ = exported_task
    env = {**client_env("http://127.0.0.1:9", str(tmp_path / "home"), None), "METASHIFT_HF_CACHE": str(tmp_path / "c")}
    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # and an endpoint nothing answers on

    def run(args, env):
        return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)

    with running_hub() as (endpoint, _):
        env = {**env, "HF_ENDPOINT": endpoint, "HF_TOKEN": "hf_test_write_token_123"}
        assert run(["-c", ONLINE, REPO, "push", str(folder)], env).returncode == 0
        assert run(["-c", ONLINE, REPO, "load_dataset", EXPORTED_TASK], env).returncode == 0
        refused = [
            run(["-c", OFFLINE_EVALUATOR, REPO], offline),
            run(["-m", "metashift_hf", "score", "--task", REPO, "--predictions", "p.csv", "--out", "o"], offline),
        ]
        for r in refused:
            assert r.returncode != 0 and "lacks " + f"{EXPORTED_TASK}/shift_spec.json" in r.stderr, r.stderr[-2000:]
            assert f"hf download {REPO} --repo-type dataset" in r.stderr and "holds 0 configs" not in r.stderr
        assert run(["-c", ONLINE, REPO, "snapshot"], env).returncode == 0
    shutil.rmtree(tmp_path / "home" / "datasets", ignore_errors=True)  # no `datasets` cache: the snapshot alone
    read = run(["-c", OFFLINE_EVALUATOR, REPO], offline)
    assert read.returncode == 0 and read.stdout.strip() == EXPORTED_TASK, read.stderr[-2000:]
