"""Issue 27 part 3: the Evaluator scores the rows of the object it was given, in that object's order
(after ``shuffle()``/``select()``), refuses rows it cannot match, and scores ID vs OOD in one call;
review cases E17, E27, E28, E38, E48, EO1, EO2 (hardening round 4)."""

from __future__ import annotations

import logging

import datasets
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures.tasks import EXPORTED_TASK
from metashift_hf.core.errors import InputFormatError
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.research.evaluator import Evaluator
from metashift_hf.research.score import score


TASK = EXPORTED_TASK


def perfect(ds: datasets.Dataset) -> np.ndarray:
    return np.asarray(ds["label"], dtype=np.int64)


def test_a_shuffled_dataset_dict_is_scored_in_its_own_order(exported_task):  # EO1, EO2
    _, dd = exported_task
    shuffled = dd.shuffle(seed=0)
    assert list(shuffled["test"]["image_id"]) != list(dd["test"]["image_id"])  # the case is a real reordering
    ev = Evaluator(shuffled)
    for split in ("train", "validation", "test"):
        assert ev.image_ids(split) == list(shuffled[split]["image_id"])
        assert ev.labels(split).tolist() == list(shuffled[split]["label"])
        assert ev.eval(perfect(shuffled[split]), split=split).splits[split].average == 1.0
    g = ev.grouping("group", "train")
    assert [g.names.int2str(int(i)) for i in g.ids] == list(shuffled["train"]["group"])


def test_a_shuffled_single_split_is_scored_in_its_own_order(exported_task):
    _, dd = exported_task
    test = dd["test"].shuffle(seed=1)
    ev = Evaluator(test)
    assert ev.splits == ["test"] and ev.image_ids("test") == list(test["image_id"])
    assert ev.eval(perfect(test)).splits["test"].average == 1.0
    train = dd["train"].shuffle(seed=2)  # EO2: grouping on a shuffled train split, as the card advises
    g = Evaluator(train).grouping("group", "train")
    assert [g.names.int2str(int(i)) for i in g.ids] == list(train["group"])


def test_a_selected_split_scores_its_rows_and_warns(exported_task, caplog):
    _, dd = exported_task
    part = dd["test"].select([5, 1, 3])
    with caplog.at_level(logging.WARNING, logger="metashift_hf"):
        ev = Evaluator(part)
    size = len(dd["test"])
    assert any(
        r.levelno == logging.WARNING and "'test'" in r.getMessage() and f"3 of the {size} rows" in r.getMessage()
        for r in caplog.records
    )
    s = ev.eval(perfect(part))
    assert s.splits["test"].n == 3 and s.splits["test"].average == 1.0
    wrong = 1 - perfect(part)
    assert ev.eval(wrong).splits["test"].average == 0.0


def test_predictions_of_another_length_are_refused(exported_task):
    _, dd = exported_task
    ev = Evaluator(dd["test"].select(range(4)))
    with pytest.raises(InputFormatError, match=r"y_pred has 5 rows, split 'test' has 4") as err:
        ev.eval(np.zeros(5, dtype=np.int64))
    assert "image_ids" in err.value.fix


def test_rows_the_task_split_cannot_hold_are_refused(exported_task):
    _, dd = exported_task
    again = datasets.concatenate_datasets([dd["test"].select(range(4)), dd["test"].select([0, 1])])
    with pytest.raises(InputFormatError, match="image listed twice in 'test'"):
        Evaluator(datasets.DatasetDict({"test": again}))
    leaked = datasets.DatasetDict(
        {"train": dd["train"], "test": datasets.concatenate_datasets([dd["test"], dd["train"].select([0])])}
    )
    with pytest.raises(InputFormatError, match="has .* rows, its shift spec records"):
        Evaluator(leaked)
    leaked = datasets.DatasetDict(
        {
            "train": dd["train"],
            "test": datasets.concatenate_datasets([dd["test"].select(range(4)), dd["train"].select([0])]),
        }
    )
    with pytest.raises(
        InputFormatError, match="row 4 image .*(not one of the spec's test groups|image also in split 'train')"
    ):
        Evaluator(leaked)
    more = datasets.concatenate_datasets([dd["test"], dd["validation"]])  # more rows than the task's test split
    with pytest.raises(InputFormatError, match=f"has {len(more)} rows, its shift spec records {len(dd['test'])}"):
        Evaluator(datasets.DatasetDict({"test": more}))
    with pytest.raises(InputFormatError, match=r"not in the spec: \['val'\]"):
        Evaluator(datasets.DatasetDict({"val": dd["validation"]}))


