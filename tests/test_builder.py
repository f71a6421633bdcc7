"""The `metashift` datasets builder: splits vs spec, original bytes, folder vs zip, determinism,
missing/corrupt images, image metadata, migration options, real shared images."""

from __future__ import annotations

import shutil
import zipfile
from collections import Counter

import pytest

from fixtures.worlds import ATTRS
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.errors import InputFormatError, MissingImagesError, UnknownNameError
from metashift_hf.tasks.families import plan_task
from metashift_hf.tasks.metashift import LEGACY_CLASSES, Metashift, describe, features_with_spec, spec_of_features
from metashift_hf.tasks.metashift import spec_of_dataset as shift_spec


def build(builder_world, task, images=None, cache=None, **kw):
    kw.setdefault("overrides", {"scale": 0.1} if task.startswith("paper-") else None)
    b = Metashift(
        config_name=task,
        artifact=builder_world["artifact"].root,
        images=str(images or builder_world["folder"]),
        cache_dir=str(cache or builder_world["root"] / "cache"),
        **kw,
    )
    b.download_and_prepare()
    return b.as_dataset()


def test_subpop_splits_match_spec_and_carry_original_bytes(builder_world):
    ds = build(builder_world, "paper-subpop-cat-dog-p12")
    spec = shift_spec(ds)
    assert set(ds) == {"train", "validation", "test"}
    assert spec.split_sizes == {s: ds[s].num_rows for s in ds} == {"train": 170, "validation": 16, "test": 56}
    for s in ("train", "validation", "test"):
        groups = ds[s]["group"]
        for e in getattr(spec, f"{s}_groups"):
            assert groups.count(e.group) == e.n > 0
    assert spec.minority_fraction.achieved == round(20 / 170, 6)
    ids = [i for s in ds for i in ds[s]["image_id"]]
    assert len(ids) == len(set(ids)), "an image is in two splits"
    raw = ds["test"].cast_column("image", __import__("datasets").Image(decode=False))
    for rec in raw.select(range(10)):
        assert rec["image"]["bytes"] == (builder_world["folder"] / f"{rec['image_id']}.jpg").read_bytes()
        assert rec["image"]["path"] == f"{rec['image_id']}.jpg"
    assert ds["train"].features["label"].names == ["cat", "dog"]


def test_dg_leakage_and_ambiguous_removed(builder_world):
    ds = build(builder_world, "paper-dg-cat-dog-3", overrides={"scale": 0.2, "additional_test_per_group": None})
    amb = builder_world["subsets"]["cat(dog)"]
    per_split = {s: set(ds[s]["image_id"]) for s in ds}
    assert not any(per_split[s] & amb for s in per_split)
    names = list(per_split)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not per_split[a] & per_split[b], (a, b)
    spec = shift_spec(ds)
    assert spec.distance.paper_value == 1.12 and spec.distance.rule == "code"
    assert any(e.additional for e in spec.test_groups)


def test_same_seed_identical_parquet_bytes_folder_and_zip(builder_world, tmp_path):
    outs = []
    for n, images in enumerate((builder_world["folder"], builder_world["folder"], builder_world["zip"])):
        ds = build(builder_world, "paper-subpop-cat-dog-p6", images=images, cache=tmp_path / f"c{n}", seed=3)
        files = {}
        for s in ds:
            path = tmp_path / f"{n}-{s}.parquet"
            ds[s].to_parquet(str(path))
            files[s] = path.read_bytes()
        outs.append(files)
    assert outs[0] == outs[1], "same seed gave different parquet bytes"
    assert outs[0] == outs[2], "zip and folder sources gave different parquet bytes"
    other = build(builder_world, "paper-subpop-cat-dog-p6", cache=tmp_path / "c9", seed=4)
    assert (
        other["train"]["image_id"]
        != __import__("datasets").load_dataset(
            "parquet", data_files=str(tmp_path / "0-train.parquet"), split="train", cache_dir=str(tmp_path / "pq")
        )["image_id"]
    )


