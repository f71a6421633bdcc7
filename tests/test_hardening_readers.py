"""Issue 22 part 3: readers refuse what they cannot represent (COCO instances, predictions files).

Before the fix a negative COCO category id wrapped around in a lookup table (every `cat` counted as
another class, exit 0), wrong field types and huge ids were tracebacks or a 7 PiB allocation, a
wrong-shape file was told to re-download GQA; class names that are numbers were read as ids from CSV
but as names from parquet, and a prediction column was ignored beside prob_ columns.
"""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pandas as pd
import pytest
from hardening_inputs import assert_one_line_error, run_cli, tiny_artifact

from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.coco import read_coco_annotations
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.errors import InputFormatError, UnknownNameError
from metashift_hf.hub import api
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.research.score import score_plan
from metashift_hf.scoring.predictions import LABEL_RULE
from metashift_hf.scoring.predictions import TaskPredictions as Predictions


COCO = {
    "images": [
        {"id": 1, "width": 10, "height": 8, "file_name": "a.jpg"},
        {"id": 2, "width": 10, "height": 8, "file_name": "b.jpg"},
    ],
    "annotations": [
        {"image_id": 1, "category_id": 17},
        {"image_id": 1, "category_id": 63},
        {"image_id": 2, "category_id": 18},
    ],
    "categories": [
        {"id": 17, "name": "cat", "supercategory": "animal"},
        {"id": 18, "name": "dog", "supercategory": "animal"},
        {"id": 63, "name": "couch", "supercategory": "furniture"},
    ],
}


def coco_file(tmp_path, change=None, text: str | None = None):
    doc = copy.deepcopy(COCO)
    if change:
        change(doc)
    path = tmp_path / "instances.json"
    path.write_text(text if text is not None else json.dumps(doc))
    return path


def tags_of(result) -> dict[str, list[str]]:
    t = result.tags
    out: dict[str, list[str]] = {}
    for i, k in zip(t.image_codes.tolist(), t.tag_codes.tolist()):
        out.setdefault(t.image_ids[i], []).append(t.tags[k])
    return out


def test_a_well_formed_coco_file_reads(tmp_path):
    assert tags_of(read_coco_annotations([coco_file(tmp_path)])) == {"1": ["cat", "couch"], "2": ["dog"]}


def set_path(doc, where: str, value):
    section, index, key = where.split(".")
    doc[section][int(index)][key] = value


@pytest.mark.parametrize(
    "where,value,needle",
    [
        ("categories.0.id", -1, "not a non-negative integer"),  # wrapped around to the last category before
        ("annotations.0.category_id", -1, "not a non-negative integer"),
        ("images.0.id", -5, "not a non-negative integer"),
        ("images.0.width", "abc", "width 'abc'"),
        ("images.0.height", 1.5, "height 1.5"),
        ("images.0.width", -3, "width -3"),
        ("images.0.width", True, "width True"),
        ("images.0.id", 2**63, "id 9223372036854775808"),
        ("images.0.file_name", 123, "file_name 123"),
        ("categories.0.supercategory", ["x"], "supercategory ['x']"),
        ("annotations.0.image_id", "1", "image_id '1'"),
    ],
)
def test_coco_fields_are_typed_and_in_range(tmp_path, where, value, needle):
    def change(doc):
        set_path(doc, where, value)
        if where == "categories.0.id":
            doc["annotations"][0]["category_id"] = value
        if where == "images.0.id":
            doc["annotations"][0]["image_id"] = doc["annotations"][1]["image_id"] = value

    with pytest.raises(InputFormatError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        read_coco_annotations([coco_file(tmp_path, change)])


def test_a_huge_category_id_costs_nothing_and_reads_right(tmp_path):
    def change(doc):
        doc["categories"][0]["id"] = doc["annotations"][0]["category_id"] = 10**15

    t0 = time.perf_counter()
    result = read_coco_annotations([coco_file(tmp_path, change)])  # "Unable to allocate 7.11 PiB" before
    assert time.perf_counter() - t0 < 5
    assert tags_of(result) == {"1": ["cat", "couch"], "2": ["dog"]}


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[1, 2, 3]", "not COCO instances JSON: its top level is not an object"),
        ('{"2375429": {"width": 1, "height": 1, "objects": {}}}', "not COCO instances JSON: no"),  # a GQA scene graph
        (
            '{"images": {"a": 1}, "annotations": [], "categories": []}',
            "not COCO instances JSON: its 'images' is not a list",
        ),
        (
            '{"images": [[1]], "annotations": [], "categories": []}',
            "not COCO instances JSON: an entry of 'images' is a list",
        ),
        ("", "not COCO instances JSON: it is empty"),
        ("42", "not COCO instances JSON"),
    ],
)
def test_a_wrong_shape_file_is_told_it_is_not_coco(tmp_path, text, needle):
    with pytest.raises(InputFormatError) as exc:
        read_coco_annotations([coco_file(tmp_path, text=text)])
    assert needle in exc.value.what and "GQA" not in str(exc.value)


