"""metashift_hf.research.algorithms + metashift_hf.research.fitting on arrays (no images): each algorithm on a world whose
answer is known, model selection, sampling, seeds, and resume equal to an uninterrupted run."""

from __future__ import annotations

import numpy as np
import pytest

from metashift_hf.core.errors import MetashiftError
from metashift_hf.research.algorithms import (
    ALGORITHMS,
    HPARAMS,
    SELECTIONS,
    algorithm_info,
    balanced_batches,
    default_selection,
    dfr_fit,
    resolve_hparams,
    selection_score,
)
from metashift_hf.research.train import TrainConfig, config_toml, load_config, parse_seeds


torch = pytest.importorskip("torch")
fitting = pytest.importorskip("metashift_hf.research.fitting")


def planted_world(seed: int = 0, minority: float = 0.05, dim: int = 8):
    """Two classes, two contexts; the context is a strong, clean feature that agrees with the class on 95% of
    training (and validation) rows, the class a weak, noisy one; the test split is balanced over the four
    groups. ERM leans on the context and fails the minority groups; group-robust methods should not."""
    rng = np.random.default_rng(seed)

    def split(n: int, p_min: float):
        y = rng.integers(0, 2, n)
        a = np.where(rng.random(n) < p_min, 1 - y, y)
        core = (2 * y - 1) * 1.0 + rng.normal(0, 1.0, n)
        spurious = (2 * a - 1) * 2.0 + rng.normal(0, 0.3, n)
        x = np.column_stack([core, spurious, rng.normal(0, 1, (n, dim - 2))]).astype(np.float32)
        groups = np.array([f"{'cat' if c == 0 else 'dog'}({'indoor' if t == 0 else 'outdoor'})" for c, t in zip(y, a)])
        return x, y.astype(np.int64), groups, a.astype(np.int64)

    xs, ys, gs = {}, {}, {}
    for s, n, p in (("train", 2000, minority), ("validation", 600, minority), ("test", 800, 0.5)):
        xs[s], ys[s], gs[s], a = split(n, p)
        if s == "train":
            envs = a
    codes = np.unique(gs["train"], return_inverse=True)[1].astype(np.int64)
    return xs, fitting.FitData(ys, gs, codes, envs, 2)


@pytest.fixture(scope="module")
def world():
    torch.set_num_threads(1)  # tiny matrices: threads only add synchronisation
    return planted_world()


def fit(world, method, *, select=None, sampling="shuffle", epochs=12, seed=0, ckpt=None, **hp):
    xs, data = world
    s = fitting.FitSettings(
        method,
        resolve_hparams(method, hp),
        select or default_selection(method),
        sampling,
        epochs,
        1e-2,
        64,
        0.0,
        "cpu",
    )
    return fitting.fit_seed(torch, fitting.LinearLearner(torch, xs, 2, "cpu"), data, s, seed, ckpt=ckpt)


def worst_group(world, result) -> float:
    _, data = world
    correct = result.probs["test"].argmax(1) == data.y["test"]
    return selection_score(correct, data.groups["test"], "worst-group")


@pytest.fixture(scope="module")
def erm(world):
    return fit(world, "erm")


def test_erm_learns_the_planted_shortcut(world, erm):
    assert worst_group(world, erm) < 0.5  # the minority groups are mostly wrong


@pytest.mark.parametrize("method", ["groupdro", "reweight", "dfr", "jtt", "coral"])
def test_group_robust_methods_beat_erm_on_the_worst_group(world, erm, method):
    # GroupDRO/reweight/JTT/DFR use the groups (or ERM's errors) to stop leaning on the context; CORAL matches
    # the representation across contexts (the environments), which removes the context from the logits
    assert worst_group(world, fit(world, method)) > worst_group(world, erm) + 0.15


def test_jtt_error_set_is_mostly_the_minority_groups(world):
    details = fit(world, "jtt").details["jtt"]
    minority = details["error_set_by_group"]["cat(outdoor)"] + details["error_set_by_group"]["dog(indoor)"]
    assert details["error_set"] > 0 and minority > 0.7 * details["error_set"]


