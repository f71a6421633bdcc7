"""Export: parquet shards with embedded original JPEG bytes that datasets.load_dataset reads back."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import metashift_hf
from fixtures.tasks import build_tiny_artifact, make_prepared, sample_jpegs
from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.hub import shards
from metashift_hf.hub.export import export_prepared, export_tasks, verify_export
from metashift_hf.hub.shards import write_config
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.tasks.spec import ShiftSpec


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return build_tiny_artifact(tmp_path_factory.mktemp("art") / "artifact")


@pytest.fixture
def images(tmp_path):
    return sample_jpegs(tmp_path / "images")


def _sha(p: Path) -> str:
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()


def test_layout_and_load_back_after_images_are_deleted(art, images, tmp_path):
    originals = {p.stem: _sha(p) for p in images}
    task = make_prepared("paper-dg-cat-dog-1", images)
    repos = export_prepared([task], TaskOrigin(artifact=art), tmp_path / "out")
    assert [r.name for r in repos] == ["metashift-paper-dg-cat-dog-1", "metashift"]
    repo = repos[0]
    # the task's own pictures (cards.pictures) where matplotlib is installed; tests/test_cards.py checks them
    pictures = (
        (
            "images/paper-dg-cat-dog-1-cat-groups.png",
            "images/paper-dg-cat-dog-1-dog-groups.png",
            "images/paper-dg-cat-dog-1-examples.png",
        )
        if importlib.util.find_spec("matplotlib")
        else ()
    )
    assert repo.files == (
        "README.md",
        *pictures,
        "paper-dg-cat-dog-1/meta_graph.parquet",
        "paper-dg-cat-dog-1/meta_graph_distances.parquet",
        "paper-dg-cat-dog-1/shift_spec.json",
        "paper-dg-cat-dog-1/test-00000-of-00001.parquet",
        "paper-dg-cat-dog-1/train-00000-of-00001.parquet",
    )
    published = ShiftSpec.from_json((repo.path / "paper-dg-cat-dog-1/shift_spec.json").read_text())
    assert published.unpublished() == task.spec  # the task's spec, plus its facts' digests
    assert metashift_hf.shift_spec(repo.path) == published and set(published.facts_sha256) == {
        "meta_graph.parquet",
        "meta_graph_distances.parquet",
    }
    assert repos[1].files == ("README.md",) and repos[1].configs == ()
    shutil.rmtree(tmp_path / "images")  # embedded bytes must not need the source files any more
    result = verify_export(repo.path, "paper-dg-cat-dog-1")
    assert result.splits == {"train": 10, "test": 5} and result.streaming_rows == 10

    import datasets

    loaded = datasets.load_dataset(str(repo.path), "paper-dg-cat-dog-1")
    raw = loaded["test"].cast_column("image", datasets.Image(decode=False))
    for row in raw:
        assert hashlib.sha256(row["image"]["bytes"]).hexdigest() == originals[row["image_id"]]  # never re-encoded
    assert loaded["train"].features["label"].names == ["cat", "dog"]
    assert loaded["train"].features["group_id"] == task.dataset["train"].features["group_id"]  # a ClassLabel again
    names = loaded["train"].features["group_id"].names
    assert all(names[r["group_id"]] == r["group"] for r in loaded["test"].remove_columns("image"))
    assert loaded["train"][0]["image"].size[0] > 0  # decodes as an image
    assert repo.load_line() == f'load_dataset("{repo.path}", "paper-dg-cat-dog-1")'
    assert repo.load_line(namespace="ns") == 'load_dataset("ns/metashift-paper-dg-cat-dog-1", "paper-dg-cat-dog-1")'


def test_verify_against_the_prepared_task_and_detects_tampering(art, images, tmp_path):
    task = make_prepared("paper-dg-cat-dog-1", images)
    repo = export_prepared([task], TaskOrigin(artifact=art), tmp_path / "out")[0]
    assert verify_export(repo.path, "paper-dg-cat-dog-1", task.dataset, streaming=False).splits["train"] == 10
    shard = repo.path / "paper-dg-cat-dog-1" / "train-00000-of-00001.parquet"
    table = pq.read_table(shard)
    labels = table.column("label").to_pylist()
    import pyarrow as pa

    table = table.set_column(
        table.schema.get_field_index("label"),
        table.schema.field("label"),
        pa.array([1 - y for y in labels], table.schema.field("label").type),
    )
    pq.write_table(table, shard)
    with pytest.raises(MetashiftError, match="label"):
        verify_export(repo.path, "paper-dg-cat-dog-1", task.dataset, streaming=False)


def test_deterministic_bytes(art, images, tmp_path):
    task = make_prepared("paper-dg-cat-dog-1", images)
    a = export_prepared([task], TaskOrigin(artifact=art), tmp_path / "a")
    b = export_prepared(
        [task],
        TaskOrigin(artifact=art),
        tmp_path / "b",
    )
    for ra, rb in zip(a, b):
        assert ra.files == rb.files
        for f in ra.files:
            if f != "README.md":  # README names the local folder in its load line
                assert _sha(ra.path / f) == _sha(rb.path / f), f
    c = export_prepared([task], TaskOrigin(artifact=art), tmp_path / "c", namespace="ns")
    d = export_prepared([task], TaskOrigin(artifact=art), tmp_path / "d", namespace="ns")
    for rc, rd in zip(c, d):  # naming the Hub repo, the README is byte-identical too
        assert {f: _sha(rc.path / f) for f in rc.files} == {f: _sha(rd.path / f) for f in rd.files}
    again = export_prepared(
        [task], TaskOrigin(artifact=art), tmp_path / "a", force=True
    )  # re-export replaces in place, same bytes
    assert {f: _sha(again[0].path / f) for f in again[0].files} == {f: _sha(a[0].path / f) for f in a[0].files}


def test_shards_named_and_ordered(art, images, tmp_path):
    task = make_prepared("paper-dg-cat-dog-1", images)
    train_bytes = sum(Path(p).stat().st_size for p in images[: len(images) * 2 // 3])  # the first 2/3 train
    cfg = write_config(task.dataset, tmp_path / "repo", "cfg", max_shard_bytes=train_bytes // 3, row_group_rows=2)
    train = next(s for s in cfg.splits if s.name == "train")
    n = len(train.files)
    assert n > 1 and train.files == tuple(f"cfg/train-{i:05d}-of-{n:05d}.parquet" for i in range(n))
    ids = [i for f in train.files for i in pq.read_table(tmp_path / "repo" / f).column("image_id").to_pylist()]
    assert ids == sorted(task.dataset["train"]["image_id"])  # export order: by image id (dedup across tasks)
    assert pq.ParquetFile(tmp_path / "repo" / train.files[0]).metadata.row_group(0).num_rows == 2
    assert not list((tmp_path / "repo" / "cfg").glob(".*"))  # no temporary part left behind
    meta = pq.read_schema(tmp_path / "repo" / train.files[0]).metadata
    assert b"huggingface" in meta  # features (ClassLabel names) travel with the shards


def test_one_repo_layout(art, images, tmp_path):
    import datasets

    tasks = [
        make_prepared("paper-dg-cat-dog-1", images),
        make_prepared("paper-subpop-cat-dog-p12", images, shift_type="conditional"),
    ]
    repos = export_prepared(tasks, TaskOrigin(artifact=art), tmp_path / "out", layout="one-repo")
    assert len(repos) == 1 and repos[0].name == "metashift"
    assert repos[0].configs == ("paper-dg-cat-dog-1", "paper-subpop-cat-dog-p12")
    for cfg in repos[0].configs:
        assert datasets.load_dataset(str(repos[0].path), cfg)["test"].num_rows == 5
    assert datasets.load_dataset(str(repos[0].path))["train"].num_rows == 10  # the default config


def test_bad_names_are_refused_before_writing(art, images, tmp_path):
    with pytest.raises(InputFormatError, match="split name 'id-test'"):
        export_prepared(
            [make_prepared("t1", images, test_split="id-test")], TaskOrigin(artifact=art), tmp_path / "out"
        )
    with pytest.raises(InputFormatError, match="config name 'bad name'"):
        export_prepared([make_prepared("bad name", images)], TaskOrigin(artifact=art), tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with pytest.raises(UnknownNameError, match="layout"):
        export_prepared([make_prepared("t1", images)], TaskOrigin(artifact=art), tmp_path / "out", layout="many")
    with pytest.raises(MetashiftError, match="named twice"):
        export_prepared([make_prepared("t1", images)] * 2, TaskOrigin(artifact=art), tmp_path / "out")
    with pytest.raises(InputFormatError, match="namespace"):
        export_prepared([make_prepared("t1", images)], TaskOrigin(artifact=art), tmp_path / "out", namespace="bad--ns")


def test_verify_needs_an_exported_repo(tmp_path):
    with pytest.raises(InputFormatError, match="not an exported repo"):
        verify_export(tmp_path, "cfg")


@pytest.fixture(scope="module")
def demo(demo_build, tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    world, art = demo_build
    return root, world, art


@pytest.mark.slow
def test_export_tasks_end_to_end_from_the_demo_world(demo):
    import datasets

    from metashift_hf.hub.api import prepare

    root, world, art = demo
    cache = root / "hf-cache"
    tasks = ["paper-dg-cat-dog-1", "paper-subpop-cat-dog-p12", "class-cat"]
    origin = TaskOrigin(
        artifact=art.root, images=world.images_dir, options={"scale": 0.5}, task_options={"class-cat": {}}
    )
    repos = export_tasks(tasks, origin, root / "out", cache_dir=cache)
    assert [r.name for r in repos] == [f"metashift-{t}" for t in tasks] + ["metashift"]
    for repo, task in zip(repos, tasks):
        expected = prepare(origin.ref(task), cache_dir=cache)
        result = verify_export(repo.path, task, expected.dataset)
        assert result.splits == {s: len(d) for s, d in expected.dataset.items()}
        # every exported config's shift_spec.json parses with the public call and round-trips equal
        spec_file = repo.path / task / "shift_spec.json"
        spec = metashift_hf.shift_spec(spec_file)
        assert spec == ShiftSpec.from_json(spec.to_json()) and spec_file.read_text() == spec.to_json()
        assert spec.unpublished() == expected.spec  # export adds the facts' digests
        assert metashift_hf.shift_spec(repo.path) == metashift_hf.shift_spec(TaskRef(repo.path, config=task)) == spec
        assert metashift_hf.shift_spec(expected) == metashift_hf.shift_spec(expected.dataset) == expected.spec
        assert metashift_hf.shift_spec(origin.ref(task)) == expected.spec
        loaded = datasets.load_dataset(str(repo.path), task, cache_dir=str(root / "load-cache"))
        assert metashift_hf.shift_spec(loaded) == metashift_hf.shift_spec(loaded["train"]) == spec
        for s, d in loaded.items():  # group_id comes back a ClassLabel over the task's groups
            assert d.features["group_id"] == expected.dataset[s].features["group_id"]
            key = lambda x: sorted(zip(x["image_id"], x["group_id"], x["context"], x["community"]))  # noqa: E731
            assert key(d) == key(expected.dataset[s])
    dg = (repos[0].path / "README.md").read_text()
    assert "images/cat.png" in dg and (repos[0].path / "images" / "dog.png").is_file()
    assert "Distance d: paper 0.440" in dg and "**Domain generalisation**" in dg
    assert "Synthetic data, not MetaShift" in dg and "(artifact `source: demo`)" in dg
    assert "--seed 0 --set scale=0.5 --out DIR`" in dg and "Sizes were scaled by 0.5" in dg
    sub = (repos[1].path / "README.md").read_text()
    assert "**Subpopulation shift**" in sub and "Minority groups make up p =" in sub
    index = (repos[-1].path / "README.md").read_text()
    assert all(f'load_dataset("{root / "out" / f"metashift-{t}"}", "{t}")' in index for t in tasks)


@pytest.mark.slow
def test_cli_export_prints_the_load_lines(demo, capsys):
    from metashift_hf.cli import main

    root, world, art = demo
    out = root / "cli-out"
    code = main(
        [
            "export",
            "paper-dg-cat-dog-1",
            "class-cat",
            "--artifact",
            str(art.root),
            "--images",
            str(world.images_dir),
            "--out",
            str(out),
            "--set",
            "scale=0.5",
            "--set",
            "class-cat:scale=null",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert f'load_dataset("{out / "metashift-paper-dg-cat-dog-1"}", "paper-dg-cat-dog-1")' in printed
    assert f'load_dataset("{out / "metashift-class-cat"}", "class-cat")' in printed
    assert (out / "metashift" / "README.md").is_file()


def test_cli_errors(capsys, tmp_path):
    from metashift_hf.cli import main
    from metashift_hf.commands.task_args import parse_overrides

    assert main(["export", "paper-dg-cat-dog-1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "error: --artifact and --images not given" in err and "fix:" in err
    assert main(["export", "--artifact", "a", "--images", "b", "--out", str(tmp_path)]) == 2
    assert "error: no task named" in capsys.readouterr().err
    assert (
        main(["export", "t1", "--artifact", "a", "--images", "b", "--out", str(tmp_path), "--set", "t2:scale=1"]) == 2
    )
    assert "names task 't2', which is not being exported" in capsys.readouterr().err
    assert parse_overrides(["scale=0.5", "class-cat:scale=null", "b:mode=x"], ["class-cat", "b"]) == (
        {"scale": 0.5},
        {"class-cat": {}, "b": {"scale": 0.5, "mode": "x"}},
    )
    with pytest.raises(MetashiftError, match="not KEY=VALUE"):
        parse_overrides(["scale"], [])


def test_images_given_as_paths_are_embedded_like_carried_bytes(tmp_path, monkeypatch):
    """The writer skips datasets' embedding pass when every image already carries its bytes and a
    bare file name (what the builder writes); rows with only a path are still embedded, and both
    give the same parquet bytes."""
    import datasets

    folder = tmp_path / "imgs"
    folder.mkdir()
    blobs = {f"{i}": b"\xff\xd8\xff" + bytes([i]) * (100 + i) + b"\xff\xd9" for i in range(5)}
    for i, b in blobs.items():
        (folder / f"{i}.jpg").write_bytes(b)
    feats = datasets.Features({"image": datasets.Image(), "image_id": datasets.Value("string")})
    ids = sorted(blobs)
    by_path = datasets.Dataset.from_dict(
        {"image": [str(folder / f"{i}.jpg") for i in ids], "image_id": ids}, features=feats
    )
    by_bytes = datasets.Dataset.from_dict(
        {"image": [{"bytes": blobs[i], "path": f"{i}.jpg"} for i in ids], "image_id": ids}, features=feats
    )
    assert by_path.with_format("arrow")[:]["image"].combine_chunks().field("bytes").null_count == len(ids)
    embedded = []
    monkeypatch.setattr(
        shards, "embed_table_storage", lambda t, _real=shards.embed_table_storage: embedded.append(len(t)) or _real(t)
    )
    outs = []
    for n, ds in enumerate((by_path, by_bytes)):
        cfg = write_config(datasets.DatasetDict({"train": ds}), tmp_path / f"r{n}", "t")
        outs.append(tmp_path / f"r{n}" / cfg.splits[0].files[0])
    assert embedded == [len(ids)]  # the path-only rows went through datasets' embedding, the others not
    rows = pq.read_table(outs[0]).to_pylist()
    assert [r["image"] for r in rows] == [{"bytes": blobs[i], "path": f"{i}.jpg"} for i in ids]
    assert _sha(outs[0]) == _sha(outs[1])


@pytest.mark.parametrize(
    "name,ok",
    [
        ("metashift-paper-dg-cat-dog-1", True),
        ("my_org.v2", True),
        ("a" * 96, True),
        ("bad--ns", False),
        ("a..b", False),
        ("x.git", False),
        ("-x", False),
        ("a" * 97, False),
        ("café", False),
        ("ns/repo", False),
        ("", False),
    ],
)
def test_repo_names_checked_by_huggingface_hub(name, ok):
    """validate_repo_name is huggingface_hub's validate_repo_id on one part, with our message."""
    if ok:
        assert shards.validate_repo_name(name) == name
    else:
        with pytest.raises(InputFormatError, match="would be refused by the Hub") as err:
            shards.validate_repo_name(name, "namespace")
        assert "letters, digits" in err.value.fix


def test_tasks_from_an_export_are_refused_by_export_and_publish_before_any_write(tmp_path):
    from metashift_hf.hub.publish import PushOptions, publish_tasks

    origin = TaskOrigin(source=tmp_path / "exported")
    with pytest.raises(InputFormatError, match="export plans tasks on a build.*exported already") as err:
        export_tasks(["class-cat"], origin, tmp_path / "out")
    assert "--from-export" in err.value.fix
    with pytest.raises(InputFormatError, match="publish plans tasks on a build.*exported already"):
        publish_tasks(["class-cat"], origin, "ns", tmp_path / "out", push=PushOptions(dry_run=True))
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputFormatError, match="either a build .* and here neither is given"):
        TaskOrigin()
