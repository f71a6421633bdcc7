"""Publish against the loopback Hub with the real huggingface_hub client and datasets.load_dataset.

Clients run in subprocesses because both libraries read HF_ENDPOINT once, at import time.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.fake_hub import client_env, running_hub
from fixtures.tasks import build_tiny_artifact, make_prepared, sample_jpegs
from metashift_hf.hub import publish as publish_mod
from metashift_hf.hub import shards as shards_mod
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.tasks.spec import ShiftSpec


TOKEN = "hf_test_write_token_123"
NS = "tester"
CONFIGS = ("paper-dg-cat-dog-1", "paper-subpop-cat-dog-p12")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("publish")
    art = build_tiny_artifact(root / "artifact")
    images = sample_jpegs(root / "images")
    tasks = [make_prepared(CONFIGS[0], images), make_prepared(CONFIGS[1], images, shift_type="conditional")]
    export_prepared(tasks, TaskOrigin(artifact=art), root / "out", namespace=NS)
    return {"root": root, "out": root / "out", "art": art, "tasks": tasks}


def cli(args: list[str], endpoint: str, home: Path, token: str | None = TOKEN, extra_env: dict | None = None):
    env = client_env(endpoint, str(home), token)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "metashift_hf", *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def local_cli(monkeypatch, capsys):
    """``cli`` run in this process (fast; for the error and planning paths): same arguments and result
    fields as the subprocess form, with huggingface_hub's endpoint/token settings patched in place."""
    import types

    from huggingface_hub import constants

    from metashift_hf.cli import main

    def run(args: list[str], endpoint: str, home: Path, token: str | None = TOKEN, extra_env: dict | None = None):
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        monkeypatch.setattr(
            constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        )
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(Path(home) / "hub"))  # downloads (publish reads specs)
        monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(Path(home) / "token"))  # no stored login
        for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
            monkeypatch.delenv(key, raising=False)
        if token is not None:
            monkeypatch.setenv("HF_TOKEN", token)
        capsys.readouterr()
        code = main(args)
        out = capsys.readouterr()
        return types.SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)

    return run


def publish_args(folder: Path, *more: str) -> list[str]:
    return ["publish", "--from-export", str(folder), "--namespace", NS, *more]


LOAD_SCRIPT = r"""
import hashlib, json, sys
import datasets
datasets.config.USE_PARQUET_EXPORT = False
result = []
for repo, config in zip(sys.argv[1::2], sys.argv[2::2]):
    out = {}
    for split, d in datasets.load_dataset(repo, config).items():
        d = d.cast_column("image", datasets.Image(decode=False))
        out[split] = [[r["image_id"], r["label"], hashlib.sha256(r["image"]["bytes"]).hexdigest()] for r in d]
    stream = datasets.load_dataset(repo, config, streaming=True)["train"]
    out["streamed_train"] = [r["image_id"] for r in stream.select_columns(["image_id"])]
    result.append(out)
print(json.dumps(result))
"""


SPEC_SCRIPT = r"""
import sys
import datasets
import metashift_hf
repo, config = sys.argv[1:3]
print(metashift_hf.shift_spec(repo).to_json(compact=True))
print(metashift_hf.shift_spec(datasets.load_dataset(repo, config)).to_json(compact=True))
"""


def load_from_hub(endpoint: str, home: Path, *repo_configs: tuple[str, str]) -> list[dict]:
    """Load each (repo, config) with datasets, normal and streaming, in one client process."""
    env = client_env(endpoint, str(home), None)  # anonymous: public repos load without a token
    args = [x for pair in repo_configs for x in pair]
    r = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def local_rows(repo_dir: Path, config: str) -> dict:
    import hashlib

    import pyarrow.parquet as pq

    out = {}
    for split in ("train", "test"):
        rows = [
            r for f in sorted((repo_dir / config).glob(f"{split}-*.parquet")) for r in pq.read_table(f).to_pylist()
        ]
        out[split] = [[r["image_id"], r["label"], hashlib.sha256(r["image"]["bytes"]).hexdigest()] for r in rows]
    return out


def commit_counts(state) -> dict[str, int]:
    return {repo_id: len(repo.commits) for (_, repo_id), repo in state.repos.items()}


