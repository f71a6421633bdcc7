"""MetaShift from COCO: the streaming reader, co-occurrence subsets (checked against an independent
computation on a seeded COCO-format world), the paper's COCO subpopulation tasks, COCO image files."""

from __future__ import annotations

import itertools
import json
import zipfile

import pytest

from metashift_hf.builders.build import BuildOptions, build_from_inputs
from metashift_hf.builders.build_inputs import CocoInstances
from metashift_hf.builders.coco import COCO_CATEGORIES, read_coco_annotations
from metashift_hf.builders.images import open_images
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.sources.coco_world import write_coco_world
from metashift_hf.tasks import coco_tasks
from metashift_hf.tasks.families import plan_task


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return write_coco_world(tmp_path_factory.mktemp("coco") / "world", seed=3)


@pytest.fixture(scope="module")
def coco_artifact(world, tmp_path_factory):
    files = sorted((world / "annotations").glob("instances_*.json"))
    return build_from_inputs(tmp_path_factory.mktemp("art") / "a", given=CocoInstances(files), plots=False)


def expected_subsets(world) -> dict[str, set[str]]:
    """Plain json + sets: s(c) = images holding an object of category s and one of category c."""
    tags: dict[str, set[str]] = {}
    for f in sorted((world / "annotations").glob("instances_*.json")):
        doc = json.loads(f.read_text())
        names = {c["id"]: c["name"] for c in doc["categories"]}
        for a in doc["annotations"]:
            tags.setdefault(str(a["image_id"]), set()).add(names[a["category_id"]])
    out: dict[str, set[str]] = {}
    for image, ts in tags.items():
        for s, c in itertools.permutations(sorted(ts), 2):
            out.setdefault(f"{s}({c})", set()).add(image)
    return out


def test_world_builds_to_exactly_the_cooccurrence_subsets(world, coco_artifact):
    expected = expected_subsets(world)
    table = coco_artifact.subsets_table()
    assert sorted(table["subset"]) == sorted(expected)
    for name in expected:
        assert coco_artifact.images(name) == frozenset(expected[name]), name
    # COCO's super-categories: a subset's category is its context's
    sup = {n: s for _, n, s in COCO_CATEGORIES}
    assert all(row.category == sup[row.context] for row in table.itertuples())
    assert coco_artifact.manifest.source == "coco" and coco_artifact.classes() == ["cat", "dog", "person"]
    assert coco_artifact.image_metadata(next(iter(expected["cat(couch)"])))["width"] == 16


def test_zip_and_json_give_the_same_artifact(world, coco_artifact, tmp_path):
    z = tmp_path / "annotations_trainval2017.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for f in sorted((world / "annotations").glob("*.json")):
            zf.write(f, f"annotations/{f.name}")
    a = build_from_inputs(tmp_path / "z", given=CocoInstances([z]), plots=False)
    assert a.content_hash == coco_artifact.content_hash


def test_subject_options(world, tmp_path):
    files = sorted((world / "annotations").glob("instances_*.json"))
    a = build_from_inputs(
        tmp_path / "a",
        given=CocoInstances(files),
        plots=False,
        options=BuildOptions(subject_categories=("animal",), subject_tags=("person",)),
    )
    assert set(a.subsets_table()["subject"]) <= {n for _, n, s in COCO_CATEGORIES if s == "animal"} | {"person"}
    with pytest.raises(InputFormatError, match="do not occur"):
        build_from_inputs(
            tmp_path / "b", given=CocoInstances(files), plots=False, options=BuildOptions(subject_tags=("unicorn",))
        )


