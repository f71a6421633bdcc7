"""MetaShift from any multi-label dataset: a tags table (--tags) and a dataset with a multi-label
column (--hf-dataset, read through datasets.load_dataset) build the same artifact from the same tags;
images then come from the dataset's image column."""

from __future__ import annotations

import io
import itertools
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from metashift_hf.builders.build import BuildOptions, build_from_inputs
from metashift_hf.builders.build_inputs import HubMultiLabel, SceneGraphs, TagsTable
from metashift_hf.builders.tags import MultiLabelDataset, TagTable, candidates_from_tags, read_tags_file
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError
from metashift_hf.hub.api import prepare
from metashift_hf.hub.task_data import TaskRef


N = 240


def tags_of(i: int) -> list[str]:
    # "cat" on 200 images with 8 contexts on about a third each: cat(c0..c7) have > 25 images
    base = ["cat"] if i < 200 else ["dog"]
    return base + [f"c{j}" for j in range(8) if (i + j) % 3 == 0]


def jpeg(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i % 256, (7 * i) % 256, 40)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    import datasets

    root = tmp_path_factory.mktemp("tags")
    rows = [(f"im{i:03d}", t) for i in range(N) for t in tags_of(i)]
    csv = root / "tags.csv"
    csv.write_text("image_id,tag\n" + "".join(f"{a},{b}\n" for a, b in rows), encoding="utf-8")
    pq.write_table(pa.table({"image_id": [a for a, _ in rows], "tag": [b for _, b in rows]}), root / "tags.parquet")
    repo = root / "repo"
    (repo / "data").mkdir(parents=True)
    features = datasets.Features(
        {
            "image_id": datasets.Value("string"),
            "labels": datasets.Sequence(datasets.Value("string")),
            "image": datasets.Image(),
        }
    )
    ds = datasets.Dataset.from_dict(
        {
            "image_id": [f"im{i:03d}" for i in range(N)],
            "labels": [tags_of(i) for i in range(N)],
            "image": [{"bytes": jpeg(i), "path": None} for i in range(N)],
        },
        features=features,
    )
    ds.to_parquet(str(repo / "data" / "train-00000-of-00001.parquet"))
    return {"csv": csv, "parquet": root / "tags.parquet", "repo": repo}


def test_tags_and_hf_dataset_build_the_same_artifact(sources, tmp_path):
    a = build_from_inputs(tmp_path / "csv", given=TagsTable(sources["csv"]), plots=False)
    b = build_from_inputs(tmp_path / "pq", given=TagsTable(sources["parquet"]), plots=False)
    c = build_from_inputs(
        tmp_path / "hf",
        plots=False,
        given=HubMultiLabel(MultiLabelDataset(str(sources["repo"]), "labels", image_column="image")),
    )
    assert a.content_hash == b.content_hash == c.content_hash
    assert a.classes() == ["cat"] and len(a.subsets_of("cat")) == 8
    # co-occurrence: cat(c3) = images tagged cat and c3
    assert a.images("cat(c3)") == frozenset(
        f"im{i:03d}" for i in range(N) if "cat" in tags_of(i) and "c3" in tags_of(i)
    )
    assert c.manifest.inputs[0]["image_column"] == "image" and c.manifest.source == "custom"
    # the image column is found without --image-column when the dataset has exactly one
    d = build_from_inputs(
        tmp_path / "hf2", plots=False, given=HubMultiLabel(MultiLabelDataset(str(sources["repo"]), "labels"))
    )
    assert d.manifest.inputs[0]["image_column"] == "image" and d.content_hash == c.content_hash


def test_images_come_from_the_dataset_column(sources, tmp_path):
    art = build_from_inputs(
        tmp_path / "hf",
        plots=False,
        given=HubMultiLabel(MultiLabelDataset(str(sources["repo"]), "labels", image_column="image")),
    )
    task = prepare(TaskRef("class-cat", artifact=art), cache_dir=tmp_path / "cache")
    ds = task.dataset["train"] if "train" in task.dataset else next(iter(task.dataset.values()))
    ds = ds.cast_column("image", type(ds.features["image"])(decode=False))
    for row in ds.select(range(min(20, len(ds)))):
        assert row["image"]["bytes"] == jpeg(int(row["image_id"][2:]))