@pytest.mark.slow
def test_publish_load_back_then_republish_makes_no_commit(exported, tmp_path):
    with running_hub() as (endpoint, state):
        r = cli(publish_args(exported["out"]), endpoint, tmp_path / "home")
        assert r.returncode == 0, r.stderr[-3000:]
        repos = {f"{NS}/metashift", f"{NS}/metashift-{CONFIGS[0]}", f"{NS}/metashift-{CONFIGS[1]}"}
        # create_repo's initial commit + exactly one commit with all shards and the README
        assert commit_counts(state) == {rid: 2 for rid in repos}
        head = state.repos[("dataset", f"{NS}/metashift-{CONFIGS[0]}")].head
        pictures = (
            [f"images/{CONFIGS[0]}-{c}-groups.png" for c in ("cat", "dog")] + [f"images/{CONFIGS[0]}-examples.png"]
            if importlib.util.find_spec("matplotlib")
            else []
        )  # the task card's pictures (cards.pictures)
        assert sorted(head.files) == sorted(
            [
                ".gitattributes",
                "README.md",
                f"{CONFIGS[0]}/shift_spec.json",
                f"{CONFIGS[0]}/meta_graph.parquet",  # the task's meta-graph facts
                f"{CONFIGS[0]}/meta_graph_distances.parquet",  # every pair's distance
                f"{CONFIGS[0]}/test-00000-of-00001.parquet",
                f"{CONFIGS[0]}/train-00000-of-00001.parquet",
                *pictures,
            ]
        )
        assert all(e.lfs_oid for p, e in head.files.items() if p.endswith(".parquet"))
        (collection,) = state.collections.values()
        assert [i["id"] for i in collection["items"]][0] == f"{NS}/metashift"  # the overview first
        assert {i["id"] for i in collection["items"]} == repos
        assert "d=0.500" in next(i for i in collection["items"] if i["id"].endswith(CONFIGS[0]))["note"]["text"]
        assert f'load_dataset("{NS}/metashift-{CONFIGS[0]}", "{CONFIGS[0]}")' in r.stdout

        loaded = load_from_hub(endpoint, tmp_path / "reader", *[(f"{NS}/metashift-{c}", c) for c in CONFIGS])
        for config, got in zip(CONFIGS, loaded):
            want = local_rows(exported["out"] / f"metashift-{config}", config)
            assert got["train"] == want["train"] and got["test"] == want["test"]
            assert got["streamed_train"] == [row[0] for row in want["train"]]

        before = len(state.requests)
        again = cli(publish_args(exported["out"]), endpoint, tmp_path / "home")
        assert again.returncode == 0, again.stderr[-3000:]
        assert commit_counts(state) == {rid: 2 for rid in repos}
        assert "up to date, no commit" in again.stderr  # a progress message (logging), not a result
        new = state.requests[before:]
        assert not [p for m, p, _ in new if "/commit/" in p or p.startswith("/lfs-upload")]
        assert len(next(iter(state.collections.values()))["items"]) == 3  # no duplicate items


def test_dry_run_prints_the_plan_and_pushes_nothing(exported, tmp_path, local_cli):
    with running_hub() as (endpoint, state):
        r = local_cli(publish_args(exported["out"], "--dry-run"), endpoint, tmp_path / "home")
        assert r.returncode == 0, r.stderr[-3000:]
        assert "dry run: nothing is pushed" in r.stdout
        repo = exported["out"] / f"metashift-{CONFIGS[0]}"
        files = [p for p in repo.rglob("*") if p.is_file() and not p.name.startswith(".")]
        assert {p.suffix for p in files} == {".md", ".parquet", ".json", ".png"}  # card, shards, spec, pictures
        assert f"{NS}/metashift-{CONFIGS[0]} (new repo): upload {len(files)} files" in r.stdout
        shard = f"{CONFIGS[0]}/train-00000-of-00001.parquet"
        size = (exported["out"] / f"metashift-{CONFIGS[0]}" / shard).stat().st_size
        assert 1_000 <= size < 1_000_000  # the sample JPEGs make a shard of some kB
        assert f"upload    {shard}  {size / 1000:.1f} kB" in r.stdout
        assert state.repos == {} and state.collections == {}
        assert all(m == "GET" for m, _, _ in state.requests)