def test_a_damaged_coco_file_gets_a_coco_fix_not_a_gqa_one(tmp_path):
    for text in (json.dumps(COCO)[:-25], '{"images": [1,]}', b"\xff\xfe{}".decode("latin-1")):
        with pytest.raises(InputFormatError) as exc:
            read_coco_annotations([coco_file(tmp_path, text=text)])
        assert "GQA" not in str(exc.value), exc.value
        assert "annotations_trainval2017" in exc.value.fix or "COCO" in exc.value.fix


def test_build_coco_negative_category_is_one_line(tmp_path, capsys):
    path = coco_file(
        tmp_path, lambda d: (set_path(d, "categories.0.id", -1), set_path(d, "annotations.0.category_id", -1))
    )
    code, _, err = run_cli(capsys, "build", "--coco-annotations", path, "--out", tmp_path / "out")
    assert_one_line_error(code, err, "category_id -1")


# ---------------------------------------------------------------------------------------- predictions

NUMERIC = tuple(str(i) for i in range(1, 9))  # classes named 1..8


def test_number_named_classes_read_the_same_from_csv_and_parquet(tmp_path):
    df = pd.DataFrame({"image_id": ["a", "b", "c", "d"], "prediction": [1, 2, 8, 5]})
    df.to_csv(tmp_path / "p.csv", index=False)
    df.to_parquet(tmp_path / "p.parquet")
    from_csv = Predictions.read(tmp_path / "p.csv", NUMERIC).predicted
    from_parquet = Predictions.read(tmp_path / "p.parquet", NUMERIC).predicted
    assert from_csv.tolist() == from_parquet.tolist() == [0, 1, 7, 4]  # names "1", "2", "8", "5"


def test_ids_are_read_only_when_no_value_is_a_class_name(tmp_path):
    df = pd.DataFrame({"image_id": ["a", "b"], "prediction": [0, 1]})
    assert Predictions.read(df, ("cat", "dog")).predicted.tolist() == [0, 1]
    df.to_csv(tmp_path / "p.csv", index=False)
    assert Predictions.read(tmp_path / "p.csv", ("cat", "dog")).predicted.tolist() == [0, 1]
    assert Predictions.read(df.assign(prediction=[1.0, 0.0]), ("cat", "dog")).predicted.tolist() == [1, 0]
    # a column that holds class names is read as names: "0" is then not a class, never the id 0
    with pytest.raises(UnknownNameError, match="not read as class ids"):
        Predictions.read(pd.DataFrame({"image_id": ["a", "b"], "prediction": [0, 1]}), ("1", "2"))
    with pytest.raises(UnknownNameError):
        Predictions.read(df.assign(prediction=["cat", 1]), ("cat", "dog"))


@pytest.mark.parametrize("values", [[None, "cat"], ["", "cat"], [float("nan"), 1.0]])
def test_a_missing_prediction_is_refused(values):
    with pytest.raises(InputFormatError, match="no prediction"):
        Predictions.read(pd.DataFrame({"image_id": ["a", "b"], "prediction": values}), ("cat", "dog"))


def test_csv_labels_named_like_missing_values_stay_labels(tmp_path):
    (tmp_path / "p.csv").write_text("image_id,prediction\nNA,None\nb,NA\n")
    preds = Predictions.read(tmp_path / "p.csv", ("NA", "None"))
    assert preds.image_ids == ("NA", "b") and preds.predicted.tolist() == [1, 0]


BOTH = pd.DataFrame(
    {
        "image_id": ["a", "b", "c"],
        "prediction": ["cat", "dog", "dog"],
        "prob_cat": [0.9, 0.8, 0.5],
        "prob_dog": [0.1, 0.2, 0.5],
    }
)