def test_export_of_a_dataset_artifact_needs_no_images(sources, tmp_path, capsys, monkeypatch):
    """Round 3 D13 (R3-15): the images of an --hf-dataset artifact are its image column; export found no
    --images and refused (or read the registered GQA images)."""
    art = build_from_inputs(
        tmp_path / "hf",
        plots=False,
        given=HubMultiLabel(MultiLabelDataset(str(sources["repo"]), "labels", image_column="image")),
    )
    monkeypatch.setenv("METASHIFT_HF_IMAGES", str(tmp_path / "registered-gqa-images"))  # never used for it
    out = tmp_path / "export"
    rc = main(["export", "class-cat", "--artifact", str(art.root), "--out", str(out), "--quiet", "--no-verify"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert list(out.rglob("*.parquet"))


def test_subject_tags_and_errors(sources, tmp_path, capsys):
    table = read_tags_file(sources["csv"])
    names = candidates_from_tags(table, subjects=["cat"]).names
    assert names and all(n.startswith("cat(") for n in names)
    with pytest.raises(InputFormatError, match="parentheses"):
        TagTable.from_columns(["1", "1"], ["cat", "sofa (red)"])
    bad = tmp_path / "bad.csv"
    bad.write_text("image,label\n1,cat\n")
    with pytest.raises(InputFormatError, match="missing column"):
        read_tags_file(bad)
    out = tmp_path / "o"
    assert (
        main(
            [
                "build",
                "--tags",
                str(sources["csv"]),
                "--out",
                str(out),
                "--no-plots",
                "--quiet",
                "--subject-tags",
                "cat",
            ]
        )
        == 0
    )
    assert "classes: 1" in capsys.readouterr().out
    assert main(["build", "--hf-dataset", str(sources["repo"]), "--out", str(tmp_path / "p")]) == 2
    assert "--tag-column" in capsys.readouterr().err
    assert (
        main(
            [
                "build",
                "--hf-dataset",
                str(sources["repo"]),
                "--tag-column",
                "labels",
                "--out",
                str(tmp_path / "q"),
                "--quiet",
                "--no-plots",
            ]
        )
        == 0
    )
    with pytest.raises(InputFormatError, match="multi-label sources only"):
        build_from_inputs(
            tmp_path / "r", given=SceneGraphs([sources["csv"]]), options=BuildOptions(subject_tags=("x",))
        )


def test_every_pair_of_tags_is_a_subset():
    t = TagTable.from_columns(["1", "1", "1", "2"], ["a", "b", "c", "a"])
    c = candidates_from_tags(t)
    assert c.names == [f"{s}({o})" for s, o in itertools.permutations("abc", 2)]
    assert all(c.images(n) == frozenset({"1"}) for n in c.names)


def test_evaluate_of_a_dataset_artifact_equals_its_export(sources, tmp_path, capsys, monkeypatch):
    """Issue 42: a task whose artifact reads its images from a dataset column was accepted by prepare, images()
    and export, but `evaluate --task class-cat --artifact ART` exited 2 ('the model needs the images, and --images
    was not given'): evaluate had its own row table and byte reader. It now reads the task through TaskData and
    gives what export + evaluate of the exported folder give, byte for byte."""
    art = build_from_inputs(
        tmp_path / "hf",
        plots=False,
        given=HubMultiLabel(MultiLabelDataset(str(sources["repo"]), "labels", image_column="image")),
    )
    monkeypatch.setenv("METASHIFT_HF_IMAGES", str(tmp_path / "registered-gqa-images"))  # never used for it
    quick = ["--model", "efficientnet-lite0", "--image-size", "64", "--quiet", "--no-progress"]
    rc = main(["evaluate", "--task", "class-cat", "--artifact", str(art.root), "--out", str(tmp_path / "a"), *quick])
    assert rc == 0, capsys.readouterr().err
    assert main(["export", "class-cat", "--artifact", str(art.root), "--out", str(tmp_path / "x"), "--quiet"]) == 0
    folder = tmp_path / "x" / "metashift-class-cat"
    assert main(["evaluate", "--task", str(folder), "--out", str(tmp_path / "f"), *quick]) == 0, capsys.readouterr()
    a, f = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("a", "f"))
    assert a["run"]["task_id"] == "class-cat" and a["overall"]["n"] == 200
    # only where the task came from differs (issue 43: every report records its task_origin)
    origins = a["run"].pop("task_origin"), f["run"].pop("task_origin")
    assert [o["kind"] for o in origins] == ["artifact", "folder"]
    assert a == f
    for name in ("per_group.csv", "predictions.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "f" / name).read_bytes(), name
    md = [
        [line for line in (tmp_path / d / "report.md").read_text().splitlines() if "task origin" not in line]
        for d in "af"
    ]
    assert md[0] == md[1]
