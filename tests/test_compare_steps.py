"""Issue 45 part 3 and issue 46 D13: a default comparison whose methods have different selection rules writes a
header naming each method's rule (not a section per rule it does not write); a refusal of an earlier comparison's
--out suggests method names and the earlier comparison's flags, never arm folders (erm-average) as methods."""

from __future__ import annotations

import pandas as pd
import pytest

from metashift_hf.core.fsutil import OutputExistsError
from metashift_hf.research.algorithms import METHODS, SELECTION_TEXT, SELECTIONS
from metashift_hf.research.compare import COLUMNS, CompareResult, header, plan_arms, results_tables, rule_sections
from metashift_hf.research.compare_runs import check_covers_earlier
from metashift_hf.research.train_config import TrainConfig


def _table(rules: dict[str, list[str]]) -> pd.DataFrame:
    rows = [
        ("t1", m, seed, rule, 0, True, "shuffle", metric, 0.5 + 0.1 * seed, None, None)
        for m, rs in rules.items()
        for rule in rs
        for seed in (0, 1)
        for metric in ("worst_group", "average")
    ]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_a_default_comparison_header_names_each_methods_rule_and_one_table():
    """Issue 45.3: erm (validation average) and groupdro (worst-group) by default: the header promised 'a section
    per rule below' and dropped each method's rule, while results.md holds one table."""
    own = {"erm": "average", "groupdro": "worst-group"}
    table = _table({m: [r] for m, r in own.items()})
    assert rule_sections(table) is None
    text = header("linear", "bb", [0, 1], list(own), own, rules=rule_sections(table))
    assert "section per rule" not in text and "one table below" in text
    for m, r in own.items():
        assert f"**{m}**" in text and f"{SELECTION_TEXT[r]}" in text.split(f"**{m}**")[1].splitlines()[0]
    assert "### Selection" not in results_tables(table, list(own), ["t1"], own)  # and one table it is
    # results.md as a comparison writes it (its card lists both rules, which the header used to read as sections)
    card = {"backbone": {"name": "bb"}, "selection": own, "selections": ["average", "worst-group"]}
    md = CompareResult(tuple(own), ("t1",), table, TrainConfig(), card).markdown()
    assert "section per rule" not in md and f"**groupdro** (GroupDRO): {SELECTION_TEXT['worst-group']}" in md


def test_a_select_all_header_says_which_sections_follow_in_their_order():
    every = {"erm": list(SELECTIONS), "dfr": list(SELECTIONS)}
    table = _table(every)
    rules = rule_sections(table)
    assert rules == list(SELECTIONS)
    text = header("linear", "bb", [0, 1], ["erm", "dfr"], {"erm": "average", "dfr": "average"}, rules=rules)
    assert "A section per rule follows, in this order:" in text and "**erm** (ERM)" in text
    listed = [line[2:] for line in text.splitlines() if line.startswith("- ")]
    assert listed == [SELECTION_TEXT[r] for r in SELECTIONS]
    md = results_tables(table, ["erm", "dfr"], ["t1"], {})
    assert [line for line in md.splitlines() if line.startswith("### Selection: ")] == [
        f"### Selection: {SELECTION_TEXT[r]}" for r in SELECTIONS
    ]


def _earlier(folder, arms, task="t1"):
    for a in arms:
        (folder / "runs" / task / a.folder).mkdir(parents=True)


@pytest.mark.parametrize("case", ["C-04", "C-05", "C-06"])
def test_a_refusal_of_a_select_all_out_suggests_methods_and_select_all(tmp_path, case):
    """C-04..C-06: `--spread se|se-ddof1|std` into a `--select all` --out was refused with the fix
    '--methods erm,erm-average,erm-oracle,erm-worst-group'; following it (C-30): 'unknown method erm-average'."""
    cfg = TrainConfig(seeds=1)
    _earlier(tmp_path, plan_arms(["erm"], cfg, SELECTIONS))
    now = plan_arms(["erm"], cfg)  # the same call without --select all (the spread alone changed)
    with pytest.raises(OutputExistsError) as err:
        check_covers_earlier(tmp_path, [(a.method, a.folder) for a in now], ["t1"])
    fix = err.value.fix
    methods = fix.split("--methods ")[1].split()[0].split(",")
    assert methods == ["erm"] and all(m in METHODS for m in methods)  # C-30: the fix's methods are methods
    assert "--select all" in fix and "--tasks t1" in fix
    # following the fix covers the earlier comparison
    again = plan_arms(methods, cfg, SELECTIONS)
    check_covers_earlier(tmp_path, [(a.method, a.folder) for a in again], ["t1"])


def test_a_refusal_names_a_sweep_and_a_method_left_out(tmp_path):
    """The class: an earlier random search (erm-h1-t0 ...) and a method this call leaves out (dfr)."""
    cfg = TrainConfig(seeds=1)
    _earlier(tmp_path, plan_arms(["erm", "dfr"], cfg, None, n_hparams=2, hparams_seed=7))
    (tmp_path / "compare.json").write_text('{"sweep": {"n_hparams": 2, "hparams_seed": 7}}')
    with pytest.raises(OutputExistsError) as err:
        check_covers_earlier(tmp_path, [(a.method, a.folder) for a in plan_arms(["erm"], cfg)], ["t1"])
    fix = err.value.fix
    assert "--methods erm,dfr " in fix and "--n-hparams 2 --hparams-seed 7" in fix and "--select all" not in fix
    arms = plan_arms(["erm", "dfr"], cfg, None, n_hparams=2, hparams_seed=7)
    check_covers_earlier(tmp_path, [(a.method, a.folder) for a in arms], ["t1"])


def test_a_refusal_of_a_one_rule_out_under_select_all_says_so(tmp_path):
    cfg = TrainConfig(seeds=1)
    _earlier(tmp_path, plan_arms(["erm"], cfg))
    with pytest.raises(OutputExistsError) as err:
        check_covers_earlier(tmp_path, [(a.method, a.folder) for a in plan_arms(["erm"], cfg, SELECTIONS)], ["t1"])
    assert "--methods erm " in err.value.fix and "no --select all" in err.value.fix