@pytest.mark.slow
def test_run_that_dies_halfway_completes_without_duplicates(exported, tmp_path):
    with running_hub() as (endpoint, state):
        # The index repo is committed, then the first task repo's commit fails after its LFS uploads.
        state.fail[f"commit:{NS}/metashift-{CONFIGS[0]}"] = 1
        r = cli(publish_args(exported["out"]), endpoint, tmp_path / "home")
        assert r.returncode == 2
        assert "error: the Hub at" in r.stderr and "fix: run the same command again" in r.stderr
        assert state.count("PUT", "/lfs-upload/") > 0
        assert [
            len(state.repos[("dataset", f"{NS}/{n}")].commits) for n in ("metashift", f"metashift-{CONFIGS[0]}")
        ] == [2, 1]
        r = cli(publish_args(exported["out"]), endpoint, tmp_path / "home")
        assert r.returncode == 0, r.stderr[-3000:]
        assert set(commit_counts(state).values()) == {2}
        # every LFS object was uploaded exactly once over both runs
        assert state.count("PUT", "/lfs-upload/") == len(state.lfs)
        assert len(next(iter(state.collections.values()))["items"]) == 3


@pytest.mark.slow
def test_token_is_never_printed_or_logged(exported, tmp_path):
    debug = {"HF_HUB_VERBOSITY": "debug", "DATASETS_VERBOSITY": "debug"}
    with running_hub() as (endpoint, state):
        ok = cli(publish_args(exported["out"]), endpoint, tmp_path / "home", extra_env=debug)
        assert ok.returncode == 0, ok.stderr[-3000:]
        bad = cli(
            publish_args(exported["out"]), endpoint, tmp_path / "home", token="hf_wrong_token_456", extra_env=debug
        )
    assert TOKEN not in ok.stdout + ok.stderr
    assert bad.returncode == 2 and "rejected the token (401)" in bad.stderr and "fix: create a token" in bad.stderr
    assert "hf_wrong_token_456" not in bad.stdout + bad.stderr


def test_no_token(exported, tmp_path, local_cli):
    with running_hub() as (endpoint, state):
        r = local_cli(publish_args(exported["out"]), endpoint, tmp_path / "empty-home", token=None)
        assert r.returncode == 2
        assert "error: no Hugging Face token found" in r.stderr and "HF_TOKEN" in r.stderr
        assert state.requests == []
        # publishing tasks: the token is checked before any task is materialised or exported
        out = tmp_path / "never-written"
        r = local_cli(
            [
                "publish",
                "some-task",
                "--artifact",
                str(exported["art"].root),
                "--images",
                str(exported["root"] / "images"),
                "--namespace",
                NS,
                "--out",
                str(out),
            ],
            endpoint,
            tmp_path / "empty-home",
            token=None,
        )
        assert r.returncode == 2 and "error: no Hugging Face token found" in r.stderr
        assert not out.exists() and state.requests == []


def test_forbidden_namespace_and_read_only_token(exported, tmp_path, local_cli):
    tokens = {TOKEN: ("tester", "write"), "hf_read_only_789": ("tester", "read")}
    with running_hub(tokens=tokens) as (endpoint, state):
        r = local_cli(
            ["publish", "--from-export", str(exported["out"]), "--namespace", "someone-else"], endpoint, tmp_path / "h"
        )
        assert r.returncode == 2 and "cannot write under namespace 'someone-else'" in r.stderr and "tester" in r.stderr
        r = local_cli(publish_args(exported["out"]), endpoint, tmp_path / "h", token="hf_read_only_789")
        assert r.returncode == 2 and "is read-only" in r.stderr  # refused before any write request
        assert "hf_read_only_789" not in r.stdout + r.stderr
        assert all(not repo.commits[1:] for repo in state.repos.values())