def test_missing_images_error_and_skip(builder_world, tmp_path):
    folder = tmp_path / "imgs"
    shutil.copytree(builder_world["folder"], folder)
    plan = plan_task("paper-subpop-cat-dog-p1", builder_world["artifact"], scale=0.1)
    gone = plan.splits["train"][0].image_id
    (folder / f"{gone}.jpg").unlink()
    with pytest.raises(MissingImagesError) as exc:
        build(builder_world, "paper-subpop-cat-dog-p1", images=folder, cache=tmp_path / "c1")
    assert gone in exc.value.what and "--on-missing skip" in exc.value.fix
    ds = build(builder_world, "paper-subpop-cat-dog-p1", images=folder, cache=tmp_path / "c2", on_missing="skip")
    spec = shift_spec(ds)
    assert ds["train"].num_rows == spec.split_sizes["train"] == plan.spec.split_sizes["train"] - 1
    assert spec.skipped_images.n == 1 and spec.skipped_images.missing == (gone,)
    assert ds["train"].features["group_id"].names == sorted({g for d in ds.values() for g in d["group"]})
    # putting the image back gives a fresh build in the same cache, not the stale skipped one
    shutil.copy(builder_world["folder"] / f"{gone}.jpg", folder / f"{gone}.jpg")
    again = build(builder_world, "paper-subpop-cat-dog-p1", images=folder, cache=tmp_path / "c2", on_missing="skip")
    assert gone in again["train"]["image_id"] and shift_spec(again).skipped_images is None