def test_dfr_picks_c_on_held_out_validation_and_reports_it(world):
    info = fit(world, "dfr").details["dfr"]
    assert info["C"] in (1.0, 0.7, 0.3, 0.1, 0.07, 0.03, 0.01)
    assert info["fit_rows"] + info["tune_rows"] == 600 and info["C_scores"][str(info["C"])] == max(
        info["C_scores"].values()
    )


def test_irm_penalty_is_the_squared_gradient_of_the_scaled_risk():
    """IRMv1: the penalty is grad_w R(w * logits)|_{w=1} squared, estimated from two halves of the batch."""
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.5], [-1.0, 1.5], [1.0, 0.0]], requires_grad=True)
    y = torch.tensor([0, 1, 1, 0])
    e = torch.zeros(4, dtype=torch.long)
    # the anneal is a share of the run: anneal_frac 0.5 of 4 updates = the penalty weight is 1 for updates 0 and 1
    algo = ALGORITHMS["irm"](
        torch, {"lambda": 10.0, "anneal_frac": 0.5}, np.zeros(4, np.int64), 1, np.zeros(4, np.int64), 1, "cpu"
    )
    algo.set_run(4)
    assert algo.schedule() == {"lambda": 2}

    def grad_w(lg, yy):  # d/dw mean CE(w * logits) at w = 1 = mean((softmax - onehot) . logits)
        p = torch.softmax(lg, 1)
        return ((p - torch.nn.functional.one_hot(yy, 2)) * lg).sum(1).mean()

    want_penalty = grad_w(logits[::2], y[::2]) * grad_w(logits[1::2], y[1::2])
    nll = torch.nn.functional.cross_entropy(logits, y)
    # before annealing the penalty weight is 1; the optimiser restarts exactly once, at the anneal step
    assert float(algo.loss(lambda x: (x, x), logits, y, e, e, e).detach()) == pytest.approx(
        float((nll + want_penalty).detach()), rel=1e-5
    )
    assert not algo.resets_optimizer()
    algo.loss(lambda x: (x, x), logits, y, e, e, e)
    assert algo.resets_optimizer()
    got = algo.loss(lambda x: (x, x), logits, y, e, e, e).detach()
    assert float(got) == pytest.approx(float((nll + 10.0 * want_penalty).detach() / 10.0), rel=1e-5)
    assert not algo.resets_optimizer()


def test_irm_runs_on_the_world(world):
    result = fit(world, "irm", epochs=3, anneal_frac=0.2)
    assert result.selected_epoch in (1, 2, 3) and np.isfinite([e["train_loss"] for e in result.log]).all()


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_every_scheduled_hyper_parameter_takes_effect_within_the_run(world, method, caplog):
    """Issue 26.2: IRM's anneal was 500 steps, beyond every probe run's end. A schedule is a share of the run
    now: in a short run (3 epochs of 32 batches) each scheduled switch falls before the last update, the
    log says where, and no warning about a dead schedule is given."""
    result = fit(world, method, epochs=3)
    entries = [e for e in result.log if "schedule" in e]
    algo = ALGORITHMS[method](
        torch, resolve_hparams(method), np.zeros(4, np.int64), 1, np.zeros(4, np.int64), 1, "cpu"
    )
    algo.set_run(10)
    if algo.schedule():  # a scheduled method logs its switch steps with the stage's length, every epoch
        assert entries and all(0 < v < e["total_steps"] for e in entries for v in e["schedule"].values())
        assert entries[0]["total_steps"] == 3 * 32  # 2000 rows in batches of 64
    if method == "jtt":  # JTT's schedule is in epochs: the identification stage ends before the run does
        assert 1 <= result.details["jtt"]["identification_epochs"] < 3
    assert "never take effect" not in caplog.text


