"""Issue 37 (review round 5, B1/B2) end to end: an exported folder whose rows or meta-graph facts were changed is
refused by `open_task`, `Evaluator`, `bugs` and `evaluate` (N-R01, N-R13, N-R14, N-R20), and a loaded split holding
another split's rows is not scored as that split (N-E01); metashift_hf/tasks/spec.py `members`, builders/meta_graph_facts.py
`check_rows`, wired where rows are read (metashift_hf/hub) and in the Evaluator's realignment."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hardening_inputs import assert_one_line_error, run_cli
from spec_versions import as_spec_version

from metashift_hf.builders.meta_graph_facts import FACTS_FILE
from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.evaluate import evaluate
from metashift_hf.evaluate.config import EvalConfig
from metashift_hf.hub.export import export_tasks
from metashift_hf.hub.task_open import TaskOrigin, open_task
from metashift_hf.research.evaluator import Evaluator


TASK = "shift-conditional-cat-dog-delta30"
SPEC_MARK = "metashift-hf shift_spec "


@pytest.fixture(scope="module")
def exported(builder_world, tmp_path_factory):
    """TASK exported from the builder world: (repo folder, predictions CSV of every row, the same as ImageNet-1k
    indices for evaluate)."""
    root = tmp_path_factory.mktemp("facts-rows")
    export_tasks([TASK], TaskOrigin(artifact=builder_world["artifact"].root, images=builder_world["folder"]), root)
    repo = root / f"metashift-{TASK}"
    rows = pd.concat([pq.read_table(p, columns=["image_id", "label"]).to_pandas() for p in _shards(repo)])
    preds = root / "p.csv"
    rows.assign(prediction=rows["label"].map({0: "cat", 1: "dog"}))[["image_id", "prediction"]].to_csv(
        preds, index=False
    )
    index = root / "imagenet.csv"  # cat -> tabby (281), dog -> golden retriever (207)
    rows.assign(imagenet_index=rows["label"].map({0: 281, 1: 207}))[["image_id", "imagenet_index"]].to_csv(
        index, index=False
    )
    return repo, preds, index


@pytest.fixture
def repo(exported, tmp_path, monkeypatch):
    """A fresh copy of the export (tests change it), read through a datasets cache of its own."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    dest = tmp_path / f"metashift-{TASK}"
    shutil.copytree(exported[0], dest)
    return dest


def _shards(repo: Path) -> list[Path]:
    return sorted((repo / TASK).glob("*-*.parquet"))


def _rewrite(path: Path, change) -> None:
    table = pq.read_table(path)
    path.unlink()
    pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), path)


def _column(table: pa.Table, name: str, values) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def _shift_rows_community(repo: Path, by: int) -> None:
    for p in _shards(repo):
        _rewrite(p, lambda t: _column(t, "community", [c + by for c in t.column("community").to_pylist()]))


def _change_facts(repo: Path, column: str, value) -> None:
    _rewrite(repo / TASK / FACTS_FILE, lambda t: _column(t, column, [value(v) for v in t.column(column).to_pylist()]))


def _as_version_3(repo: Path) -> None:
    """The export as one made before spec_version 5 (no ``members``): every copy of its spec rewritten."""
    as_spec_version(repo, TASK, 4)


def _bugs(capsys, repo: Path, preds: Path, out: Path) -> tuple[int, str]:
    code, _, err = run_cli(capsys, "bugs", "--task", repo, "--predictions", preds, "--min-n", "5", "--out", out, "-q")
    return code, err


def _evaluate(repo: Path, index: Path, out: Path) -> None:
    cfg = EvalConfig(coverage={"cat": [281], "dog": [207]}, min_subset_size=5, plots=False, progress=False)
    evaluate(f"predictions:{index}", str(repo), out, settings=cfg)


def _evaluate_cli(capsys, repo: Path, index: Path, out: Path) -> tuple[int, str]:
    code, _, err = run_cli(capsys, "evaluate", "--model", f"predictions:{index}", "--task", repo, "--out", out, "-q")
    return code, err


def test_the_pristine_export_reads(repo, exported, tmp_path, capsys):
    data = open_task(repo)
    assert data.spec.members is not None and data.meta_graph is not None
    assert _bugs(capsys, repo, exported[1], tmp_path / "bugs")[0] == 0
    _evaluate(repo, exported[2], tmp_path / "eval")
    assert (tmp_path / "eval" / "per_group.csv").is_file()


@pytest.mark.parametrize("case, by", [("N-R01", 7), ("N-R20", 1)])
def test_n_r01_n_r20_rows_community_changed_is_refused(repo, exported, tmp_path, capsys, case, by):
    """N-R01/N-R20: the rows' community column shifted was scored (bugs exit 0) while Evaluator.grouping used it."""
    _shift_rows_community(repo, by)
    with pytest.raises(InputFormatError, match=r"not one of the \w+ rows the spec records"):
        Evaluator(str(repo)).grouping("community", "test")
    code, err = _bugs(capsys, repo, exported[1], tmp_path / "bugs")
    assert_one_line_error(code, err, "rows the spec records", str(repo))
    with pytest.raises(InputFormatError, match="rows the spec records"):
        _evaluate(repo, exported[2], tmp_path / "eval")
    assert not (tmp_path / "bugs").exists() and not (tmp_path / "eval").exists()


