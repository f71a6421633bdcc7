"""metashift_hf.hub.api: plan without images, available tasks (with a match registry), prepare/load,
matched-task default shift, errors."""

from __future__ import annotations

import pytest

import metashift_hf
from metashift_hf.core.errors import (
    EmptyGroupError,
    EmptyResultError,
    MetashiftError,
    MissingImagesError,
    UnknownNameError,
)
from metashift_hf.hub import api, task_open
from metashift_hf.hub.api import plan
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.tasks import shifts


def test_plan_needs_no_images(builder_world):
    p = api.plan(
        TaskRef("paper-subpop-cat-dog-p6", artifact=builder_world["artifact"].root, seed=2, options={"scale": 0.1})
    )
    t = p.table()
    assert list(t.columns) == ["split", "image_id", "label", "group", "group_id", "context", "contexts", "community"]
    assert [p.group_names()[i] for i in t["group_id"]] == list(t["group"])
    assert list(t["group"]) == [f"{c}({x})" for c, x in zip(t["label"], t["context"])]
    assert t.groupby("split").size().to_dict() == p.spec.split_sizes
    assert p.spec.seed == 2 and p.spec.artifact_hash == builder_world["artifact"].content_hash
    assert p.spec.rules.min_images_per_subset == 25


def test_available_tasks(builder_world, matched):
    ids = api.available_tasks(builder_world["artifact"].root)
    assert ids[:7] == [
        "paper-dg-cat-dog-1",
        "paper-dg-cat-dog-2",
        "paper-dg-cat-dog-3",
        "paper-dg-cat-dog-4",
        "paper-subpop-cat-dog-p12",
        "paper-subpop-cat-dog-p6",
        "paper-subpop-cat-dog-p1",
    ]
    assert {"class-cat", "class-dog", "classes", "attributes"} <= set(ids)
    assert not any(i.startswith("bin-") for i in ids)
    with_match = api.available_tasks(matched)
    assert "bin-cat-dog" in with_match and "imagenet-5" not in with_match  # unavailable rows are not offered


def test_matched_task_default_shift(builder_world, matched, tmp_path):
    from metashift_hf import wordnet_match

    task = api.prepare(
        TaskRef("bin-cat-dog", artifact=matched, images=builder_world["folder"], seed=1), cache_dir=tmp_path
    )
    ds, spec = task.dataset, task.spec
    assert task.task_id == "bin-cat-dog" and set(ds) == {"train", "validation", "test", "id_test"}
    art = builder_world["artifact"]
    entry = wordnet_match.get_task(matched, "bin-cat-dog")
    selected = wordnet_match.load_match(matched).task_subsets(entry) if entry.subset_rule == "selected" else None
    for cls in ("cat", "dog"):
        comm = {n: k for n, k in art.communities(cls).items() if selected is None or n in selected[cls]}
        id_comm = min(comm.values())
        train_ctx = {n[len(cls) + 1 : -1] for n, k in comm.items() if k == id_comm}
        label = ds["train"].features["label"].str2int(cls)
        rows = [r for r in ds["train"].remove_columns("image") if r["label"] == label]
        assert rows and all(r["community"] == id_comm and set(r["contexts"]) & train_ctx for r in rows)
        test = [r for r in ds["test"].remove_columns("image") if r["label"] == label]
        assert test and all(r["community"] != id_comm for r in test)
        ood_ctx = {n[len(cls) + 1 : -1] for n, k in comm.items() if k != id_comm}
        assert all(set(r["contexts"]) & ood_ctx for r in test)
    ids = [i for s in ds for i in ds[s]["image_id"]]
    assert len(ids) == len(set(ids))
    names = ds["train"].features["group_id"].names
    for s in ds:  # matched groups are communities: context community-<k>, community k
        classes = ds[s].features["label"].names
        for r in ds[s].remove_columns("image"):
            assert names[r["group_id"]] == r["group"] == f"{classes[r['label']]}({r['context']})"
            assert r["context"] == f"community-{r['community']}"
    assert spec.distance.rule == "paper" and set(spec.distance.per_class) == {"cat", "dog"}
    assert spec.registry.kind == "binary"
    with pytest.raises(UnknownNameError, match="validation_fraction"):
        api.plan(TaskRef("bin-cat-dog", artifact=matched, options={"validation_fractio": 0.2}))
    assert "imagenet-5" not in api.available_tasks(matched)  # airplane/elephant/horse are absent here
    with pytest.raises(MetashiftError, match="not available"):
        api.plan(TaskRef("imagenet-5", artifact=matched))