def test_a_schedule_that_cannot_fire_is_warned_about(world, caplog):
    """One update: IRM's anneal (at least update 1) cannot happen, and the loop says so."""
    xs, data = world
    s = fitting.FitSettings("irm", resolve_hparams("irm"), "average", "shuffle", 1, 1e-2, 4000, 0.0, "cpu")
    fitting.fit_seed(torch, fitting.LinearLearner(torch, xs, 2, "cpu"), data, s, 0)
    assert "never take effect" in caplog.text and "lambda (step 1)" in caplog.text


def test_coral_penalty_is_zero_for_equal_environments_and_aligns_logits(world, erm):
    a = torch.randn(10, 3)
    assert float(ALGORITHMS["coral"]._coral(a, a.clone())) == 0.0
    xs, data = world

    def gap(result):  # distance between the two contexts' mean training logits under the kept head
        lg = np.log(result.probs["train"])
        return np.abs(lg[data.train_envs == 0].mean(0) - lg[data.train_envs == 1].mean(0)).sum()

    assert gap(fit(world, "coral", gamma=10.0)) < 0.5 * gap(erm)


def test_mixup_mixes_pairs_and_softens_predictions(world):
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    algo = ALGORITHMS["mixup"](torch, {"alpha": 0.2}, np.zeros(2, np.int64), 1, np.zeros(2, np.int64), 1, "cpu")
    algo.rng = np.random.default_rng(5)
    rng = np.random.default_rng(5)  # the same draws the algorithm makes
    lam = float(rng.beta(0.2, 0.2))
    perm = torch.from_numpy(rng.permutation(2))
    mixed = lam * x + (1 - lam) * x[perm]
    ce = torch.nn.functional.cross_entropy
    want = lam * ce(mixed, y) + (1 - lam) * ce(mixed, y[perm])
    assert float(algo.loss(lambda z: (z, z), x, y, y, y, y)) == pytest.approx(float(want), rel=1e-6)
    # mixup's known effect: after the same training, less confident predictions than ERM (the last epoch of
    # each, so that the selection of an early epoch does not hide it)
    xs, data = world

    def last_epoch_confidence(method, **hp):
        s = fitting.FitSettings(method, resolve_hparams(method, hp), "average", "shuffle", 12, 1e-2, 64, 0.0, "cpu")
        learner = fitting.LinearLearner(torch, xs, 2, "cpu")
        rule = ALGORITHMS[method](
            torch, s.hparams, data.train_groups, data.n_groups, data.train_envs, data.n_envs, "cpu"
        )
        loop = fitting.SeedLoop(torch, learner, data, s, 0, None, False)
        module, _, _ = loop.stage(rule, "train", 12, None)
        return learner.probs(module, ["train"])["train"].max(1).mean()

    assert last_epoch_confidence("mixup", alpha=1.0) < last_epoch_confidence("erm") - 0.01


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_every_algorithm_is_documented_and_has_a_literature_selection(method):
    info = algorithm_info(method)
    assert info.reference and info.definition and info.differs and info.default_selection in SELECTIONS
    assert info.hparams == HPARAMS[method]
    if method in ("groupdro", "jtt", "dfr", "reweight"):
        assert info.default_selection == "worst-group"


def test_selection_rules_pick_different_epochs_and_oracle_reads_test(world):
    by_avg = fit(world, "groupdro", select="average")
    by_wg = fit(world, "groupdro", select="worst-group")
    oracle = fit(world, "groupdro", select="oracle")
    log = by_wg.log
    assert by_avg.selection_value == max(e["validation_average"] for e in by_avg.log)
    assert by_wg.selection_value == max(e["validation_worst_group"] for e in log)
    assert "test_worst_group" in oracle.log[0] and "test_worst_group" not in log[0]  # only the oracle reads test
    assert worst_group(world, oracle) >= max(worst_group(world, by_avg), worst_group(world, by_wg)) - 1e-9