def test_n_r01_rows_community_changed_in_an_older_export_disagrees_with_its_facts(repo, exported, tmp_path, capsys):
    """N-R01 where the spec records no rows (spec_version 3): the facts file and the rows still disagree."""
    _as_version_3(repo)
    assert open_task(repo).spec.members is None and open_task(repo).meta_graph is not None  # reads as it is
    _shift_rows_community(repo, 7)
    open_task(repo).verify()  # nothing in the rows alone says the communities changed
    with pytest.raises(InputFormatError, match=f"{FACTS_FILE} of exported folder .* disagree on communities"):
        open_task(repo).meta_graph  # noqa: B018 -- read when first asked for
    code, err = _bugs(capsys, repo, exported[1], tmp_path / "bugs")
    assert_one_line_error(code, err, FACTS_FILE, "disagree on communities")
    ev = Evaluator(str(repo))  # N-R20: the Evaluator's community grouping is the rows' column, checked the same way
    assert ev.grouping("group", "test").n_groups
    with pytest.raises(InputFormatError, match="disagree on communities"):
        ev.grouping("community", "test")


def test_n_r13_facts_communities_changed_are_refused(repo, exported, tmp_path, capsys):
    """N-R13: meta_graph.parquet's communities +5 changed per_group.csv's community column with exit 0 (an export
    made before spec_version 6: its facts carry no digest, their consistency with the rows is what refuses them)."""
    as_spec_version(repo, TASK, 5)
    _change_facts(repo, "community", lambda c: c + 5)
    code, err = _bugs(capsys, repo, exported[1], tmp_path / "bugs")
    assert_one_line_error(code, err, FACTS_FILE, "disagree on communities")
    with pytest.raises(InputFormatError, match="disagree on communities"):
        _evaluate(repo, exported[2], tmp_path / "eval")


def test_n_r14_facts_distances_changed_are_refused(repo, exported, tmp_path, capsys):
    """N-R14: every distance 9.99 reordered the bugs with exit 0 (spec_version 5: no digest)."""
    as_spec_version(repo, TASK, 5)
    _change_facts(repo, "distance_to_largest_community", lambda d: None if d is None else 9.99)
    code, err = _bugs(capsys, repo, exported[1], tmp_path / "bugs")
    assert_one_line_error(code, err, FACTS_FILE, "spectral embedding puts every subset within")


def test_n_e01_training_rows_passed_as_the_test_split_are_refused(exported):
    """N-E01: Evaluator(DatasetDict({"test": ds["train"].select(range(100))})) scored training rows as the test
    split ("100.0%", only a 'partial split' warning)."""
    ds = datasets.load_dataset(str(exported[0]), TASK)
    assert len(ds["test"]) > 40  # fewer rows than the test split, so that only their membership tells
    with pytest.raises(InputFormatError, match="not one of the test rows the spec records") as exc:
        Evaluator(datasets.DatasetDict({"test": ds["train"].select(range(40))}))
    assert "split 'test'" in exc.value.what and "40 bad row(s)" in exc.value.what
    part = ds["test"].select(range(0, len(ds["test"]), 2)).shuffle(seed=0)  # a part of the real split still scores
    ev = Evaluator(datasets.DatasetDict({"test": part}))
    assert ev.eval(ev.labels("test")).splits["test"].average == 1.0
    mixed = datasets.concatenate_datasets([ds["test"].select(range(10)), ds["validation"].select(range(1))])
    with pytest.raises(InputFormatError, match="1 bad row"):
        Evaluator(datasets.DatasetDict({"test": mixed}))


def test_evaluate_cli_refuses_a_changed_export(repo, exported, wn, tmp_path, capsys):
    """`evaluate --task FOLDER` (N-R13, then N-R01 on top): exit 2, one error naming what disagrees, no output."""
    assert _evaluate_cli(capsys, repo, exported[2], tmp_path / "pristine")[0] == 0
    rows_changed = shutil.copytree(repo, tmp_path / "rows-copy" / repo.name)  # facts intact, rows changed
    _change_facts(repo, "community", lambda c: c + 5)
    code, err = _evaluate_cli(capsys, repo, exported[2], tmp_path / "facts")
    assert_one_line_error(code, err, FACTS_FILE, "changed after export")
    _shift_rows_community(repo, 7)  # both changed: the facts, checked first, are named
    code, err = _evaluate_cli(capsys, repo, exported[2], tmp_path / "both")
    assert_one_line_error(code, err, FACTS_FILE, "changed after export")
    _shift_rows_community(rows_changed, 7)
    code, err = _evaluate_cli(capsys, rows_changed, exported[2], tmp_path / "rows")
    assert_one_line_error(code, err, "rows the spec records")
    assert not any((tmp_path / out).exists() for out in ("facts", "both", "rows"))


def test_a_partial_split_warning_says_whether_its_rows_were_checked(exported, exported_task, caplog):
    """N-E01 in the Evaluator's realignment: a part of a split is scored with a warning that says whether each row
    was checked to be that split's (spec_version 5) or could not be (an older spec records no rows)."""
    ds = datasets.load_dataset(str(exported[0]), TASK)
    with caplog.at_level(logging.WARNING, logger="metashift_hf"):
        Evaluator(ds["test"].select(range(5)))
    assert "5 of the" in caplog.text and "(each one of that split's rows)" in caplog.text
    caplog.clear()
    _, old = exported_task  # a test task whose spec records no rows
    with caplog.at_level(logging.WARNING, logger="metashift_hf"):
        Evaluator(old["test"].select(range(2)))
    assert "cannot be checked to be that split's" in caplog.text


def test_l17_a_split_given_with_no_rows_names_the_split_not_an_empty_list(exported):
    """L-17: a DatasetDict whose test split has 0 rows said 'task has no split test', fix 'use one of: ' (empty)."""
    ds = datasets.load_dataset(str(exported[0]), TASK)
    ev = Evaluator(datasets.DatasetDict({"validation": ds["validation"], "test": ds["test"].select([])}))
    with pytest.raises(EmptyResultError) as exc:
        ev.labels("test")
    assert "split 'test' has no rows in the data given" in exc.value.what
    assert "validation" in exc.value.fix