def test_a_dict_of_predictions_scores_id_and_ood_in_one_call(exported_task):
    folder, dd = exported_task
    shuffled = dd.shuffle(seed=4)
    ev = Evaluator(shuffled)
    rng = np.random.default_rng(0)
    yv = rng.integers(0, 2, len(shuffled["validation"]))
    yt = rng.integers(0, 2, len(shuffled["test"]))
    both = ev.eval({"validation": yv, "test": yt})
    preds = {
        "image_id": ev.image_ids("validation") + ev.image_ids("test"),
        "prediction": [ev.classes[i] for i in np.concatenate([yv, yt])],
    }
    want = score(preds, folder, splits=["validation", "test"]).to_dict()
    assert both.to_dict() == want | {"task_origin": both.task_origin}  # the same numbers; each its own form
    assert both.id_split == "validation" and both.ood_split == "test" and both.id is not None
    assert both.splits["test"].to_dict() == ev.eval(yt, split="test").splits["test"].to_dict()
    with pytest.raises(InputFormatError, match="mixes kinds"):
        ev.eval({"validation": yv, "test": np.eye(2)[yt] * 3.0})
    with pytest.raises(InputFormatError, match="names its own splits"):
        ev.eval({"test": yt}, split="validation")


def test_an_empty_row_selection_is_refused_clearly(exported_task):  # E17
    _, dd = exported_task
    ev = Evaluator(dd)
    for rows in ([], np.zeros(len(dd["test"]), dtype=bool)):
        with pytest.raises(InputFormatError, match="selects no row of split 'test'"):
            ev.eval(np.zeros(0, dtype=np.int64), split="test", rows=rows)


@pytest.mark.parametrize("split", [None, ["test"], 0])  # E27, E28
def test_a_split_that_is_not_a_name_is_refused_clearly(exported_task, split):
    _, dd = exported_task
    ev = Evaluator(dd)
    for call in (
        lambda: ev.eval(np.zeros(len(dd["test"]), dtype=np.int64), split=split),
        lambda: ev.image_ids(split),
        lambda: ev.labels(split),
        lambda: ev.grouping("group", split),
    ):
        with pytest.raises(InputFormatError, match=r"split=.* is not a split name") as err:
            call()
        assert "'validation'" in err.value.fix and "'test'" in err.value.fix


def test_bfloat16_logits_are_scored_as_float32(exported_task):  # E38
    torch = pytest.importorskip("torch")
    _, dd = exported_task
    ev = Evaluator(dd)
    logits = torch.randn(len(dd["test"]), 2, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    got = ev.eval(logits, split="test")
    assert got.to_dict() == ev.eval(logits.float().numpy(), split="test").to_dict()
    assert got.prediction_kind == "logits"


def test_config_with_a_loaded_dataset_is_refused(exported_task):  # E48
    _, dd = exported_task
    for kw in ({"config": "x"}, {"revision": "main"}):
        with pytest.raises(InputFormatError, match="config=.*revision=") as err:
            Evaluator(TaskRef(dd, **kw))
        assert "repo id or folder" in err.value.fix
        with pytest.raises(InputFormatError, match="config="):
            Evaluator(TaskRef(dd["test"], **kw))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_permutation_scores_the_same(exported_task, data):
    """Perfect predictions in any row order score 100%; one prediction vector permuted with the rows
    gives identical Scores."""
    _, dd = exported_task
    test = dd["test"]
    perm = data.draw(st.permutations(range(len(test))))
    y = np.random.default_rng(7).integers(0, 2, len(test))
    base = Evaluator(test).eval(y)
    permuted = test.select(perm)
    ev = Evaluator(permuted)
    assert ev.eval(perfect(permuted)).splits["test"].average == 1.0
    assert ev.eval(y[list(perm)]).to_dict() == base.to_dict()


def test_the_card_example_scores_id_vs_ood_in_one_call(exported_task, capsys):
    """The card's Evaluator block (comment: 'ID vs OOD') runs on the loaded dataset and prints ID vs OOD."""
    folder, dd = exported_task
    card = (folder / "README.md").read_text()
    block = next(b for b in card.split("```python\n")[1:] if "Evaluator(ds)" in b).split("```", 1)[0]
    assert 'ev.eval({"validation": y_id, "test": y_ood})' in block and "ID vs OOD" in block
    exec(block, {"ds": dd.shuffle(seed=5)})  # noqa: S102 - the card's own code, as a user pastes it
    assert "ID (validation)" in capsys.readouterr().out