def test_balanced_sampling_draws_each_key_evenly():
    keys = np.array([0] * 90 + [1] * 10)
    batches = balanced_batches(keys, 10, 20, np.random.default_rng(0))
    counts = np.array([np.bincount(keys[b], minlength=2) for b in batches])
    assert (counts == 5).all()  # the 10 minority rows are cycled, each epoch's batches half minority
    assert set(np.concatenate(batches)[keys[np.concatenate(batches)] == 1]) == set(range(90, 100))


def test_group_balanced_sampling_helps_erm_and_domain_balanced_does_not(world, erm):
    assert worst_group(world, fit(world, "erm", sampling="group-balanced")) > worst_group(world, erm) + 0.15
    # DomainBed's balance is over contexts: each context is still 95% one class, so the shortcut stays
    assert abs(worst_group(world, fit(world, "erm", sampling="domain-balanced")) - worst_group(world, erm)) < 0.1


def test_resume_from_an_epoch_checkpoint_equals_the_uninterrupted_run(world, tmp_path):
    whole = fit(world, "groupdro", epochs=6)
    ck = fitting.Checkpoints(tmp_path, torch, resume=False)
    fit(world, "groupdro", epochs=3, ckpt=ck)  # "interrupted" after epoch 3 (its checkpoint is kept)
    resumed = fit(world, "groupdro", epochs=6, ckpt=fitting.Checkpoints(tmp_path, torch, resume=True))
    np.testing.assert_array_equal(resumed.probs["test"], whole.probs["test"])
    assert resumed.selected_epoch == whole.selected_epoch and [e["epoch"] for e in resumed.log] == list(range(1, 7))


def test_same_seed_same_result_other_seed_other_result(world):
    a, b, c = fit(world, "mixup", epochs=2), fit(world, "mixup", epochs=2), fit(world, "mixup", epochs=2, seed=1)
    np.testing.assert_array_equal(a.probs["test"], b.probs["test"])
    assert not np.array_equal(a.probs["test"], c.probs["test"])


def test_seeds_as_counts_ranges_and_lists():
    assert parse_seeds(3) == (0, 1, 2) and parse_seeds("3") == (0, 1, 2)
    assert (
        parse_seeds("3-5") == (3, 4, 5) and parse_seeds("0,2,5-6") == (0, 2, 5, 6) and parse_seeds([4, 1, 4]) == (1, 4)
    )
    for bad in ("5-3", "a", "-1", "", 0, [], [-1], True):
        with pytest.raises(MetashiftError):
            parse_seeds(bad)


def test_hyper_parameters_and_settings_are_checked():
    with pytest.raises(MetashiftError, match="no hyper-parameter"):
        resolve_hparams("groupdro", {"lambda": 1.0})
    with pytest.raises(MetashiftError, match="out of range"):
        resolve_hparams("jtt", {"lambda_up": -1.0})
    for bad in ({"method": "sgd"}, {"select": "best"}, {"sampling": "even"}, {"hparams": {"eta": 0}}):
        with pytest.raises(MetashiftError):
            TrainConfig(**bad).resolved()
    cfg = TrainConfig(method="groupdro", seeds="3-4").resolved()
    assert cfg.select == "worst-group" and cfg.seeds == (3, 4) and cfg.hparams == {"eta": 0.01}


def test_config_file_round_trip(tmp_path):
    cfg = TrainConfig(
        method="jtt",
        seeds="1-2",
        epochs=7,
        lr=0.003,
        select="oracle",
        sampling="group-balanced",
        hparams={"lambda_up": 20},
    ).resolved()
    path = tmp_path / "config.toml"
    path.write_text(config_toml(cfg))
    assert TrainConfig(**load_config(path)).resolved() == cfg
    path.write_text('method = "erm"\nlearning_rate = 1\n')
    with pytest.raises(MetashiftError, match="learning_rate"):
        load_config(path)
    path.write_text("method = [\n")
    with pytest.raises(MetashiftError, match="TOML"):
        load_config(path)