def test_names_the_hub_refuses_are_checked_before_any_request(exported, tmp_path, local_cli):
    bad = tmp_path / "bad"
    shutil.copytree(exported["out"], bad)
    readme = bad / f"metashift-{CONFIGS[0]}" / "README.md"
    readme.write_text(readme.read_text().replace("- split: test\n", "- split: test-id\n", 1))
    with running_hub() as (endpoint, state):
        r = local_cli(
            ["publish", "--from-export", str(exported["out"]), "--namespace", "bad--ns"], endpoint, tmp_path / "h"
        )
        assert r.returncode == 2 and "namespace 'bad--ns' would be refused by the Hub" in r.stderr
        r = local_cli(publish_args(bad), endpoint, tmp_path / "h")
        assert r.returncode == 2 and "split name 'test-id'" in r.stderr and "fix:" in r.stderr
        assert state.requests == []


def test_metadata_the_hub_refuses(exported, tmp_path, local_cli):
    bad = tmp_path / "bad"
    shutil.copytree(exported["out"], bad)
    readme = bad / f"metashift-{CONFIGS[0]}" / "README.md"
    readme.write_text(readme.read_text().replace("license: cc-by-4.0", "license: not-a-licence", 1))
    with running_hub() as (endpoint, state):
        r = local_cli(publish_args(bad), endpoint, tmp_path / "h")
        assert r.returncode == 2 and "refuses the README metadata" in r.stderr and "license" in r.stderr
        assert "`metashift-hf export`" in r.stderr and "cards.py" not in r.stderr  # names no file that is gone
        assert state.count("POST", "/commit/") == 1  # only the index repo (sorted first) was committed