def test_prediction_and_probabilities_must_agree_or_be_chosen():
    with pytest.raises(InputFormatError, match="disagree on 1 of 3 rows") as exc:  # b: dog vs 0.8 cat
        Predictions.read(BOTH, ("cat", "dog"))
    assert "--use prediction" in exc.value.fix
    assert Predictions.read(BOTH, ("cat", "dog"), use="prediction").predicted.tolist() == [0, 1, 1]
    probs = Predictions.read(BOTH, ("cat", "dog"), use="probabilities")
    assert probs.predicted.tolist() == [0, 0, 0] and probs.kind == "probabilities"
    agree = Predictions.read(BOTH.assign(prediction=["cat", "cat", "dog"]), ("cat", "dog"))
    # agreeing columns keep the probabilities (ECE) and the explicit prediction settles the tie of row c
    assert agree.kind == "probabilities" and agree.predicted.tolist() == [0, 0, 1]
    with pytest.raises(InputFormatError, match="no prediction column"):
        Predictions.read(BOTH.drop(columns="prediction"), ("cat", "dog"), use="prediction")
    with pytest.raises(InputFormatError, match="use="):
        Predictions.read(BOTH, ("cat", "dog"), use="labels")


def test_score_help_states_the_rules_and_use_picks_a_column(tmp_path, capsys):
    with pytest.raises(SystemExit):
        run_cli(capsys, "score", "--help")
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(LABEL_RULE.split()) in out and "--use {prediction,probabilities}" in out
    art = tiny_artifact(tmp_path / "art")
    table = api.plan(TaskRef("classes", artifact=art)).table()
    is_cat = (table["label"] == "cat").to_numpy(dtype=float)
    # the prediction column is right on every row, the probabilities wrong on every row
    frame = pd.DataFrame(
        {"image_id": table["image_id"], "prediction": table["label"], "prob_cat": 1 - is_cat, "prob_dog": is_cat}
    )
    frame.to_csv(tmp_path / "p.csv", index=False)
    base = ("score", "--task", "classes", "--artifact", art.root, "--predictions", tmp_path / "p.csv")
    code, _, err = run_cli(capsys, *base, "--out", tmp_path / "s0")
    assert_one_line_error(code, err, "disagree", "--use")
    code, out, err = run_cli(capsys, *base, "--out", tmp_path / "s1", "--use", "prediction")
    assert code == 0, err
    assert json.loads((tmp_path / "s1" / "scores.json").read_text())["average"] == 1.0
    code, out, err = run_cli(capsys, *base, "--out", tmp_path / "s2", "--use", "probabilities")
    assert code == 0, err
    assert json.loads((tmp_path / "s2" / "scores.json").read_text())["average"] == 0.0


def numbered_artifact(out):
    """An artifact whose classes are named 1 and 2 (two subjects with six 40-image subsets each)."""
    rng = np.random.default_rng(3)
    subsets = {
        f"{s}(ctx{k})": sorted(rng.choice([f"{s}-{i}" for i in range(150)], 40, replace=False).tolist())
        for s in ("1", "2")
        for k in range(6)
    }
    return build_artifact(CandidateSubsets.from_dict(subsets), out, BuildOptions(), plots=False)


def test_number_named_classes_score_the_same_from_csv_and_parquet(tmp_path):
    tp = api.plan(TaskRef("classes", artifact=numbered_artifact(tmp_path / "art")))
    table = tp.table()
    frame = pd.DataFrame({"image_id": table["image_id"], "prediction": [int(x) for x in table["label"]]})
    frame.to_csv(tmp_path / "p.csv", index=False)
    frame.to_parquet(tmp_path / "p.parquet")
    averages = {f: score_plan(str(tmp_path / f), tp).headline.average for f in ("p.csv", "p.parquet")}
    assert averages == {"p.csv": 1.0, "p.parquet": 1.0}


def test_user_data_artifacts_get_no_gqa_advice(tmp_path):
    art = tiny_artifact(tmp_path / "art")  # built from user subsets: provenance custom, no images.parquet
    (tmp_path / "img").mkdir()
    with pytest.raises(InputFormatError, match="custom input carries no per-image metadata") as exc:
        api.prepare(
            TaskRef("class-cat", artifact=art, images=tmp_path / "img"),
            with_image_metadata=True,
            cache_dir=tmp_path / "cache",
        )
    assert "GQA" not in str(exc.value)