def test_compare_shares_hyper_parameters_by_method_prefix():
    from metashift_hf.research.compare import method_hparams

    hp = {"groupdro.eta": 0.05, "jtt.lambda_up": 20.0}
    assert method_hparams(hp, "groupdro", ["erm", "groupdro", "jtt"]) == {"eta": 0.05}
    assert method_hparams(hp, "erm", ["erm", "groupdro", "jtt"]) == {}
    with pytest.raises(MetashiftError, match="not compared"):
        method_hparams({"irm.lambda": 1.0}, "erm", ["erm"])


def test_dfr_refits_as_the_reference_and_says_how_it_standardises():
    """DFR^Val (dfr_evaluate_spurious.py, dfr_on_validation_eval) averages 20 re-fits; the docs name the scaler."""
    assert HPARAMS["dfr"]["retrains"] == 20
    differs = algorithm_info("dfr").differs
    assert "training split's mean and std" in differs and "C tuning" in differs


@pytest.mark.parametrize("method", sorted(ALGORITHMS))
def test_random_search_draws_are_deterministic_checked_and_draw_0_is_the_default(method):
    from metashift_hf.research.algorithms import SWEEP_COMMON, sample_hparams

    assert sample_hparams(method, 0) == HPARAMS[method]
    a, b, other = sample_hparams(method, 1, 7), sample_hparams(method, 1, 7), sample_hparams(method, 1, 8)
    assert a == b and a != other and set(a) == set(HPARAMS[method]) | set(SWEEP_COMMON)
    resolve_hparams(method, {k: v for k, v in a.items() if k not in SWEEP_COMMON})  # every draw passes the checks
    assert 1e-4 <= a["lr"] <= 1e-2


def test_dfr_fit_is_a_function_of_its_seed_alone():
    """liblinear shuffles rows with numpy's global state unless given random_state: the same inputs and
    seed gave heads ~1e-5 apart depending on what ran before (determinism rule)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 16))
    y = (x[:, 0] + 0.5 * rng.normal(size=200) > 0).astype(int)
    g = y * 2 + (x[:, 1] > 0)
    heads = []
    for state in (0, 1, 2):
        np.random.seed(state)  # what an earlier library call may leave behind
        w, b, _ = dfr_fit(x, y, g, 2, HPARAMS["dfr"], "worst-group", 0)
        heads.append(np.concatenate([w.ravel(), b]))
    assert all(np.array_equal(heads[0], h) for h in heads[1:])


@pytest.mark.parametrize("method", ["erm", "jtt", "dfr"])
def test_every_rule_trained_together_logs_its_own_selected_epoch(world, method):
    """Issue 46 (new-user round): under ``--select all`` every worst-group and oracle run folder's log.jsonl recorded
    the validation-average rule's selected_epoch (29 of 54 disagreed with the folder's scores). Each rule's fit now
    carries a log whose selected_epoch is its own (DFR: its own C)."""
    xs, data = world
    s = fitting.FitSettings(
        method, resolve_hparams(method, {}), "average", "shuffle", 12, 1e-2, 64, 0.0, "cpu", ("worst-group", "oracle")
    )
    fit_ = fitting.fit_seed(torch, fitting.LinearLearner(torch, xs, 2, "cpu"), data, s, 0)
    assert set(fit_.others) == {"worst-group", "oracle"}
    for result in (fit_, *fit_.others.values()):
        last = result.log[-1]
        assert last["selected_epoch" if method != "dfr" else "epoch"] == result.selected_epoch
        assert all(fitting.RULE_EPOCHS not in e for e in result.log)  # the bookkeeping stays out of log.jsonl
        if method == "dfr":
            assert last["C"] == result.details["dfr"]["C"] and last["selection_value"] == result.selection_value
    if method == "erm":  # the planted world: the rules keep different epochs, so the test can fail
        assert len({r.selected_epoch for r in (fit_, *fit_.others.values())}) > 1
