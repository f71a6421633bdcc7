"""A task is a dataset (issue 19): one resolver for a task id + artifact, an exported folder, a Hub repo
id or a loaded dataset; scoring, the array Evaluator and the commands give the same numbers from each."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pandas as pd
import pytest

import metashift_hf
from fixtures.tasks import build_tiny_artifact, sample_jpegs, three_split_task
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.evaluate.scored_task import _stratified_quota, sample_rows
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin, open_task
from metashift_hf.research.evaluator import Evaluator
from metashift_hf.research.score import score


NS = "tester"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("task-source")
    art = build_tiny_artifact(root / "artifact")
    images = sample_jpegs(root / "images", n=30)
    tasks = [
        three_split_task("paper-dg-cat-dog-1", images),
        three_split_task("paper-subpop-cat-dog-p12", images, shift_type="conditional"),
        three_split_task("bin-cat-dog", images, matched=True),
    ]
    export_prepared(tasks, TaskOrigin(artifact=art), root / "out", namespace=NS)
    return {"root": root, "out": root / "out", "tasks": {t.task_id: t for t in tasks}}


def random_predictions(tp, seed: int = 0, probabilities: bool = False) -> pd.DataFrame:
    table = tp.table()
    rng = np.random.default_rng(seed)
    if not probabilities:
        return pd.DataFrame({"image_id": table["image_id"], "prediction": rng.choice(tp.classes, len(table))})
    p = rng.dirichlet(np.ones(len(tp.classes)), len(table))
    return pd.DataFrame({"image_id": table["image_id"], **{f"prob_{c}": p[:, j] for j, c in enumerate(tp.classes)}})


def test_folder_dataset_and_prepared_task_give_the_same_rows(exported):
    folder = exported["out"] / "metashift-paper-subpop-cat-dog-p12"
    prepared = exported["tasks"]["paper-subpop-cat-dog-p12"]
    from_folder = open_task(folder)
    from_config_folder = open_task(folder / "paper-subpop-cat-dog-p12")
    from_prepared = open_task(prepared)
    loaded = datasets.load_dataset(str(folder), "paper-subpop-cat-dog-p12")
    from_loaded = open_task(loaded)
    assert from_folder.form == "folder" and from_loaded.form == "dataset"
    for other in (from_config_folder, from_prepared, from_loaded):
        assert other.plan.table().equals(from_folder.plan.table())
        # the folder's spec is the prepared one plus the digests of the facts export published
        assert other.spec.unpublished() == from_folder.spec.unpublished() == prepared.spec
    # rows in export order: the parquet's own order, so ds["test"][i] is Evaluator row i
    assert list(loaded["test"]["image_id"]) == [r.image_id for r in from_folder.plan.splits["test"]]
    # the images are the parquet's bytes, by image id
    iid = loaded["train"][0]["image_id"]
    assert (
        from_folder.images().read(iid)
        == loaded["train"].cast_column("image", datasets.Image(decode=False))[0]["image"]["bytes"]
    )


def test_score_is_the_same_from_every_form(exported):
    folder = exported["out"] / "metashift-paper-dg-cat-dog-1"
    prepared = exported["tasks"]["paper-dg-cat-dog-1"]
    preds = random_predictions(open_task(folder).plan)

    def scores(task, p=preds):  # the numbers; where the task came from is each form's own task_origin
        d = score(p, task).to_dict()
        return {k: v for k, v in d.items() if k != "task_origin"}, d["task_origin"]

    ref, origin = scores(folder)
    assert origin["kind"] == "folder" and origin["folder"] == str(folder)
    assert scores(prepared)[0] == ref
    loaded, from_loaded = scores(datasets.load_dataset(str(folder), "paper-dg-cat-dog-1"))
    assert loaded == ref and from_loaded["kind"] == "dataset"
    # issue 43: the dataset's spec is the published one, byte for byte
    assert from_loaded["spec_sha256"] == origin["spec_sha256"]
    assert scores(folder, {c: preds[c].to_numpy() for c in preds})[0] == ref  # a dict of arrays
    assert ref["worst_class"]["group"] in ("cat", "dog")


def _numbers(scores) -> dict:
    """scores.json without its task_origin (which says which form the task came in)."""
    return {k: v for k, v in scores.to_dict().items() if k != "task_origin"}


@pytest.mark.parametrize("probabilities", [False, True])
def test_evaluator_equals_score(exported, probabilities):
    folder = exported["out"] / "metashift-paper-subpop-cat-dog-p12"
    ev = Evaluator(datasets.load_dataset(str(folder), "paper-subpop-cat-dog-p12"))
    tp = ev.plan
    preds = random_predictions(tp, seed=3, probabilities=probabilities)
    test_ids = ev.image_ids("test")
    by_id = preds.set_index("image_id").loc[test_ids]
    if probabilities:
        y = by_id[[f"prob_{c}" for c in tp.classes]].to_numpy()
    else:
        y = np.array([tp.classes.index(c) for c in by_id["prediction"]])
    got = ev.eval(y, split="test")
    want = score(preds[preds["image_id"].isin(test_ids)], folder, splits=["test"])
    assert _numbers(got) == _numbers(want)
    assert got.task_origin["kind"] == "dataset" and want.task_origin["kind"] == "folder"
    assert got.task_origin["spec_sha256"] == want.task_origin["spec_sha256"]  # the published spec, either way
    assert str(got) == want.summary() and "worst group" in str(got)
    # a torch tensor works the same; a subset of rows is scored as that subset
    torch = pytest.importorskip("torch")
    assert _numbers(ev.eval(torch.from_numpy(y), split="test")) == _numbers(want)
    rows = np.arange(0, len(test_ids), 2)
    sub = ev.eval(y[rows], split="test", rows=rows)
    assert sub.splits["test"].n == len(rows)


def test_evaluator_refuses_wrong_shapes_and_values(exported):
    ev = Evaluator(exported["out"] / "metashift-paper-dg-cat-dog-1")
    n = len(ev.image_ids("test"))
    with pytest.raises(InputFormatError, match="rows"):
        ev.eval(np.zeros(n + 1, dtype=int), split="test")
    with pytest.raises(InputFormatError, match="class indices"):
        ev.eval(np.full(n, 7), split="test")
    with pytest.raises(InputFormatError, match="shape"):
        ev.eval(np.zeros((n, 5)), split="test")
    with pytest.raises(UnknownNameError, match="no split"):
        ev.eval(np.zeros(n, dtype=int), split="tset")


def test_groupings_are_integer_ids_with_class_labels(exported):
    ev = Evaluator(exported["out"] / "metashift-paper-dg-cat-dog-1")
    table = ev.plan.table()
    train = table[table["split"] == "train"]
    g = ev.grouping("group", "train")
    assert [g.names.int2str(int(i)) for i in g.ids] == list(train["group"])
    assert g.names.names == ev.plan.group_names()  # the dataset's own group_id ClassLabel
    c = ev.grouping("community", "train")
    assert [c.names.int2str(int(i)) for i in c.ids] == [f"{l}/{k}" for l, k in zip(train["label"], train["community"])]
    ctx = ev.grouping("context", "test")
    assert set(ctx.names.names) == {"sofa", "grass"}
    assert list(ev.grouping("class", "test").ids) == list(ev.labels("test"))
    with pytest.raises(UnknownNameError, match="grouping"):
        ev.grouping("colour", "test")


def test_a_published_task_refuses_options_that_would_change_it(exported):
    folder = exported["out"] / "metashift-paper-dg-cat-dog-1"
    with pytest.raises(InputFormatError, match="already planned"):
        open_task(TaskRef(folder, options={"scale": 0.5}))
    with pytest.raises(InputFormatError, match="seed 0"):
        open_task(TaskRef(folder, seed=3))
    assert open_task(TaskRef(folder, seed=0)).task_id == "paper-dg-cat-dog-1"
    with pytest.raises(InputFormatError, match="own images"):
        open_task(TaskRef(folder, images="images/"))
    with pytest.raises(UnknownNameError, match="made from an artifact"):
        open_task("paper-dg-cat-dog-1")
    with pytest.raises(UnknownNameError, match="config"):
        open_task(TaskRef(folder, config="paper-subpop-cat-dog-p12"))
    with pytest.raises(InputFormatError, match="streamed"):
        open_task(datasets.load_dataset(str(folder), "paper-dg-cat-dog-1", streaming=True))


def test_score_and_tasks_show_commands_read_a_folder(exported, tmp_path, capsys):
    folder = exported["out"] / "metashift-paper-subpop-cat-dog-p12"
    preds = random_predictions(open_task(folder).plan, seed=5)
    preds.to_csv(tmp_path / "p.csv", index=False)
    assert (
        main(["score", "--task", str(folder), "--predictions", str(tmp_path / "p.csv"), "--out", str(tmp_path / "s")])
        == 0
    )
    per_group = pd.read_csv(tmp_path / "s" / "per_group.csv")
    assert set(per_group["level"]) == {"all", "group", "class", "context"}
    want = score(preds, folder)
    row = per_group[(per_group["split"] == "test") & (per_group["level"] == "group")].sort_values("name")
    assert list(row["accuracy"]) == [g.accuracy for g in want.splits["test"].per_group]
    assert json.loads((tmp_path / "s" / "scores.json").read_text())["worst_class"] == json.loads(
        json.dumps(want.to_dict()["worst_class"])
    )
    capsys.readouterr()
    assert main(["tasks", "show", str(folder)]) == 0
    assert "paper-subpop-cat-dog-p12" in capsys.readouterr().out
    assert (
        main(
            [
                "score",
                "--task",
                str(folder),
                "--set",
                "scale=0.5",
                "--predictions",
                str(tmp_path / "p.csv"),
                "--out",
                str(tmp_path / "s2"),
            ]
        )
        == 2
    )
    assert "already planned" in capsys.readouterr().err and not (tmp_path / "s2").exists()


def test_evaluate_sample_is_stratified_by_class():
    assert _stratified_quota({"a": 90, "b": 10}, 10) == {"a": 9, "b": 1}
    assert _stratified_quota({"a": 5, "b": 5}, 3) == {"a": 2, "b": 1}  # ties by name
    assert _stratified_quota({"a": 2, "b": 1}, 10) == {"a": 2, "b": 1}
    table = pd.DataFrame({"split": "test", "image_id": [str(i) for i in range(100)], "label": ["a"] * 80 + ["b"] * 20})
    got = sample_rows(table, 10, seed=0)
    assert got["label"].value_counts().to_dict() == {"a": 8, "b": 2}
    assert got.equals(sample_rows(table, 10, seed=0))


def test_task_cards_open_with_the_shift_sentence_and_name_the_repo(exported):
    for task_id in ("paper-dg-cat-dog-1", "bin-cat-dog"):
        card = (exported["out"] / f"metashift-{task_id}" / "README.md").read_text()
        body = card.split("\n---\n", 1)[1]
        title, first = [line for line in body.splitlines() if line.strip()][:2]
        assert title.startswith("# MetaShift task") and first.startswith("**Train on ") and "the shift is" in first
        assert "--artifact" not in card.split("## Details")[0]
        assert f"--task {NS}/metashift-{task_id} --config {task_id}" in card
        if task_id == "bin-cat-dog":
            assert "metashift-hf evaluate --model" in card and "metashift-hf score" not in card
        else:
            assert "metashift-hf train --task" in card and "metashift-hf score --task" in card


def test_python_api_takes_a_dataset_everywhere(exported):
    loaded = datasets.load_dataset(str(exported["out"] / "metashift-paper-dg-cat-dog-1"), "paper-dg-cat-dog-1")
    assert metashift_hf.Evaluator is Evaluator
    assert metashift_hf.open_task(loaded).task_id == "paper-dg-cat-dog-1"
    with pytest.raises(MetashiftError):
        metashift_hf.open_task(12)


def test_cards_and_tasks_show_state_the_measured_shift(demo_build, tmp_path, capsys):
    world, art = demo_build
    assert (
        main(
            [
                "export",
                "paper-dg-cat-dog-1",
                "--artifact",
                str(art.root),
                "--images",
                str(world.images_dir),
                "--set",
                "scale=0.5",
                "--out",
                str(tmp_path / "out"),
                "-q",
            ]
        )
        == 0
    )
    repo = tmp_path / "out" / "metashift-paper-dg-cat-dog-1"
    spec = metashift_hf.shift_spec(repo)
    assert spec.measured is not None and spec.measured.type == "joint" and spec.measured.agrees
    card = (repo / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith("| measured shift (test vs train) |"))
    assert "joint: P(context) TV 1.000" in row and "declared joint (the design); verdict: consistent" in row
    capsys.readouterr()
    assert main(["tasks", "show", str(repo)]) == 0
    assert "measured: joint: P(context) TV 1.000" in capsys.readouterr().out
