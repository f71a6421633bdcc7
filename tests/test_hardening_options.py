"""Issue 22 part 2: every option checked before any work (the command line and the Python API).

Each case failed before the fix: a 0 quietly took the default, NaN/inf/negative learning rates ran,
negative or fractional seeds were numpy tracebacks or silently rounded, k/n-init/classes failed only
after every image was embedded, and the Python API read ``splits='test'`` letter by letter.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hardening_inputs import assert_one_line_error, run_cli, tiny_artifact

from metashift_hf import cli
from metashift_hf.core import options as opt
from metashift_hf.core.errors import EmptyResultError, MetashiftError, UnknownNameError
from metashift_hf.evaluate import evaluate
from metashift_hf.evaluate.config import EvalConfig
from metashift_hf.hub import api
from metashift_hf.hub.task_data import DEFAULT_SEED, TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.research import ood_experiments
from metashift_hf.research.conflicts import ConflictConfig
from metashift_hf.research.score import score_plan
from metashift_hf.research.train import TrainConfig


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return tiny_artifact(tmp_path_factory.mktemp("options") / "art")


def parse_error(capsys, *argv) -> str:
    """The command line refuses ``argv`` while parsing (exit 2, argparse's usage line, our reason)."""
    with pytest.raises(SystemExit) as exc:
        cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "Traceback" not in err
    return err


TRAIN = ("train", "--task", "class-cat", "--artifact", "/nonexistent-artifact", "--out", "/nonexistent/out")


@pytest.mark.parametrize(
    "flag,value,reason",
    [
        ("--epochs", "0", "positive integer"),
        ("--batch-size", "0", "positive integer"),
        ("--seeds", "0", "from 1 to 1000"),
        ("--lr", "0", "> 0"),
        ("--lr", "-1", "> 0"),
        ("--lr", "nan", "finite"),
        ("--lr", "inf", "finite"),
        ("--epochs", "1.5", "not an integer"),
        ("--image-size", "-3", "from 32 to 1024"),
        ("--seed", "-1", "seed"),
        ("--seed", "1.5", "not an integer"),
    ],
)
def test_train_options_are_checked_while_parsing(capsys, flag, value, reason):
    err = parse_error(capsys, *TRAIN, flag, value)
    assert f"argument {flag}" in err and reason in err


@pytest.mark.parametrize(
    "argv",
    [
        ("experiment", "conflicts", "--lr", "nan"),
        ("experiment", "conflicts", "--lr", "-1"),
        ("experiment", "conflicts", "--lr", "inf"),
        ("experiment", "conflicts", "--steps", "0"),
        ("experiment", "conflicts", "--every", "0"),
        ("experiment", "conflicts", "--per-subset", "0"),
        ("experiment", "conflicts", "--min-images", "0"),
        ("experiment", "conflicts", "--seed", "-1"),
        ("experiment", "clustered", "--k", "0"),
        ("experiment", "clustered", "--k", "1"),
        ("experiment", "clustered", "--n-init", "0"),
        ("experiment", "clustered", "--seed", "-2"),
        ("experiment", "ood-levels", "--seeds", "0"),
        ("experiment", "ood-levels", "--epochs", "0"),
        ("experiment", "paper-dg", "--seed", "-1"),
        ("experiment", "paper-dg", "--epochs", "0"),
    ],
)
def test_experiment_options_are_checked_while_parsing(capsys, argv):
    err = parse_error(capsys, *argv, "--artifact", "/nonexistent-artifact", "--out", "/nonexistent/out")
    assert f"argument {argv[2]}" in err


@pytest.mark.parametrize(
    "argv",
    [
        ("tasks", "show", "class-cat", "--artifact", "A", "--seed", "-1"),
        ("score", "--task", "class-cat", "--artifact", "A", "--predictions", "p.csv", "--out", "o", "--seed", "-1"),
        ("export", "class-cat", "--artifact", "A", "--out", "o", "--seed", "-1"),
        ("bugs", "--task", "class-cat", "--artifact", "A", "--predictions", "p.csv", "--out", "o", "--alpha", "nan"),
        ("bugs", "--task", "class-cat", "--artifact", "A", "--predictions", "p.csv", "--out", "o", "--min-n", "0"),
        ("evaluate", "--model", "m", "--task", "class-cat", "--out", "o", "--batch-size", "0"),
        ("evaluate", "--model", "m", "--task", "class-cat", "--out", "o", "--alpha", "1"),
        ("demo", "--seed", "-1"),
        ("demo", "--n-images", "0"),
        ("build", "--tags", "t.csv", "--out", "o", "--workers", "0"),
        ("match", "--artifact", "A", "--level", "-1"),
    ],
)
def test_seeds_and_numbers_of_other_commands_are_checked_while_parsing(capsys, argv):
    err = parse_error(capsys, *argv)
    assert f"argument {argv[-2]}" in err


@pytest.mark.parametrize(
    "argv",
    [
        ("download", "--what", "attributes", "--timeout", "inf"),
        ("publish", "--namespace", "tester", "--from-export", "TMP", "--timeout", "inf"),
    ],
)
def test_timeouts_are_finite(capsys, tmp_path, argv):
    """Checked by the command (one error line) before any network use; an infinite timeout ran before."""
    argv = [tmp_path if a == "TMP" else a for a in argv]
    code, _, err = run_cli(capsys, *argv, *(("--manifest", tmp_path / "m.json") if argv[0] == "download" else ()))
    assert_one_line_error(code, err, argv[-2])


@pytest.mark.parametrize(
    "field,value",
    [
        ("epochs", 0),
        ("batch_size", 0),
        ("lr", 0.0),
        ("lr", -1.0),
        ("lr", math.nan),
        ("lr", math.inf),
        ("seeds", 0),
        ("seeds", -1),
        ("seeds", 1.5),
        ("seeds", None),
        ("seeds", {"a": 1}),
        ("epochs", 2.5),
        ("weight_decay", -0.1),
        ("weight_decay", math.nan),
        ("image_size", 0),
        ("epochs", True),
        ("device", None),
    ],
)
def test_train_config_refuses_what_it_used_to_replace_by_a_default(field, value):
    with pytest.raises(opt.OptionError):
        TrainConfig(**{field: value}).resolved()


def test_train_config_none_takes_the_probes_defaults():
    cfg = TrainConfig(probe="linear").resolved()
    assert (cfg.epochs, cfg.lr, cfg.batch_size) == (50, 1e-3, 64)
    assert TrainConfig(epochs=3, lr=0.5, batch_size=7).resolved().epochs == 3


@pytest.mark.parametrize("seed", [-1, 1.5, True, "x", 2**32, float("nan")])
def test_plan_refuses_seeds_that_are_not_seeds(art, seed):
    with pytest.raises(opt.OptionError, match="seed"):
        api.plan(TaskRef("class-cat", artifact=art, seed=seed))


def test_a_task_ref_without_a_seed_plans_with_the_default_seed(art):
    assert api.plan(TaskRef("class-cat", artifact=art, seed=None)).spec.seed == DEFAULT_SEED


def test_plan_and_prepare_name_wrong_argument_types(art, tmp_path):
    with pytest.raises(UnknownNameError, match="made from an artifact, and none was given"):
        api.plan(TaskRef("class-cat", artifact=None))
    with pytest.raises(opt.OptionError, match="task must be a string"):
        api.plan(TaskRef({"task": "class-cat"}, artifact=art))
    with pytest.raises(opt.OptionError, match="seed=1.5"):
        api.prepare(TaskRef("class-cat", artifact=art, images=tmp_path, seed=1.5))
    with pytest.raises(opt.OptionError, match="on_missing"):
        api.prepare(TaskRef("class-cat", artifact=art, images=tmp_path), on_missing="ignore")
    assert api.plan(TaskRef("class-cat", artifact=art, seed=3)).spec.seed == 3


def test_score_refuses_a_bare_string_of_splits(art):
    tp = api.plan(TaskRef("class-cat", artifact=art))
    preds = {"image_id": list(tp.table()["image_id"]), "prediction": ["cat"] * len(tp.table())}
    with pytest.raises(opt.OptionError, match=r"splits=\['train'\]"):
        score_plan(preds, tp, splits="train")
    with pytest.raises(opt.OptionError, match="more than once"):
        score_plan(preds, tp, splits=["train", "train"])
    assert score_plan(preds, tp, splits=["train"]).headline.average == 1.0


def test_evaluate_checks_its_numbers_before_loading_a_model(art):
    for kw in (
        {"batch_size": 1.5},
        {"alpha": math.nan},
        {"seed": -1},
        {"sample": 0},
        {"workers": 0},
        {"on_missing": "maybe"},
    ):
        with pytest.raises(opt.OptionError):
            evaluate("no-such-model", TaskRef("class-cat", artifact=art), settings=EvalConfig(**kw))


def test_eval_config_is_checked_once_when_made_and_frozen():
    with pytest.raises(UnknownNameError, match="scoring mode"):  # was found only after the model ran
        EvalConfig(mode="hierarchical")
    with pytest.raises(opt.OptionError, match="splits"):  # a bare 'test' would be read letter by letter
        EvalConfig(splits="test")
    cfg = EvalConfig(batch_size=4, splits=["test"], alpha=0.1)
    assert (cfg.batch_size, cfg.splits) == (4, ("test",))
    with pytest.raises(AttributeError):
        cfg.seed = 3  # type: ignore[misc]


def test_the_zoo_refuses_on_missing_skip_before_loading_a_model(art):
    from metashift_hf.evaluate.zoo import evaluate_zoo

    with pytest.raises(opt.OptionError, match="not to a zoo"):
        evaluate_zoo(
            ["no-such-model"], ["class-cat"], TaskOrigin(artifact=art), settings=EvalConfig(on_missing="skip")
        )


def _origin(art, tmp_path) -> TaskOrigin:
    return TaskOrigin(artifact=art, images=tmp_path / "images")


@pytest.fixture
def no_features(monkeypatch):
    """Any attempt to load a backbone or embed an image fails the test: checks must come first."""

    def refuse(*a, **k):
        raise AssertionError("features were computed before the options were checked")

    monkeypatch.setattr(ood_experiments, "load_backbone", refuse)
    monkeypatch.setattr(ood_experiments, "image_features", refuse)


@pytest.mark.parametrize(
    "kw,error,needle",
    [
        ({"k": 1}, opt.OptionError, "k=1"),
        ({"k": 0}, opt.OptionError, "k=0"),
        ({"n_init": 0}, opt.OptionError, "n_init"),
        ({"seed": -1}, opt.OptionError, "seed"),
        ({"training": TrainConfig(seeds=0)}, opt.OptionError, "seeds"),
        ({"classes": ("cat", "cat")}, opt.OptionError, "more than once"),
        ({"classes": ("cat", "zebra")}, UnknownNameError, "'zebra' is not a class"),
        ({"classes": "cat"}, opt.OptionError, "list of names"),
        ({"k": 10_000}, EmptyResultError, "fewer than k=10000"),
    ],
)
def test_clustered_checks_k_and_classes_before_any_image_is_embedded(art, tmp_path, no_features, kw, error, needle):
    with pytest.raises(error, match=needle):
        ood_experiments.clustered(_origin(art, tmp_path), tmp_path / "out", ood_experiments.ClusteredConfig(**kw))


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"run": ConflictConfig(lr=math.nan)}, "lr"),
        ({"run": ConflictConfig(lr=-1.0)}, "lr"),
        ({"run": ConflictConfig(lr=math.inf)}, "lr"),
        ({"run": ConflictConfig(seed=-1)}, "seed"),
        ({"run": ConflictConfig(steps=10, every=20)}, "two windows"),
        ({"per_subset": 0}, "per_subset"),
        ({"subsets": ["cat(ctx0)", "cat(ctx0)"]}, "more than once"),
        ({"classes": ("cat", "unicorn")}, "unicorn"),
    ],
)
def test_conflicts_checks_its_options_before_any_image_is_embedded(art, tmp_path, no_features, kw, needle):
    with pytest.raises(MetashiftError, match=needle):
        ood_experiments.conflicts(_origin(art, tmp_path), tmp_path / "out", ood_experiments.ConflictsConfig(**kw))