@pytest.mark.slow
def test_stale_shards_are_deleted_in_the_same_commit(exported, tmp_path, monkeypatch):
    with running_hub() as (endpoint, state):
        assert cli(publish_args(exported["out"]), endpoint, tmp_path / "h").returncode == 0
        train = exported["out"] / f"metashift-{CONFIGS[0]}" / CONFIGS[0] / "train-00000-of-00001.parquet"
        monkeypatch.setattr(shards_mod, "MAX_SHARD_BYTES", train.stat().st_size // 3)  # more, smaller shards
        monkeypatch.setattr(shards_mod, "ROW_GROUP_ROWS", 2)
        resharded = tmp_path / "resharded"
        export_prepared(exported["tasks"], TaskOrigin(artifact=exported["art"]), resharded, namespace=NS)
        r = cli(publish_args(resharded), endpoint, tmp_path / "h")
        assert r.returncode == 0, r.stderr[-3000:]
        repo = state.repos[("dataset", f"{NS}/metashift-{CONFIGS[0]}")]
        assert len(repo.commits) == 3
        shards = sorted(p for p in repo.head.files if p.endswith(".parquet"))
        assert shards == sorted(
            f"{CONFIGS[0]}/{p.name}" for p in (resharded / f"metashift-{CONFIGS[0]}" / CONFIGS[0]).glob("*.parquet")
        )
        assert f"{CONFIGS[0]}/train-00000-of-00001.parquet" not in shards and len(shards) > 2
        (got,) = load_from_hub(endpoint, tmp_path / "reader", (f"{NS}/metashift-{CONFIGS[0]}", CONFIGS[0]))
        assert got["train"] == local_rows(exported["out"] / f"metashift-{CONFIGS[0]}", CONFIGS[0])["train"]


@pytest.mark.slow
def test_publish_tasks_from_the_cli_end_to_end(demo_build, tmp_path):
    """The user's path: tasks -> export (cards name the Hub repo) -> push -> load by repo id."""
    world, art = demo_build
    task = "paper-dg-cat-dog-1"
    args = [
        "publish",
        task,
        "--artifact",
        str(art.root),
        "--images",
        str(world.images_dir),
        "--namespace",
        NS,
        "--set",
        "scale=0.5",
    ]
    env = {"HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")}
    with running_hub() as (endpoint, state):
        # The demo world is synthetic: refused before anything is exported or pushed, unless asked for.
        r = cli(args, endpoint, tmp_path / "home", extra_env=env)
        assert r.returncode == 2 and "synthetic" in r.stderr and "--allow-synthetic" in r.stderr, r.stderr[-3000:]
        assert not state.repos
        r = cli(args + ["--allow-synthetic"], endpoint, tmp_path / "home", extra_env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f'load_dataset("{NS}/metashift-{task}", "{task}")' in r.stdout
        head = state.repos[("dataset", f"{NS}/metashift-{task}")].head
        readme = head.files["README.md"].content.decode()
        assert f'ds = load_dataset("{NS}/metashift-{task}", "{task}")' in readme
        assert {"images/cat.png", "images/dog.png", f"{task}/shift_spec.json", f"{task}/meta_graph.parquet"} <= set(
            head.files
        )
        index = state.repos[("dataset", f"{NS}/metashift")].head.files["README.md"].content.decode()
        assert f'load_dataset("{NS}/metashift-{task}", "{task}")' in index
        (got,) = load_from_hub(endpoint, tmp_path / "reader", (f"{NS}/metashift-{task}", task))
        assert len(got["train"]) == len(got["streamed_train"]) > 0 and set(got) >= {"train", "test"}
        # the pushed shift_spec.json, the spec read by repo id and the spec of the loaded dataset agree
        pushed = ShiftSpec.from_json(head.files[f"{task}/shift_spec.json"].content)
        env = client_env(endpoint, str(tmp_path / "reader"), None)
        r = subprocess.run(
            [sys.executable, "-c", SPEC_SCRIPT, f"{NS}/metashift-{task}", task],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        by_id, from_dataset = (ShiftSpec.from_json(line) for line in r.stdout.strip().splitlines()[-2:])
        assert by_id == from_dataset == pushed and pushed.task_id == task and pushed.overrides == {"scale": 0.5}


def test_collection_notes_follow_the_shift_spec(exported, tmp_path, local_cli):
    changed = tmp_path / "changed"
    shutil.copytree(exported["out"], changed)
    spec_file = changed / f"metashift-{CONFIGS[0]}" / CONFIGS[0] / "shift_spec.json"
    with running_hub() as (endpoint, state):
        assert local_cli(publish_args(exported["out"]), endpoint, tmp_path / "h").returncode == 0
        spec = ShiftSpec.from_json(spec_file.read_text())
        spec_file.write_text(replace(spec, distance=replace(spec.distance, value=0.75)).to_json())
        r = local_cli(publish_args(changed), endpoint, tmp_path / "h")
        assert r.returncode == 0, r.stderr[-3000:]
        (collection,) = state.collections.values()
        notes = {i["id"]: i.get("note", {}).get("text") for i in collection["items"]}
        assert len(collection["items"]) == 3 and "d=0.750" in notes[f"{NS}/metashift-{CONFIGS[0]}"]
        assert state.count("PATCH", "/items/") == 1


def test_private_repos_and_collection(exported, tmp_path, local_cli):
    with running_hub() as (endpoint, state):
        r = local_cli(publish_args(exported["out"], "--private"), endpoint, tmp_path / "h")
        assert r.returncode == 0, r.stderr[-3000:]
        assert all(repo.private for repo in state.repos.values()) and len(state.repos) == 3
        assert next(iter(state.collections.values()))["private"] is True


def test_token_stays_out_of_logging_in_process(exported, caplog, capsys, monkeypatch):
    """Same client, in this process, every logger at DEBUG: the token appears in no record."""
    import logging

    from huggingface_hub import constants

    # The loopback Hub speaks LFS, not Xet; the env switch was read at import, so set the constant.
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)

    from metashift_hf.core.errors import MetashiftError
    from metashift_hf.hub.publish import push_repos

    repos = sorted(p for p in exported["out"].iterdir() if p.is_dir())
    caplog.set_level(logging.DEBUG)
    for name in ("huggingface_hub", "httpx", "httpx2", "httpcore", "httpcore2", "urllib3"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    with running_hub() as (endpoint, state):
        result = push_repos(repos, NS, token=TOKEN, endpoint=endpoint)
        assert set(result.commits) == {f"{NS}/{p.name}" for p in repos} and all(result.commits.values())
        with pytest.raises(MetashiftError) as bad:
            push_repos(repos, NS, token="hf_wrong_token_456", endpoint=endpoint)
    out = capsys.readouterr()
    assert caplog.records  # the clients did log at DEBUG
    everything = caplog.text + out.out + out.err + str(bad.value)
    assert TOKEN not in everything and "hf_wrong_token_456" not in everything


def test_publish_has_no_card_rewrite():
    """The card is rendered once, for its target (export --namespace); publish rewrites nothing."""
    assert not hasattr(publish_mod, "retarget_card")


def test_export_for_another_target_is_refused_before_the_hub(exported, tmp_path, local_cli):
    out = tmp_path / "local-export"
    export_prepared(
        exported["tasks"], TaskOrigin(artifact=exported["art"]), out
    )  # no --namespace: cards name local folders
    assert str(out) in (out / f"metashift-{CONFIGS[0]}" / "README.md").read_text()
    other = tmp_path / "other-export"
    export_prepared(exported["tasks"], TaskOrigin(artifact=exported["art"]), other, namespace="someone")
    with running_hub() as (endpoint, state):
        for folder, was in ((out, "no --namespace"), (other, "namespace 'someone'")):
            r = local_cli(publish_args(folder), endpoint, tmp_path / "h")
            assert r.returncode == 2 and was in r.stderr and f"--namespace {NS}" in r.stderr, r.stderr
        assert not state.repos  # refused before anything was created


@pytest.mark.slow  # ~10 s: two publish runs in subprocesses against the loopback Hub
def test_published_card_is_the_exported_card(exported, tmp_path):
    """What export --namespace wrote is what the Hub gets, byte for byte, and names the namespace."""
    with running_hub() as (endpoint, state):
        r = cli(publish_args(exported["out"]), endpoint, tmp_path / "home")
        assert r.returncode == 0, r.stderr[-3000:]
        for repo in (f"metashift-{CONFIGS[0]}", "metashift"):
            published = state.repos[("dataset", f"{NS}/{repo}")].head.files["README.md"].content
            assert published == (exported["out"] / repo / "README.md").read_bytes()
        task = state.repos[("dataset", f"{NS}/metashift-{CONFIGS[0]}")].head.files["README.md"].content.decode()
        assert f'load_dataset("{NS}/metashift-{CONFIGS[0]}", "{CONFIGS[0]}")' in task
        assert not any(".card-target" in f for (_, _), repo in state.repos.items() for f in repo.head.files)
        again = cli(publish_args(exported["out"]), endpoint, tmp_path / "home")
        assert again.returncode == 0 and "up to date, no commit" in again.stderr


def test_publishing_one_task_keeps_the_tasks_published_before_on_the_card(exported, tmp_path, local_cli):
    """Issue 46 (new-user finding): publishing one task rewrote the namespace's collection card with that task only
    (the tasks published before, from other export folders, went unlisted). The pushed card lists every task repo
    of the namespace, once, in task order, with their shift tags; pushing it again makes no commit."""
    from huggingface_hub import DatasetCard

    a, b = exported["tasks"]
    for task, folder in ((a, "out-a"), (b, "out-b")):
        export_prepared([task], TaskOrigin(artifact=exported["art"]), tmp_path / folder, namespace=NS)
    with running_hub() as (endpoint, state):
        for folder, listed in (("out-a", CONFIGS[:1]), ("out-b", CONFIGS), ("out-a", CONFIGS)):
            r = local_cli(publish_args(tmp_path / folder), endpoint, tmp_path / "h")
            assert r.returncode == 0, r.stderr[-3000:]
            card = state.repos[("dataset", f"{NS}/metashift")].head.files["README.md"].content.decode()
            rows = [line for line in card.splitlines() if line.startswith("| [`")]
            assert [line.split("`")[1] for line in rows] == list(listed), card
            assert all(f'load_dataset("{NS}/metashift-{c}", "{c}")' in card for c in listed)
        assert "subpopulation-shift" in DatasetCard(card).data.tags  # b's (conditional) shift tag, pushed from out-a
        commits = commit_counts(state)
        again = local_cli(publish_args(tmp_path / "out-a"), endpoint, tmp_path / "h")
        assert again.returncode == 0 and commit_counts(state) == commits
    assert (tmp_path / "out-a" / "metashift" / "README.md").read_text().count("| [`") == 1  # export folder as written