def test_corrupt_image_is_reported(builder_world, tmp_path):
    folder = tmp_path / "imgs"
    shutil.copytree(builder_world["folder"], folder)
    plan = plan_task("paper-subpop-cat-dog-p1", builder_world["artifact"], scale=0.1)
    bad = plan.splits["test"][3].image_id
    data = (folder / f"{bad}.jpg").read_bytes()
    (folder / f"{bad}.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(MissingImagesError, match=bad):
        build(builder_world, "paper-subpop-cat-dog-p1", images=folder, cache=tmp_path / "c1")
    ds = build(builder_world, "paper-subpop-cat-dog-p1", images=folder, cache=tmp_path / "c2", on_missing="skip")
    assert bad not in ds["test"]["image_id"] and shift_spec(ds).skipped_images.corrupt == (bad,)


def test_with_image_metadata_round_trip(builder_world):
    ds = build(builder_world, "class-cat", with_image_metadata=True)
    assert set(ds) == {"train"}
    rows = ds["train"].remove_columns("image")
    for rec in rows.select(range(0, rows.num_rows, max(1, rows.num_rows // 20))):
        m = builder_world["meta"][rec["image_id"]]
        assert (rec["width"], rec["height"], rec["location"], rec["weather"]) == (
            m["width"],
            m["height"],
            m["location"],
            m["weather"],
        )
        want = [
            {
                "object_id": k,
                **{f: v[f] for f in ("name", "x", "y", "w", "h", "attributes")},
                "relations": v["relations"],
            }
            for k, v in sorted(m["objects"].items())
        ]
        assert rec["objects"] == want
    assert ds["train"].features["objects"].feature["x"].dtype == "int32"


def test_class_collection_one_row_per_image_with_contexts(builder_world):
    ds = build(builder_world, "class-dog")
    ids = ds["train"]["image_id"]
    assert len(ids) == len(set(ids))
    a = builder_world["artifact"]
    assert set(ids) == a.class_images("dog")
    for rec in ds["train"].remove_columns("image").select(range(30)):
        assert all(rec["image_id"] in a.images(f"dog({c})") for c in rec["contexts"])
        assert rec["group"] == f"dog(community-{rec['community']})"


def test_migration_options(builder_world):
    art = builder_world["artifact"]
    attrs = plan_task("attributes", art, selected_classes=["cat"])
    assert {c for r in attrs.splits["train"] for c in r.contexts} <= set(ATTRS["cat"])
    same = plan_task("attributes", art, attributes_dataset=True, selected_classes=["cat"])
    assert same.table().equals(attrs.table())
    with pytest.raises(InputFormatError, match="attributes_dataset"):
        plan_task("classes", art, attributes_dataset=True)
    only = plan_task("attributes", art, attributes=["cat(orange)", "dog(sitting)"])
    assert {(r.label, c) for r in only.splits["train"] for c in r.contexts} == {("cat", "orange"), ("dog", "sitting")}
    with pytest.raises(UnknownNameError, match="did you mean"):
        plan_task("attributes", art, attributes=["cat(orang)"])
    big = plan_task("classes", art, image_subset_size_threshold=60)
    assert all(len(art.images(f"{r.label}({c})")) >= 60 for r in big.splits["train"][:200] for c in r.contexts)
    with pytest.raises(InputFormatError, match="min_images_per_subset"):
        plan_task("classes", art, image_subset_size_threshold=10)
    n = {c: len(art.subsets_of(c)) for c in ("cat", "dog")}
    assert n["cat"] != n["dog"]
    small, large = sorted(n, key=n.get)
    assert plan_task("classes", art, min_local_groups=n[small]).classes == [large]
    assert plan_task("classes", art, min_local_groups=n[small] - 1).classes == ["cat", "dog"]
    with pytest.raises(InputFormatError, match="collections"):
        plan_task("paper-dg-cat-dog-1", art, selected_classes=["cat"])
    assert "bowl" in LEGACY_CLASSES


def test_bad_task_name_did_you_mean(builder_world):
    with pytest.raises(UnknownNameError) as exc:
        Metashift(
            config_name="paper-dg-cat-dgo-1",
            artifact=builder_world["artifact"].root,
            images=str(builder_world["folder"]),
            cache_dir=str(builder_world["root"] / "cache"),
        )
    assert "paper-dg-cat-dog-1" in exc.value.what
    with pytest.raises(UnknownNameError, match="class-cat"):
        plan_task("class-cta", builder_world["artifact"])


def test_features_carry_spec(builder_world):
    ds = build(builder_world, "paper-subpop-cat-dog-p12")
    plan = plan_task("paper-subpop-cat-dog-p12", builder_world["artifact"], scale=0.1)
    assert spec_of_features(ds["train"].features) == plan.spec == shift_spec(ds)
    assert ds["train"].info.description == describe(plan)
    assert spec_of_features(features_with_spec(ds["test"].features, plan.spec)) == plan.spec
    plain = ds["train"].features.copy()
    plain["group"] = __import__("datasets").Value("string")
    with pytest.raises(InputFormatError, match="no shift spec"):
        spec_of_features(plain)


def _community_by_the_rule(art, cls: str, group, contexts) -> int:
    """The documented rule, independently: the group's community when all its subsets that have images
    share one kept community (community groups: their own), else the one holding most of the row's
    contexts (ties: smallest id), -1 when the row has none."""
    comm = art.communities(cls)
    label = group.group[len(cls) + 1 : -1]
    if label.startswith("community-"):
        return int(label.split("-")[1])
    shared = {
        comm.get(f"{cls}({c})", -1)
        for c in (group.contexts_found if group.contexts_found is not None else group.contexts)
    }
    if len(shared) == 1 and -1 not in shared:
        return shared.pop()
    counts = Counter(comm[f"{cls}({c})"] for c in contexts if f"{cls}({c})" in comm)
    return min(counts, key=lambda k: (-counts[k], k)) if counts else -1


@pytest.mark.parametrize("task", ["paper-subpop-cat-dog-p12", "paper-dg-cat-dog-1", "class-dog", "attributes"])
def test_group_fields_mean_one_thing_on_every_task(builder_world, task, tmp_path):
    import datasets

    ds = build(builder_world, task)
    art = builder_world["artifact"]
    spec = shift_spec(ds)
    groups = {g.group: g for gs in spec.groups().values() for g in gs}
    first = next(iter(ds.values())).features
    cols = list(first)
    assert cols[cols.index("group") + 1] == "group_id" and isinstance(first["group_id"], datasets.ClassLabel)
    names = first["group_id"].names
    assert names == sorted({g for d in ds.values() for g in d["group"]})
    for split, d in ds.items():
        assert d.features["group_id"] == first["group_id"]
        classes = d.features["label"].names
        for r in d.remove_columns("image"):
            cls = classes[r["label"]]
            assert names[r["group_id"]] == r["group"] == f"{cls}({r['context']})" and r["context"], r
            assert r["community"] == _community_by_the_rule(art, cls, groups[r["group"]], r["contexts"]), r
            assert r["community"] >= 0 or not r["contexts"], r  # -1 only without a kept context
    if task.startswith("paper-subpop"):
        assert {c for d in ds.values() for c in d["context"]} == {"indoor", "outdoor"}
        assert all(k >= 0 for d in ds.values() for k, c in zip(d["community"], d["contexts"]) if c)
    # the ClassLabel survives parquet and datasets.load_dataset
    path = tmp_path / "train.parquet"
    ds["train"].to_parquet(str(path))
    back = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "pq"))
    assert back.features["group_id"] == first["group_id"] and back["group_id"] == ds["train"]["group_id"]


REAL = {  # real GQA/VG ids of the shared images and real subsets they belong to (attributes pickle)
    "horse(white)": ["2375429", "1339", "2331963", "2354786"],
    "horse(brown)": ["2368326", "2400861", "2405722", "n166008"],
    "bus(blue)": ["2415126", "n578564", "1", "2"],
    "bus(red)": ["2415125", "4", "5", "2375429"],
}


@pytest.fixture(scope="module")
def real(shared_ref, tmp_path_factory):
    root = tmp_path_factory.mktemp("real")
    files = {p.stem: p for p in sorted((shared_ref / "images").glob("*/*.jpg"))}
    subsets = {f"{c}({x})": ids for c in ("horse", "bus") for x in ("a", "b", "c") for ids in [sorted(files)]}
    subsets.update(REAL)
    art = build_artifact(
        CandidateSubsets.from_dict(subsets),
        root / "artifact",
        BuildOptions(min_images_per_subset=1, min_subsets_per_class=2),
        plots=False,
    )
    zpath = root / "real.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for iid, p in files.items():
            z.write(p, f"images/{iid}.jpg")
    return {"artifact": art, "files": files, "folder": shared_ref / "images", "zip": zpath, "root": root}


@pytest.mark.parametrize("source", ["folder", "zip"])
def test_real_shared_images_through_builder(real, source):
    b = Metashift(
        config_name="classes",
        artifact=real["artifact"].root,
        images=str(real[source]),
        cache_dir=str(real["root"] / f"cache-{source}"),
    )
    b.download_and_prepare()
    ds = b.as_dataset()["train"]
    assert ds.num_rows == 2 * len(real["files"])  # every image shows a horse and a bus subset
    raw = ds.cast_column("image", __import__("datasets").Image(decode=False))
    for rec in raw:
        assert rec["image"]["bytes"] == real["files"][rec["image_id"]].read_bytes()
    img = ds[0]["image"]
    assert img.size[0] > 50 and img.format == "JPEG"


def test_real_attributes_pickle_collection(shared_ref, tmp_path_factory):
    """The published MetaShift-Attributes pickle (66 classes / 679 subsets under the rules)."""
    from metashift_hf.builders.pickles import load_candidate_pickle
    from metashift_hf.hub.api import available_tasks

    cands = load_candidate_pickle(shared_ref / "metashift" / "attributes-candidate-subsets.pkl", attributes=True)
    art = build_artifact(
        cands,
        tmp_path_factory.mktemp("attr") / "artifact",
        BuildOptions(include_attributes=True, include_objects=False, include_general=False),
        plots=False,
    )
    ids = available_tasks(art)
    assert "attributes" in ids and "class-horse" in ids
    assert not any(i.startswith("paper-") for i in ids)  # cat and dog exist, the paper's object contexts do not
    p = plan_task(
        "attributes",
        art,
        selected_classes=["cat", "dog", "horse"],
        attributes=["cat(orange)", "dog(sitting)", "horse(white)"],
    )
    rows = p.splits["train"]
    assert (
        len(rows)
        == len({(r.label, r.image_id) for r in rows})
        == sum(len(art.images(n)) for n in ("cat(orange)", "dog(sitting)", "horse(white)"))
    )
    assert [r.contexts for r in rows if r.image_id == "2375429"] == [("white",)]
    assert p.classes == ["cat", "dog", "horse"] and len(art.classes()) == 66
