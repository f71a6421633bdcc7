"""metashift_hf.research.score / `metashift-hf score`: figures recomputed independently from the exported parquet,
and every bad predictions file refused with a clear error."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import metashift_hf
from metashift_hf import cli
from metashift_hf.core.errors import InputFormatError, MissingImagesError, UnknownNameError
from metashift_hf.hub.export import export_tasks
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.research.score import Predictions, expected_calibration_error, score
from metashift_hf.scoring.stats import wilson_interval


TASK = "paper-subpop-cat-dog-p6"
OPTIONS = {"scale": 0.1}
REQUIRED_KEYS = {"average", "worst_group", "adjusted_average", "per_group", "id", "ood", "drop_pct"}


def _guess(image_id: str, label: str) -> str:
    """A deterministic, imperfect classifier: right for about 2/3 of the images, depending on the id."""
    wrong = int(hashlib.sha256(image_id.encode()).hexdigest(), 16) % 3 == 0
    return ({"cat": "dog", "dog": "cat"}[label]) if wrong else label


@pytest.fixture(scope="module")
def exported(builder_world, tmp_path_factory):
    """The task exported to parquet, read back with pyarrow alone: split, image_id, label name, group."""
    out = tmp_path_factory.mktemp("score-export")
    export_tasks(
        [TASK],
        TaskOrigin(artifact=builder_world["artifact"].root, images=builder_world["folder"], options=OPTIONS),
        out,
    )
    frames = []
    for path in sorted(out.glob(f"*/{TASK}/*-of-*.parquet")):  # the split shards (not meta_graph.parquet)
        t = pq.read_table(path, columns=["image_id", "label", "group"])
        names = json.loads(pq.read_schema(path).metadata[b"huggingface"])["info"]["features"]["label"]["names"]
        df = t.to_pandas()
        df["label"] = [names[i] for i in df["label"]]
        df["split"] = path.name.split("-")[0]
        frames.append(df)
    table = pd.concat(frames, ignore_index=True)
    table["prediction"] = [_guess(i, c) for i, c in zip(table["image_id"], table["label"])]
    return {"table": table, "dir": out, "artifact": builder_world["artifact"].root}


def test_per_group_matches_independent_computation(exported, tmp_path):
    t = exported["table"]
    path = tmp_path / "preds.csv"
    t[["image_id", "prediction"]].to_csv(path, index=False)
    scores = metashift_hf.score(path, TaskRef(TASK, artifact=exported["artifact"], options=OPTIONS))
    got = {(g["split"], g["group"]): g for g in scores.to_dict()["per_group"]}

    t = t.assign(ok=t["prediction"] == t["label"])
    expected = t.groupby(["split", "group"])["ok"].agg(["size", "sum"])
    assert set(got) == set(expected.index)
    for (split, group), row in expected.iterrows():
        g = got[(split, group)]
        assert (g["n"], g["correct"]) == (int(row["size"]), int(row["sum"]))
        assert g["accuracy"] == pytest.approx(row["sum"] / row["size"])
        lo, hi = wilson_interval(int(row["sum"]), int(row["size"]))  # the evaluate module's own formula
        assert (g["ci_low"], g["ci_high"]) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))

    d = scores.to_dict()
    test = t[t["split"] == "test"]
    per_group_test = test.groupby("group")["ok"].mean()
    assert d["average"] == pytest.approx(test["ok"].mean())
    assert d["worst_group"]["accuracy"] == pytest.approx(per_group_test.min())
    train_share = t[t["split"] == "train"]["group"].value_counts(normalize=True)
    assert d["adjusted_average"] == pytest.approx(sum(train_share[g] * a for g, a in per_group_test.items()))
    # balanced accuracy = mean per-class recall
    assert d["balanced_accuracy"] == pytest.approx(test.groupby("label")["ok"].mean().mean())
    id_acc = t[t["split"] == "validation"]["ok"].mean()
    assert (d["id_split"], d["ood_split"]) == ("validation", "test")
    assert d["id"] == pytest.approx(id_acc) and d["ood"] == pytest.approx(test["ok"].mean())
    assert d["drop_pct"] == pytest.approx(100 * (id_acc - test["ok"].mean()) / id_acc)
    assert d["ece"] is None  # labels only: no calibration


def test_cli_writes_scores_with_the_listed_keys(exported, tmp_path):
    t = exported["table"]
    path = tmp_path / "preds.parquet"
    p_cat = np.where(t["prediction"] == "cat", 0.8, 0.3)
    pd.DataFrame({"image_id": t["image_id"], "prob_cat": p_cat, "prob_dog": 1 - p_cat}).to_parquet(path)
    out = tmp_path / "scores"
    assert (
        cli.main(
            [
                "score",
                "--task",
                TASK,
                "--artifact",
                str(exported["artifact"]),
                "--set",
                "scale=0.1",
                "--predictions",
                str(path),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    d = json.loads((out / "scores.json").read_text())
    assert REQUIRED_KEYS <= set(d)
    assert set(d["per_group"][0]) == {"group", "split", "n", "correct", "accuracy", "ci_low", "ci_high"}
    assert set(d["splits"]) == set(t["split"]) and d["prediction_kind"] == "probabilities"
    # same argmax as the labels file, so the same per-group accuracies
    same = metashift_hf.score(
        t[["image_id", "prediction"]], TaskRef(TASK, artifact=exported["artifact"], options=OPTIONS)
    ).to_dict()
    assert [g["correct"] for g in d["per_group"]] == [g["correct"] for g in same["per_group"]]
    assert 0 <= d["ece"] <= 1
    md = (out / "scores.md").read_text()
    assert "## Groups" in md and d["worst_group"]["group"] in md


def _refused(exported, tmp_path, df: pd.DataFrame, capsys) -> str:
    path = tmp_path / "bad.csv"
    df.to_csv(path, index=False)
    code = cli.main(
        [
            "score",
            "--task",
            TASK,
            "--artifact",
            str(exported["artifact"]),
            "--set",
            "scale=0.1",
            "--predictions",
            str(path),
            "--out",
            str(tmp_path / "never"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "error:" in err and "fix:" in err
    assert not (tmp_path / "never").exists()  # nothing half-written
    return err


def test_bad_predictions_are_refused(exported, tmp_path, capsys):
    good = exported["table"][["image_id", "prediction"]]
    extra = pd.concat([good, pd.DataFrame({"image_id": ["not-an-image"], "prediction": ["cat"]})])
    assert "not in task" in _refused(exported, tmp_path, extra, capsys)
    assert "no prediction for 1 of" in _refused(exported, tmp_path, good.iloc[1:], capsys)
    assert "repeats image_id" in _refused(exported, tmp_path, pd.concat([good, good.iloc[:2]]), capsys)
    horse = good.assign(prediction=["horse"] + list(good["prediction"][1:]))
    assert "not classes of the task" in _refused(exported, tmp_path, horse, capsys)
    probs = pd.DataFrame({"image_id": good["image_id"], "prob_cat": 0.5, "prob_horse": 0.5})
    assert "not in the task" in _refused(exported, tmp_path, probs, capsys)
    assert "no image_id column" in _refused(exported, tmp_path, good.rename(columns={"image_id": "id"}), capsys)


def test_prediction_parsing_and_calibration():
    classes = ("cat", "dog")
    ids = pd.Series(["a", "b", "c"])
    by_id = Predictions.read(pd.DataFrame({"image_id": ids, "prediction": [0, 1, 1]}), classes)
    by_name = Predictions.read(pd.DataFrame({"image_id": ids, "prediction": ["cat", "dog", "dog"]}), classes)
    assert by_id.predicted.tolist() == by_name.predicted.tolist() == [0, 1, 1]
    with pytest.raises(UnknownNameError):
        Predictions.read(pd.DataFrame({"image_id": ids, "prediction": [0, 2, 1]}), classes)
    logits = Predictions.read(
        pd.DataFrame({"image_id": ids, "logit_cat": [2.0, 0.0, -1.0], "logit_dog": [0.0, 0.0, 1.0]}), classes
    )
    assert logits.kind == "logits" and logits.probabilities[0, 0] == pytest.approx(1 / (1 + math.exp(-2)))
    with pytest.raises(InputFormatError, match="not probabilities"):
        Predictions.read(pd.DataFrame({"image_id": ids, "prob_cat": [0.9, 0.5, 0.2], "prob_dog": 0.5}), classes)
    # two images at confidence 0.9 (one right), one at 0.6 (right): |0.5 - 0.9| * 2/3 + |1 - 0.6| * 1/3
    probs = np.array([[0.9, 0.1], [0.1, 0.9], [0.6, 0.4]])
    assert expected_calibration_error(probs, np.array([0, 0, 0])) == pytest.approx(0.4 * 2 / 3 + 0.4 / 3)


def test_score_is_a_plain_function_of_the_package(exported):
    import metashift_hf.research.score as module

    # a plain function re-exported by the package (no module made callable)
    assert metashift_hf.score is module.score and type(module) is type(metashift_hf)
    t = exported["table"]
    with pytest.raises(MissingImagesError):
        score(t[["image_id", "prediction"]].iloc[:5], TaskRef(TASK, artifact=exported["artifact"], options=OPTIONS))
    only_test = t[t["split"] == "test"][["image_id", "prediction"]]
    with pytest.raises(MissingImagesError):
        score(only_test, TaskRef(TASK, artifact=exported["artifact"], options=OPTIONS))
    s = score(only_test, TaskRef(TASK, artifact=exported["artifact"], options=OPTIONS), splits=["test"])
    assert list(s.splits) == ["test"] and s.id is None and s.to_dict()["drop_pct"] is None