def test_load_equals_prepare_and_top_level_export(builder_world, tmp_path):
    kw = dict(seed=5, options={"scale": 0.1})
    task, art = "paper-subpop-cat-dog-p1", builder_world["artifact"]
    prepared = api.prepare(TaskRef(task, artifact=art, images=builder_world["zip"], **kw), cache_dir=tmp_path)
    loaded = metashift_hf.load(
        metashift_hf.TaskRef(task, artifact=art.root, images=builder_world["folder"], **kw), cache_dir=tmp_path
    )
    for s in prepared.dataset:
        assert prepared.dataset[s]["image_id"] == loaded[s]["image_id"]
    assert prepared.spec.minority_fraction.achieved == round(2 / 170, 6)


def test_errors(builder_world):
    with pytest.raises(MissingImagesError, match="images"):
        api.prepare(TaskRef("class-cat", artifact=builder_world["artifact"]))
    with pytest.raises(UnknownNameError, match="did you mean"):
        api.plan(TaskRef("paper-subpop-cat-dog-p3", artifact=builder_world["artifact"]))
    with pytest.raises(UnknownNameError, match="scale"):
        api.plan(TaskRef("paper-dg-cat-dog-1", artifact=builder_world["artifact"], options={"scal": 0.1}))


def test_plan_identical_across_processes_and_hash_seeds(builder_world):
    """Set iteration order changes with PYTHONHASHSEED; plans must not."""
    import hashlib
    import os
    import subprocess
    import sys

    code = (
        "import hashlib, sys; from metashift_hf import TaskRef, plan; "
        "p = plan(TaskRef(sys.argv[1], artifact=sys.argv[2], seed=7, options={'scale': 0.1})); "
        "print(hashlib.sha256(p.table().to_json().encode() + p.spec.to_json().encode()).hexdigest())"
    )
    outs = set()
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        for task in ("paper-dg-cat-dog-2",):
            r = subprocess.run(
                [sys.executable, "-c", code, task, str(builder_world["artifact"].root)],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 0, r.stderr
            outs.add(r.stdout.strip())
    assert len(outs) == 1
    local = plan(
        TaskRef("paper-dg-cat-dog-2", artifact=builder_world["artifact"].root, seed=7, options={"scale": 0.1})
    )
    assert hashlib.sha256(local.table().to_json().encode() + local.spec.to_json().encode()).hexdigest() in outs


def test_an_empty_group_is_not_a_size_problem(builder_world, monkeypatch):
    with pytest.raises(EmptyGroupError, match="has 0 images") as empty:
        shifts._need("t", "dog(x)", 0, 1, "train", "scale=")
    assert "--set" not in empty.value.fix and "cannot be made" in empty.value.fix
    with pytest.raises(EmptyResultError, match="has 3 images") as small:
        shifts._need("t", "dog(x)", 3, 5, "train", "scale=")
    assert not isinstance(small.value, EmptyGroupError) and "lower the sizes" in small.value.fix

    def empty_plan(task, *a, **k):
        raise EmptyGroupError(f"task {task}: group dog(x) has 0 images", "this task cannot be made from this artifact")

    monkeypatch.setattr(task_open, "plan_task", empty_plan)
    monkeypatch.setattr(task_open, "fitting_scale", lambda *a, **k: pytest.fail("no scale can plan an empty group"))
    with pytest.raises(EmptyGroupError) as exc:
        TaskOrigin(artifact=builder_world["artifact"].root).open(["paper-dg-cat-dog-1"])
    assert "--set" not in exc.value.fix and "cannot be made" in exc.value.fix
