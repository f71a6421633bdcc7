"""Issue 36: `experiment compare`'s ± is DomainBed's and SubpopBench's (np.std(ddof=0) / sqrt(n)) by default, the
other estimators behind --spread, labelled."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from metashift_hf.research.compare import (
    COLUMNS,
    SPREAD_TEXT,
    SPREADS,
    domainbed_se,
    header,
    results_tables,
    summary_frame,
)


def format_mean(data, latex):
    """A copy of ``format_mean`` in facebookresearch/DomainBed domainbed/scripts/collect_results.py (commit
    27e115e; YyzHarry/SubpopBench subpopbench/scripts/collect_results.py has the same two lines): mean and
    standard error, both x100."""
    if len(data) == 0:
        return None, None, "X"
    mean = 100 * np.mean(list(data))
    err = 100 * np.std(list(data) / np.sqrt(len(data)))
    if latex:
        return mean, err, "{:.1f} $\\pm$ {:.1f}".format(mean, err)
    else:
        return mean, err, "{:.1f} +/- {:.1f}".format(mean, err)


SEEDS = {
    ("t1", "erm"): [0.5, 0.6, 0.7],
    ("t1", "dfr"): [0.3125, 0.4479166666666667, 0.4166666666666667],
    ("t2", "erm"): [0.2, 0.25, 0.2, 0.1875, 0.3],
    ("t2", "dfr"): [0.71, 0.69],
}


def _table() -> pd.DataFrame:
    rows = [
        (t, m, s, "average", 0, True, "shuffle", "worst_group", v, None, None)
        for (t, m), vs in SEEDS.items()
        for s, v in enumerate(vs)
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_default_spread_is_domainbeds_format_mean_to_the_last_digit():
    summ = summary_frame(_table()).set_index(["task", "method"])
    md = results_tables(_table(), ["erm", "dfr"], ["t1", "t2"], {"erm": "average", "dfr": "average"})
    for key, values in SEEDS.items():
        mean, err, text = format_mean(values, latex=False)
        assert 100 * summ.loc[key, "se"] == err and 100 * domainbed_se(values) == err
        assert 100 * summ.loc[key, "mean"] == pytest.approx(mean, rel=1e-15)
        assert text.replace(" +/- ", " ± ") + "%" in md  # the printed cell is theirs
        # the estimator the header used to claim (ddof 1) is sqrt(n / (n - 1)) times theirs: behind --spread
        n = len(values)
        assert summ.loc[key, "se-ddof1"] == pytest.approx(np.std(values, ddof=1) / np.sqrt(n), rel=1e-12)
        assert summ.loc[key, "se-ddof1"] == pytest.approx(summ.loc[key, "se"] * np.sqrt(n / (n - 1)), rel=1e-12)


def test_each_spread_is_labelled_where_the_table_says_what_it_prints():
    assert SPREADS[0] == "se" and set(SPREAD_TEXT) == set(SPREADS)
    assert "ddof=0" in SPREAD_TEXT["se"] and "DomainBed" in SPREAD_TEXT["se"]
    assert "ddof=1" in SPREAD_TEXT["se-ddof1"] and "ddof 1" in SPREAD_TEXT["std"]
    for spread in SPREADS:
        assert SPREAD_TEXT[spread] in header("linear", "bb", [0, 1, 2], ["erm"], {"erm": "average"}, spread)
    one = _table()[lambda t: t.seed == 0]
    assert "±" not in results_tables(one, ["erm"], ["t1"], {"erm": "average"})  # one seed: no spread at all


def test_a_second_comparison_into_the_same_out_is_refused_before_training(tmp_path, monkeypatch):
    """Two `experiment compare` runs into one --out at once: the second gets a clear error, before any check or
    training (it used to train and then fail on the first one's files with an OSError)."""
    import fcntl

    from metashift_hf.core.fsutil import MARKER, OutputExistsError, claim_dir
    from metashift_hf.hub.task_open import TaskOrigin
    from metashift_hf.research import compare

    out = claim_dir(tmp_path / "cmp", compare.COMPARE_KIND)
    monkeypatch.setattr(compare, "train", lambda *a, **k: pytest.fail("trained while another run holds --out"))
    monkeypatch.setattr(TaskOrigin, "open", lambda *a, **k: pytest.fail("opened tasks while another run holds --out"))
    origin = TaskOrigin(artifact=tmp_path / "no-artifact")
    with open(out / MARKER, "rb") as held:  # what the running comparison holds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OutputExistsError, match="another experiment compare is writing into") as err:
            compare.run_compare(["erm"], ["paper-subpop-cat-dog-p12"], origin, out)
        assert "new --out" in err.value.fix
    assert (out / MARKER).is_file()  # the other run's folder is left as it was


@pytest.mark.slow  # ~40 s on 2 busy cores: four small comparisons on the zoo world with a tiny backbone
def test_select_all_trains_once_per_seed_and_each_rule_equals_its_own_run(tmp_path, monkeypatch):
    """--select all used to train every method once per rule (three identical trajectories). Now each seed is
    trained once (as many fits as one rule's comparison) and each rule's arm equals a comparison run under that
    rule alone: the same kept epoch, predictions and scores."""
    pytest.importorskip("torch")
    from fixtures.tasks import sample_jpegs
    from fixtures.worlds import matched_cat_dog_artifact
    from fixtures.zoo import tiny_backbone
    from metashift_hf.hub.task_open import TaskOrigin
    from metashift_hf.research import compare, train
    from metashift_hf.research.compare import CompareOptions
    from metashift_hf.research.train import TrainConfig

    subsets = matched_cat_dog_artifact(tmp_path)
    sample_jpegs(tmp_path / "images", names=sorted({i for v in subsets.values() for i in v}))
    bb = tiny_backbone()
    monkeypatch.setattr(compare, "load_backbone", lambda *a, **k: bb)
    fits = []
    real_fit = train.fit_seed
    monkeypatch.setattr(train, "fit_seed", lambda *a, **k: fits.append(a[4]) or real_fit(*a, **k))
    origin = TaskOrigin(artifact=tmp_path / "artifact", images=tmp_path / "images")
    cfg = TrainConfig(epochs=4, seeds=2)

    def run(name: str, rules: tuple[str, ...]) -> int:
        fits.clear()
        compare.run_compare(
            ["erm", "groupdro", "dfr"], ["bin-cat-dog"], origin, tmp_path / name, cfg,
            cache_dir=tmp_path / "cache", progress=False, options=CompareOptions(selections=rules),
        )  # fmt: skip
        return len(fits)

    rules = ("average", "worst-group", "oracle")
    assert run("all", rules) == 3 * 2  # methods x seeds: one training per seed, not one per rule
    for rule in rules:
        assert run(rule, (rule,)) == 3 * 2  # what one rule alone costs
        for method in ("erm", "groupdro", "dfr"):
            for seed in (0, 1):
                shared = tmp_path / "all" / "runs" / "bin-cat-dog" / f"{method}-{rule}" / f"seed-{seed}"
                alone = tmp_path / rule / "runs" / "bin-cat-dog" / method / f"seed-{seed}"
                # DFR's logistic regressions differ by ~1e-5 from one run to the next (BLAS threads; as before)
                exact = {} if method != "dfr" else {"check_exact": False, "atol": 1e-4}
                pd.testing.assert_frame_equal(
                    pd.read_csv(shared / "predictions.csv"), pd.read_csv(alone / "predictions.csv"), **exact
                )
                a, b = (json.loads((d / "scores.json").read_text()) for d in (shared, alone))
                if method != "dfr":
                    assert a["worst_group"] == b["worst_group"] and a["average"] == b["average"]
                ra, rb = (json.loads((d / "run.json").read_text()) for d in (shared, alone))
                assert ra["selected_epoch"] == rb["selected_epoch"], (method, rule, seed)