def test_conflicts_fix_names_no_option_that_does_not_exist(art, tmp_path, no_features):
    with pytest.raises(EmptyResultError) as exc:  # 40 images per subset: nothing left after a 50-image draw
        ood_experiments.conflicts(
            _origin(art, tmp_path), tmp_path / "out", ood_experiments.ConflictsConfig(min_images=1, min_eval=40)
        )
    assert "--min-eval" not in exc.value.fix and "--per-subset" in exc.value.fix


def test_ood_levels_checks_models_and_seeds_before_planning(art, tmp_path, no_features):
    with pytest.raises(opt.OptionError, match="epochs"):
        ood_experiments.ood_levels(
            _origin(art, tmp_path), tmp_path / "out", ood_experiments.OodLevelsConfig(training=TrainConfig(epochs=0))
        )
    with pytest.raises(opt.OptionError, match="models"):
        ood_experiments.ood_levels(
            _origin(art, tmp_path), tmp_path / "out", ood_experiments.OodLevelsConfig(models="erm")
        )


def test_tasks_list_names_only_the_filters_given(capsys, art):
    code, _, err = run_cli(capsys, "tasks", "list", "--artifact", art.root, "--class", "zebra")
    assert code == 2 and "--class zebra" in err and "None" not in err


def test_validators_as_argparse_types_and_python_checks():
    assert opt.positive_int("7") == 7 and opt.positive_int(7, "n") == 7
    assert opt.seed(" 42 ") == 42 and opt.seed(opt.SEED_MAX) == opt.SEED_MAX
    assert opt.positive_float("1e-3") == 1e-3 and opt.probability(1) == 1.0
    assert opt.names(["b", "a"], "classes") == ("b", "a")
    assert opt.int_at_least(2)("2") == 2
    assert opt.path(Path("x"), "artifact") == Path("x")
    for check, value in (
        (opt.positive_int, "0x10"),
        (opt.seed, 2**32),
        (opt.level, 0),
        (opt.level, 1),
        (opt.non_negative_float, "-0.5"),
        (opt.probability, 1.01),
        (opt.text, ""),
        (opt.names, ["a", ""]),
    ):
        with pytest.raises(opt.OptionError):
            check(value, "x")