def test_reader_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [{"id": 1}], "annotations": [{"image_id": 1, "category_id": 5}], "categories": [')
    with pytest.raises(InputFormatError, match="bad.json"):
        read_coco_annotations([bad])
    bad.write_text('{"images": [{"id": 1}], "annotations": [{"image_id": 1, "category_id": 5}], "categories": []}')
    with pytest.raises(InputFormatError, match="category ids"):
        read_coco_annotations([bad])
    bad.write_text('{"images": [], "categories": []}')
    with pytest.raises(InputFormatError, match="not COCO instances JSON"):
        read_coco_annotations([bad])
    with pytest.raises(InputFormatError, match="does not exist"):
        read_coco_annotations([tmp_path / "nope.json"])


@pytest.mark.parametrize(
    "task_id,minority",
    [
        ("paper-coco-subpop-cat-dog-p13", 195),
        ("paper-coco-subpop-cat-dog-p7", 105),
        ("paper-coco-subpop-cat-dog-p1", 15),
    ],
)
def test_coco_subpopulation_task_has_the_paper_sizes_and_no_leakage(coco_artifact, world, task_id, minority):
    plan = plan_task(task_id, coco_artifact, seed=0)
    spec = plan.spec
    assert spec.split_sizes["train"] == 3000 and spec.split_sizes["test"] == 524
    assert {g.group: g.n for g in spec.test_groups} == {
        "cat(indoor)": 131,
        "cat(outdoor)": 131,
        "dog(indoor)": 131,
        "dog(outdoor)": 131,
    }
    train = {g.group: g.n for g in spec.train_groups}
    assert train["cat(outdoor)"] == train["dog(indoor)"] == minority
    assert train["cat(indoor)"] == train["dog(outdoor)"] == 1500 - minority
    seen: dict[str, str] = {}
    for split, rows in plan.splits.items():
        for r in rows:
            assert seen.setdefault(r.image_id, split) == split, f"{r.image_id} in {seen[r.image_id]} and {split}"
            assert r.group == f"{r.label}({r.context})" and r.context in ("indoor", "outdoor")
            assert r.community >= 0 or not r.contexts
    both = coco_artifact.class_images("cat", kept_only=False) & coco_artifact.class_images("dog", kept_only=False)
    assert both and not both & set(seen)
    # group membership follows the super-categories
    sup = {n: s for _, n, s in COCO_CATEGORIES}
    contexts = {g.group: g.contexts for g in spec.train_groups}
    assert contexts["cat(indoor)"] and all(sup[c] in coco_tasks.INDOOR for c in contexts["cat(indoor)"])
    assert contexts["dog(outdoor)"] and all(sup[c] in coco_tasks.OUTDOOR for c in contexts["dog(outdoor)"])
    assert spec.paper.categories == {"indoor": coco_tasks.INDOOR, "outdoor": coco_tasks.OUTDOOR}
    # every image is found in the COCO image folders under its unpadded COCO id
    with open_images(world) as src:
        assert all(r.image_id in src for rows in plan.splits.values() for r in rows)


def test_coco_task_needs_a_coco_artifact(tmp_path):
    from metashift_hf.builders.build import build_artifact
    from metashift_hf.builders.subsets import CandidateSubsets

    d = {f"cat(c{j})": [f"i{k}" for k in range(30)] for j in range(6)}
    a = build_artifact(CandidateSubsets.from_dict(d), tmp_path / "a", plots=False)
    with pytest.raises(Exception, match="COCO super-categories|needs the classes"):
        plan_task("paper-coco-subpop-cat-dog-p13", a)


def test_build_cli(world, tmp_path, capsys):
    files = [str(p) for p in sorted((world / "annotations").glob("instances_*.json"))]
    assert (
        main(
            [
                "build",
                "--coco-annotations",
                *files,
                "--out",
                str(tmp_path / "a"),
                "--no-plots",
                "--quiet",
                "--subject-tags",
                "cat,dog",
            ]
        )
        == 0
    )
    assert "classes: 2" in capsys.readouterr().out
    assert main(["build", "--coco-annotations", *files, "--tags", files[0], "--out", str(tmp_path / "b")]) == 2
    assert "2 sources given" in capsys.readouterr().err


def test_coco_card_names_coco_not_visual_genome(coco_artifact, world, tmp_path):
    from huggingface_hub import DatasetCard

    from metashift_hf.cards import render as cards
    from metashift_hf.hub.api import prepare

    task = prepare(
        TaskRef("paper-coco-subpop-cat-dog-p7", artifact=coco_artifact, images=world, options={"scale": 0.05}),
        cache_dir=tmp_path / "cache",
    )
    info = cards.task_info(task, coco_artifact, repo_id="ns/metashift-coco")
    text = cards.render_task_card(info, None)
    card = DatasetCard(text)
    assert "coco" in card.data.tags and "visual-genome" not in card.data.tags
    assert card.data.license == "cc-by-4.0" and "MS-COCO" in text and "artifact `source: coco`" in text
