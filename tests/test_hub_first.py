"""The published dataset is the interface (issue 19), end to end against the loopback Hub: every task
card's commands run verbatim with only the package and the repo, and the commands give the same
numbers from a Hub repo id as from the exported folder and from the artifact.

Clients run in subprocesses: huggingface_hub and datasets read HF_ENDPOINT once, at import time.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fixtures.fake_hub import client_env, running_hub
from fixtures.tasks import build_tiny_artifact, sample_jpegs, three_split_task
from metashift_hf.cli import main
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.task_open import TaskOrigin


pytestmark = pytest.mark.slow  # real clients in subprocesses, a real model, real training

TOKEN = "hf_test_write_token_123"
NS = "tester"
FENCE = re.compile(r"^```(?P<lang>python|bash)\n(?P<code>.*?)^```", re.M | re.S)


def card_snippets(card: str) -> tuple[str, list[str]]:
    """(every python block of the card's usage part as one script, each bash line) in card order."""
    usage = card.split("## Details", 1)[0]  # the usage part; Details holds reference tables, not commands
    python, bash = [], []
    for m in FENCE.finditer(usage):
        (python if m["lang"] == "python" else bash).append(m["code"])
    return "\n".join(python), [line for block in bash for line in block.splitlines() if line.strip()]


def run(args: list[str], env: dict, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    r = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return r


def test_every_card_command_runs_verbatim_from_the_hub(tmp_path):
    art = build_tiny_artifact(tmp_path / "artifact")
    images = sample_jpegs(tmp_path / "images", n=30)
    tasks = [
        three_split_task("paper-dg-cat-dog-1", images),
        three_split_task("paper-subpop-cat-dog-p12", images, shift_type="conditional"),
        three_split_task("bin-cat-dog", images, matched=True),
    ]
    export_prepared(tasks, TaskOrigin(artifact=art), tmp_path / "out", namespace=NS)  # cards rendered once, naming NS
    with running_hub() as (endpoint, state):
        env = client_env(endpoint, str(tmp_path / "home"), TOKEN)
        run(
            [
                sys.executable,
                "-m",
                "metashift_hf",
                "publish",
                "--from-export",
                str(tmp_path / "out"),
                "--namespace",
                NS,
            ],
            env,
            tmp_path,
        )
        for t in tasks:
            card = state.repos[("dataset", f"{NS}/metashift-{t.task_id}")].head.files["README.md"].content.decode()
            assert str(tmp_path) not in card.split("## Details")[0], "a published card names a local path"
            python, bash = card_snippets(card)
            assert "load_dataset(" in python and "Evaluator(ds)" in python and "DataLoader" in python
            assert bash and all(line.startswith("metashift-hf ") for line in bash)
            # a fresh user: another HF_HOME, another cache, no token, a new folder; nothing but the repo
            user = tmp_path / f"user-{t.task_id}"
            user.mkdir()
            user_env = {**client_env(endpoint, str(user / "hf-home"), None), "METASHIFT_HF_CACHE": str(user / "cache")}
            (user / "snippets.py").write_text(python)
            out = run([sys.executable, "snippets.py"], user_env, user).stdout
            assert "worst group" in out
            for line in bash:
                run(["bash", "-c", line], user_env, user)
            if t.spec.registry is not None:
                assert (user / "eval-lite0" / "report.json").is_file() and "score --task" not in card
            else:
                scores = pd.read_csv(user / "scores-erm" / "per_group.csv")
                assert set(scores["split"]) >= {"train", "validation", "test"}


def test_commands_give_the_same_numbers_from_hub_folder_and_artifact(demo_build, tmp_path):
    """score, bugs, evaluate, train and experiment paper-subpop on published demo tasks: no --artifact,
    --images or --set, and the same per-group figures as the artifact path."""
    world, built = demo_build
    art = tmp_path / "artifact"  # a copy: matching writes ARTIFACT/match, and the session's build is shared
    shutil.copytree(built.root, art)
    assert main(["match", "--artifact", str(art), "-q"]) == 0
    subpop = [f"paper-subpop-cat-dog-p{p}" for p in (12, 6, 1)]
    sets = [x for t in subpop for x in ("--set", f"{t}:scale=0.5")]
    export = tmp_path / "export"
    assert (
        main(
            [
                "export",
                *subpop,
                "imagenet-5",
                "--artifact",
                str(art),
                "--images",
                str(world.images_dir),
                *sets,
                "--namespace",
                NS,
                "--out",
                str(export),
                "-q",
            ]
        )
        == 0
    )
    p12 = "paper-subpop-cat-dog-p12"
    from metashift_hf.hub.task_open import open_task

    table = open_task(export / f"metashift-{p12}").plan.table()
    preds = pd.DataFrame(
        {"image_id": table["image_id"], "prediction": ["cat", "dog"] * (len(table) // 2) + ["cat"] * (len(table) % 2)}
    )
    preds.to_csv(tmp_path / "preds.csv", index=False)
    cache = tmp_path / "cache"
    train_args = ["--probe", "linear", "--epochs", "3", "--image-size", "32", "--cache-dir", str(cache)]
    forms = {
        "artifact": (
            ["--task", p12, "--artifact", str(art), "--set", "scale=0.5"],
            ["--task", "imagenet-5", "--artifact", str(art), "--images", str(world.images_dir)],
        ),
        "folder": (["--task", str(export / f"metashift-{p12}")], ["--task", str(export / "metashift-imagenet-5")]),
    }
    for form, (task, matched) in forms.items():
        o = tmp_path / form
        images = ["--images", str(world.images_dir)] if form == "artifact" else []
        assert (
            main(["score", *task, "--predictions", str(tmp_path / "preds.csv"), "--out", str(o / "score"), "-q"]) == 0
        )
        assert main(["bugs", *task, "--predictions", str(tmp_path / "preds.csv"), "--out", str(o / "bugs"), "-q"]) == 0
        assert (
            main(
                [
                    "evaluate",
                    "--model",
                    "efficientnet-lite0",
                    *matched,
                    "--sample",
                    "6",
                    "--out",
                    str(o / "eval"),
                    "--no-progress",
                    "-q",
                ]
            )
            == 0
        )
        assert main(["train", *task, *images, *train_args, "--out", str(o / "train"), "-q"]) == 0
    with running_hub() as (endpoint, state):
        env = {**client_env(endpoint, str(tmp_path / "home"), TOKEN), "METASHIFT_HF_CACHE": str(cache)}
        run(
            [
                sys.executable,
                "-m",
                "metashift_hf",
                "publish",
                "--from-export",
                str(export),
                "--namespace",
                NS,
                "--allow-synthetic",
            ],
            env,
            tmp_path,
        )
        o = tmp_path / "hub"
        repo = f"{NS}/metashift-{p12}"
        cli = [sys.executable, "-m", "metashift_hf"]
        run(
            [*cli, "score", "--task", repo, "--predictions", str(tmp_path / "preds.csv"), "--out", str(o / "score")],
            env,
            tmp_path,
        )
        run(
            [*cli, "bugs", "--task", repo, "--predictions", str(tmp_path / "preds.csv"), "--out", str(o / "bugs")],
            env,
            tmp_path,
        )
        run(
            [
                *cli,
                "evaluate",
                "--model",
                "efficientnet-lite0",
                "--task",
                f"{NS}/metashift-imagenet-5",
                "--sample",
                "6",
                "--out",
                str(o / "eval"),
                "--no-progress",
            ],
            env,
            tmp_path,
        )
        run([*cli, "train", "--task", repo, *train_args, "--out", str(o / "train")], env, tmp_path)
        run(
            [
                *cli,
                "experiment",
                "paper-subpop",
                "--from",
                NS,
                "--seeds",
                "1",
                "--epochs",
                "2",
                "--image-size",
                "32",
                "--cache-dir",
                str(cache),
                "--out",
                str(o / "experiment"),
            ],
            env,
            tmp_path,
        )
    assert (o / "experiment" / "results.md").is_file()
    # issue 27.5: a task from the Hub is recorded with its repo id and the commit sha its revision resolved to
    origins = json.loads((o / "experiment" / "results.json").read_text())["run"]["task_origins"]
    assert origins[p12]["repo_id"] == repo and re.fullmatch(r"[0-9a-f]{40}", origins[p12]["commit"] or "")
    assert json.loads((o / "train" / "run_card.json").read_text())["task_origin"]["commit"] == origins[p12]["commit"]
    # every column, a context subset's community and meta-graph distance included: the folder and the repo carry
    # the task's meta-graph facts (<config>/meta_graph.parquet, issue 26.4)
    for name in (
        "score/per_group.csv",
        "bugs/per_group.csv",
        "eval/per_group.csv",
        "train/seed-0/predictions.csv",
        "train/scores.json",
    ):
        texts = {form: (tmp_path / form / name).read_text() for form in ("artifact", "folder", "hub")}
        assert texts["artifact"] == texts["folder"] == texts["hub"], name
    groups = pd.read_csv(tmp_path / "hub" / "eval" / "per_group.csv")
    assert groups.loc[groups["level"] == "context", "community"].notna().all()
    bugs = {
        form: json.loads((tmp_path / form / "bugs" / "bugs.json").read_text())
        for form in ("artifact", "folder", "hub")
    }
    for form, report in bugs.items():
        assert report["n_tests"] == bugs["artifact"]["n_tests"] and report["n_bugs"] == bugs["artifact"]["n_bugs"], (
            form
        )
