"""metashift_hf.api: plan without images, available tasks (with a match registry), prepare/load,
matched-task default shift, errors."""
from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import metashift_hf
from metashift_hf import api
from metashift_hf.errors import MissingImagesError, UnknownNameError
from test_builder import world  # noqa: F401  (session fixture: artifact + images)


@pytest.fixture(scope="module")
def matched(world, tmp_path_factory):  # noqa: F811
    """A copy of the world artifact with a hand-written ARTIFACT/match/tasks.parquet (DEVELOPERS.md columns)."""
    root = tmp_path_factory.mktemp("matched") / "artifact"
    shutil.copytree(world["artifact"].root, root)
    rows = [
        {"task_id": "bin-cat-dog", "kind": "binary", "classes": ["cat", "dog"], "synsets": ["cat.n.01", "dog.n.01"],
         "lca": "n02075296", "lca_depth": 9, "path_similarity": 0.2, "n_subsets": [10, 10], "n_images": [700, 700],
         "available": True},
        {"task_id": "imagenet-5", "kind": "multiclass", "classes": ["airplane", "cat", "dog", "elephant", "horse"],
         "synsets": ["", "", "", "", ""], "lca": "", "lca_depth": 0, "path_similarity": 0.1,
         "n_subsets": [0, 10, 10, 0, 0], "n_images": [0, 700, 700, 0, 0], "available": False},
    ]
    (root / "match").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), root / "match" / "tasks.parquet")
    return root


def test_plan_needs_no_images(world):  # noqa: F811
    p = api.plan("paper-subpop-cat-dog-p6", world["artifact"].root, scale=0.1, seed=2)
    t = p.table()
    assert list(t.columns) == ["split", "image_id", "label", "group", "context", "contexts", "community"]
    assert t.groupby("split").size().to_dict() == p.spec["split_sizes"]
    assert p.spec["seed"] == 2 and p.spec["artifact_hash"] == world["artifact"].content_hash
    assert p.spec["rules"]["min_images_per_subset"] == 25


def test_available_tasks(world, matched):  # noqa: F811
    ids = api.available_tasks(world["artifact"].root)
    assert ids[:7] == ["paper-dg-cat-dog-1", "paper-dg-cat-dog-2", "paper-dg-cat-dog-3", "paper-dg-cat-dog-4",
                       "paper-subpop-cat-dog-p12", "paper-subpop-cat-dog-p6", "paper-subpop-cat-dog-p1"]
    assert {"class-cat", "class-dog", "classes", "attributes"} <= set(ids)
    assert not any(i.startswith("bin-") for i in ids)
    with_match = api.available_tasks(matched)
    assert "bin-cat-dog" in with_match and "imagenet-5" not in with_match  # unavailable rows are not offered


def test_matched_task_default_shift(world, matched, tmp_path):  # noqa: F811
    task = api.prepare("bin-cat-dog", matched, world["folder"], cache_dir=tmp_path, seed=1)
    ds, spec = task.dataset, task.spec
    assert task.task_id == "bin-cat-dog" and set(ds) == {"train", "validation", "test", "id_test"}
    art = world["artifact"]
    for cls in ("cat", "dog"):
        comm = art.communities(cls)
        train_ctx = {n[len(cls) + 1:-1] for n, k in comm.items() if k == 0}
        rows = [r for r in ds["train"].remove_columns("image") if r["label"] == ds["train"].features["label"].str2int(cls)]
        assert rows and all(r["community"] == 0 and set(r["contexts"]) & train_ctx for r in rows)
        test = [r for r in ds["test"].remove_columns("image") if r["group"].startswith(f"{cls}(")]
        assert all(r["community"] > 0 for r in test)
    ids = [i for s in ds for i in ds[s]["image_id"]]
    assert len(ids) == len(set(ids))
    assert spec["distance"]["rule"] == "paper" and set(spec["distance"]["per_class"]) == {"cat", "dog"}
    assert spec["registry"]["kind"] == "binary"
    with pytest.raises(UnknownNameError, match="validation_fraction"):
        api.plan("bin-cat-dog", matched, validation_fractio=0.2)
    with pytest.raises(Exception, match="not available"):
        api.plan("imagenet-5", matched)


def test_load_equals_prepare_and_top_level_export(world, tmp_path):  # noqa: F811
    kw = dict(scale=0.1, seed=5, cache_dir=tmp_path)
    prepared = api.prepare("paper-subpop-cat-dog-p1", world["artifact"], world["zip"], **kw)
    loaded = metashift_hf.load("paper-subpop-cat-dog-p1", world["artifact"].root, world["folder"], **kw)
    for s in prepared.dataset:
        assert prepared.dataset[s]["image_id"] == loaded[s]["image_id"]
    assert prepared.spec["minority_fraction"]["achieved"] == round(2 / 170, 6)


def test_errors(world):  # noqa: F811
    with pytest.raises(MissingImagesError, match="images"):
        api.prepare("class-cat", world["artifact"])
    with pytest.raises(UnknownNameError, match="did you mean"):
        api.plan("paper-subpop-cat-dog-p3", world["artifact"])
    with pytest.raises(UnknownNameError, match="scale"):
        api.plan("paper-dg-cat-dog-1", world["artifact"], scal=0.1)
