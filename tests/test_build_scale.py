"""A build whose memory does not grow with the corpus (issue 28, part 1): no column overflows
Arrow's 2 GiB text limit, membership.parquet is streamed in row groups with the bytes of one write."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from fixtures.worlds import paper_world, two_cluster_subsets
from metashift_hf.builders import artifact as art
from metashift_hf.builders import build, tag_store, tags
from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import BuildOptions, build_artifact, build_from_inputs
from metashift_hf.builders.build_inputs import TagsTable
from metashift_hf.builders.coco import read_coco_annotations
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.builders.tag_store import TagCandidates
from metashift_hf.builders.tags import TagTable, candidates_from_tags
from metashift_hf.core import fsutil
from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.core.options import MIN_BYTE_SIZE, OptionError, byte_size
from metashift_hf.sources.coco_world import write_coco_world


def _old_membership_table(candidates: CandidateSubsets) -> pa.Table:
    """The writer before issue 28 (the reference): one take over every row (overflows past 2 GiB)."""
    subset_col = pa.DictionaryArray.from_arrays(
        pa.array(np.repeat(np.arange(len(candidates), dtype=np.int32), candidates.sizes()), pa.int32()),
        pa.array(candidates.names, pa.string()),
    ).cast(pa.string())
    image_col = pa.array(candidates.image_ids, pa.string()).take(pa.array(candidates.indices, pa.int64()))
    return pa.table({"subset": subset_col, "image_id": image_col}, schema=art.MEMBERSHIP_SCHEMA)


@pytest.mark.parametrize("row_group, block", [(1 << 20, 1 << 16), (7, 3), (5, 64)])
def test_streamed_membership_has_the_bytes_of_one_write(tmp_path, monkeypatch, row_group, block):
    monkeypatch.setattr(fsutil, "PARQUET_ROW_GROUP", row_group)
    monkeypatch.setattr(art, "PARQUET_ROW_GROUP", row_group)
    monkeypatch.setattr(art, "_MEMBERSHIP_BLOCK", block)
    c = CandidateSubsets.from_dict(two_cluster_subsets(seed=3, contexts=4))
    fsutil.write_parquet(_old_membership_table(c), tmp_path / "old.parquet")
    art.write_membership(tmp_path / "new.parquet", c.names, c.image_ids, art.candidate_codes(c))
    assert (tmp_path / "new.parquet").read_bytes() == (tmp_path / "old.parquet").read_bytes()
    assert pq.read_table(tmp_path / "new.parquet").schema == art.MEMBERSHIP_SCHEMA


def test_membership_groups_close_on_text_size(monkeypatch):
    monkeypatch.setattr(art, "MEMBERSHIP_GROUP_BYTES", 11)
    groups = list(
        art.membership_groups(
            ["a(b)", "a(c)"], ["1", "22", "x" * 30], [(np.array([0, 0, 1, 1]), np.array([0, 2, 0, 1]))]
        )
    )
    # rows of 5, 35 (alone: over the limit by itself), 5 and 6 bytes; the limit is 11
    assert [g.num_rows for g in groups] == [1, 1, 2]
    assert pa.concat_tables(groups).to_pydict() == {
        "subset": ["a(b)", "a(b)", "a(c)", "a(c)"],
        "image_id": ["1", "x" * 30, "1", "22"],
    }


@pytest.mark.slow
def test_build_past_the_2gib_text_column(tmp_path):
    """700 subsets of one image whose id is ~3 MB: the membership image_id column holds > 2**31
    bytes of text (the old writer, _old_membership_table, raises ArrowInvalid: offset overflow on
    it, at ~2 GB of memory, so it is not run here); the read-back is strings."""
    subjects, contexts = 100, 7
    length = -(-(2**31 + 1) // (subjects * contexts))
    image = "a" * length
    names = [f"s{i:03d}(c{j})" for i in range(subjects) for j in range(contexts)]
    c = CandidateSubsets.from_codes(
        names,
        ["object"] * len(names),
        [None] * len(names),
        [image],
        np.arange(len(names), dtype=np.int64),
        np.zeros(len(names), dtype=np.int64),
    )
    a = build_artifact(c, tmp_path / "art", BuildOptions(min_images_per_subset=1), plots=False)
    f = pq.ParquetFile(a.root / "membership.parquet")
    text = sum(
        pa.compute.sum(pa.compute.binary_length(f.read_row_group(g, columns=["image_id"]).column(0))).as_py()
        for g in range(f.metadata.num_row_groups)
    )
    assert text > 2**31 and f.metadata.num_rows == len(names)
    assert pq.read_schema(a.root / "membership.parquet") == art.MEMBERSHIP_SCHEMA
    first = f.read_row_group(0)
    assert first.schema == art.MEMBERSHIP_SCHEMA and first.column("image_id")[0].as_py() == image
    assert len(a.classes()) == subjects


# ------------------------------------------------------------------------------------------------
# out of core (DuckDB) == in memory (candidates_from_tags, the reference), table for table
# ------------------------------------------------------------------------------------------------
ARTIFACT_FILES = (
    "subsets.parquet",
    "membership.parquet",
    "classes.parquet",
    "edges.parquet",
    "embeddings.parquet",
    "distances.parquet",
    "stats.json",
)


def _zipf_table() -> TagTable:
    """Names whose byte order differs from (subject, context) order, non-ASCII, Zipf-like tag frequencies."""
    rng = np.random.default_rng(11)
    vocab = ["cat", "cat food", "Cat", "e", "é", "ö-x", "z z"] + [f"t{i:02d}" for i in range(40)]
    p = 1.0 / np.arange(1, len(vocab) + 1)
    img, tag = [], []
    for i in range(2500):
        for t in rng.choice(len(vocab), size=rng.integers(1, 9), replace=False, p=p / p.sum()).tolist():
            img.append(f"img{i:05d}")
            tag.append(vocab[t])
    return TagTable.from_columns(img, tag)


def _tag_worlds(tmp_path_factory) -> dict[str, tuple[TagTable, dict, BuildOptions]]:
    worlds = {}
    coco = read_coco_annotations(
        sorted(
            (write_coco_world(tmp_path_factory.mktemp("coco") / "w", seed=3, images=False) / "annotations").glob(
                "instances_*.json"
            )
        )
    ).tags
    worlds["coco"] = (coco, {}, BuildOptions())
    worlds["coco-animals-louvain"] = (
        coco,
        {"subject_categories": ["animal"]},
        BuildOptions(community_method="louvain", seed=5, subject_categories=("animal",)),
    )
    paper = paper_world(n_per_class=1500, seed=1)
    img, tag = [], []
    for name, ids in paper.items():
        subject, context = name[:-1].split("(")
        for i in sorted(ids):
            img += [i, i]
            tag += [subject, context]
    worlds["paper"] = (
        TagTable.from_columns(img, tag),
        {"subjects": ["cat", "dog"]},
        BuildOptions(subject_tags=("cat", "dog")),
    )
    worlds["zipf"] = (_zipf_table(), {}, BuildOptions(min_images_per_subset=10))
    return worlds


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory):
    out = {}
    for name, (table, subject_kw, options) in _tag_worlds(tmp_path_factory).items():
        root = tmp_path_factory.mktemp(name)
        old = build_artifact(candidates_from_tags(table, **subject_kw), root / "memory", options, plots=False)
        # the smallest memory limit DuckDB is given: its spill path is exercised on these small worlds too
        new = build_artifact(
            TagCandidates(table, memory_limit=MIN_BYTE_SIZE, **subject_kw), root / "duckdb", options, plots=False
        )
        out[name] = (old, new)
    return out


@pytest.mark.parametrize("world", ["coco", "coco-animals-louvain", "paper", "zipf"])
def test_out_of_core_build_is_byte_identical_to_the_in_memory_build(both_ways, world):
    old, new = both_ways[world]
    assert old.classes() and old.classes() == new.classes()
    for f in ARTIFACT_FILES:
        assert (new.root / f).read_bytes() == (old.root / f).read_bytes(), f
    assert new.content_hash == old.content_hash
    assert not any(p.name.startswith(".spill") for p in new.root.rglob("*"))


def test_out_of_core_build_removes_its_spill_folder_on_error(tmp_path):
    table = TagTable.from_columns(["1", "1", "2"], ["a", "b", "a"])
    with pytest.raises(EmptyResultError, match="no class passes the rules"):
        build_artifact(TagCandidates(table), tmp_path / "art", BuildOptions())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, expected", [("2GiB", 2 * 2**30), ("1.5GB", 1_500_000_000), ("512 MiB", 2**29)])
def test_memory_limit_sizes(text, expected):
    assert byte_size(text, "memory_limit") == expected


@pytest.mark.parametrize("bad", ["1MB", "lots", "-2GB", "nan", 1.5, True, 0])
def test_memory_limit_refused_before_any_work(bad, tmp_path):
    with pytest.raises(OptionError, match="memory_limit"):
        build_from_inputs(tmp_path / "art", given=TagsTable(tmp_path / "missing.csv"), memory_limit=bad)
    with pytest.raises(OptionError, match="memory_limit"):
        TagCandidates(TagTable.from_columns(["1"], ["a"]), memory_limit=bad)


# ------------------------------------------------------------------------------------------------
# meta-graphs in a process pool; a cap on subsets (contexts) per class
# ------------------------------------------------------------------------------------------------
def test_two_workers_build_the_tables_of_one(both_ways, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "POOL_MIN_CLASSES", 2)
    one = both_ways["zipf"][1]
    two = build_artifact(
        TagCandidates(_zipf_table(), memory_limit=MIN_BYTE_SIZE, threads=2),
        tmp_path / "two",
        BuildOptions(min_images_per_subset=10),
        plots=False,
        workers=2,
    )
    assert len(one.classes()) > 4  # more classes than the pool holds at once
    for f in ARTIFACT_FILES:
        assert (two.root / f).read_bytes() == (one.root / f).read_bytes(), f


@pytest.mark.slow
def test_workers_draw_the_pictures(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "POOL_MIN_CLASSES", 2)
    pytest.importorskip("matplotlib")
    a = build_artifact(
        CandidateSubsets.from_dict(two_cluster_subsets(seed=1, contexts=3)), tmp_path / "a", plots=True, workers=2
    )
    assert sorted(p.name for p in (a.root / "plots").iterdir()) == ["cat.png", "dog.png"]


def test_cap_keeps_the_largest_subsets_of_a_class_ties_by_name(tmp_path):
    # cat: 9 subsets of sizes 40, 39, ..., 35, 34, 34, 34; a cap of 7 keeps the 6 largest and c6 of the tie at 34
    sizes = [40, 39, 38, 37, 36, 35, 34, 34, 34]
    d = {f"cat(c{j})": [f"i{k}" for k in range(n)] for j, n in reversed(list(enumerate(sizes)))}
    d.update({f"dog(d{j})": [f"j{k}" for k in range(26)] for j in range(6)})
    c = CandidateSubsets.from_dict(d)
    capped = build_artifact(c, tmp_path / "a", BuildOptions(max_subsets_per_class=7), plots=False)
    assert capped.subsets_of("cat") == [f"cat(c{j})" for j in range(7)]
    assert len(capped.subsets_of("dog")) == 6
    t = capped.subsets_table().set_index("subset")
    assert not t.loc["cat(c8)", "kept"] and t.loc["cat(c8)", "community"] == -1
    assert (
        build_artifact(c, tmp_path / "b", BuildOptions(max_subsets_per_class=0), plots=False).subsets_of("cat")
        == sorted(d)[:9]
    )


def test_cap_is_the_same_out_of_core(tmp_path):
    table = _zipf_table()
    options = BuildOptions(min_images_per_subset=10, max_subsets_per_class=8)
    old = build_artifact(candidates_from_tags(table), tmp_path / "memory", options, plots=False)
    new = build_artifact(TagCandidates(table, memory_limit=MIN_BYTE_SIZE), tmp_path / "duckdb", options, plots=False)
    assert max(len(old.subsets_of(s)) for s in old.classes()) == 8
    for f in ARTIFACT_FILES:
        assert (new.root / f).read_bytes() == (old.root / f).read_bytes(), f


def test_cap_must_leave_a_class_possible():
    with pytest.raises(InputFormatError, match="max_subsets_per_class"):
        BuildOptions(max_subsets_per_class=5).validate()


def test_artifact_built_before_the_cap_reads_as_uncapped(tmp_path):
    a = build_artifact(
        CandidateSubsets.from_dict(two_cluster_subsets(seed=1, contexts=3)), tmp_path / "a", plots=False
    )
    assert a.options.max_subsets_per_class == 2000
    m = json.loads((a.root / "manifest.json").read_text())
    del m["options"]["max_subsets_per_class"]
    (a.root / "manifest.json").write_text(json.dumps(m))
    assert Artifact.load(a.root).options.max_subsets_per_class == 0


# ------------------------------------------------------------------------------------------------
# a tags file read straight into DuckDB (batch by batch) == the whole-table reader in memory
# ------------------------------------------------------------------------------------------------
def _whole_table_reference(path, *, csv: bool) -> TagTable:
    """The reader before the streamed one (the reference): the whole file as one Arrow table."""
    t = (
        pcsv.read_csv(
            path,
            convert_options=pcsv.ConvertOptions(
                column_types={"image_id": pa.string(), "tag": pa.string(), "category": pa.string()}
            ),
        )
        if csv
        else pq.read_table(path)
    )
    cats = (
        dict(zip(t.column("tag").to_pylist(), t.column("category").to_pylist()))
        if "category" in t.column_names
        else None
    )
    return TagTable.from_columns(
        t.column("image_id").combine_chunks(), t.column("tag").combine_chunks(), cats, what=str(path)
    )


def _tags_frame(seed: int = 4) -> pa.Table:
    """Ids and tags whose byte order is not their insertion order, untrimmed and repeated rows, a
    category column whose last row per tag wins (also an untrimmed tag's own category)."""
    rng = np.random.default_rng(seed)
    vocab = ["cat", " cat", "cat food", "Cat", "é", "ö-x", "z z "] + [f"t{i:02d}" for i in range(30)]
    p = 1.0 / np.arange(1, len(vocab) + 1)
    img, tag, cat = [], [], []
    for i in rng.permutation(1800).tolist():
        for t in rng.choice(len(vocab), size=rng.integers(1, 8), p=p / p.sum()).tolist():  # repeats included
            img.append(f"{'é' if i % 7 == 0 else ''}im{i}")
            tag.append(vocab[t])
            cat.append(None if t % 5 == 0 else f"k{(t + i) % 3}")
    return pa.table({"image_id": img, "tag": tag, "category": cat})


@pytest.mark.parametrize("fmt", ["parquet", "csv", "parquet-int-ids"])
def test_tags_file_streamed_into_duckdb_builds_the_artifact_of_the_whole_table_reader(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(tags, "_FILE_BATCH_ROWS", 1000)  # many batches
    monkeypatch.setattr(tag_store, "_BATCH_ROWS", 500)  # membership read in many ranges
    frame = _tags_frame()
    if fmt == "parquet-int-ids":
        # integer ids (cast to text by the reader): 10 < 9 in byte order
        frame = frame.set_column(
            0,
            "image_id",
            pa.array([int(x.replace("é", "").removeprefix("im")) for x in frame.column("image_id").to_pylist()]),
        )
    path = tmp_path / ("tags.csv" if fmt == "csv" else "tags.parquet")
    if fmt == "csv":
        pcsv.write_csv(frame, path)
    else:
        pq.write_table(frame, path, row_group_size=700)
    options = BuildOptions(min_images_per_subset=10, subject_categories=("k1",))
    old = build_artifact(
        candidates_from_tags(_whole_table_reference(path, csv=fmt == "csv"), subject_categories=["k1"]),
        tmp_path / "old",
        options,
        plots=False,
    )
    new = build_from_inputs(
        tmp_path / "new", given=TagsTable(path), options=options, plots=False, memory_limit=MIN_BYTE_SIZE
    )
    assert len(old.classes()) > 3
    assert old.subsets_table()["category"].notna().any()
    for f in ARTIFACT_FILES:
        assert (new.root / f).read_bytes() == (old.root / f).read_bytes(), f
    assert new.content_hash == old.content_hash


@pytest.mark.parametrize(
    "rows, message",
    [
        ({"image_id": ["1", None, "2", "3"], "tag": ["a(b)", "a", None, " "]}, r"\(1 / 1 rows\)"),
        ({"image_id": ["1", "1", "2", "2"], "tag": ["a", "b(c)", " ", "x(y)"]}, "some tags are empty"),
        ({"image_id": ["1", "1", "2", "2"], "tag": ["a", "b", "c", "x(y)"]}, "'x\\(y\\)' contains parentheses"),
        ({"image_id": ["1", "2"], "tag": ["a", "b\x1b[2J"]}, "control character"),
    ],
)
def test_tags_file_errors_are_the_whole_table_readers_across_batches(tmp_path, monkeypatch, rows, message):
    monkeypatch.setattr(tags, "_FILE_BATCH_ROWS", 1)  # each problem in its own batch
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(rows), path)
    with pytest.raises(InputFormatError, match=message) as old:
        _whole_table_reference(path, csv=False)
    with pytest.raises(InputFormatError, match=message) as new:
        build_from_inputs(tmp_path / "art", given=TagsTable(path), plots=False)
    assert str(new.value) == str(old.value)
    assert not (tmp_path / "art").exists()


def test_subsets_table_streamed_in_pieces_has_the_bytes_of_one_write(tmp_path, monkeypatch):
    monkeypatch.setattr(fsutil, "PARQUET_ROW_GROUP", 64)  # several row groups ...
    monkeypatch.setattr(tag_store, "_BATCH_ROWS", 50)  # ... from pieces that do not align with them
    a = build_artifact(
        TagCandidates(_zipf_table(), memory_limit=MIN_BYTE_SIZE),
        tmp_path / "a",
        BuildOptions(min_images_per_subset=10),
        plots=False,
    )
    whole = pq.read_table(a.root / "subsets.parquet")
    assert whole.num_rows > 3 * 64 and pq.ParquetFile(a.root / "subsets.parquet").metadata.num_row_groups > 3
    fsutil.write_parquet(whole, tmp_path / "one.parquet")
    assert (a.root / "subsets.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()


def test_membership_bytes_do_not_depend_on_how_the_codes_arrive_in_blocks(tmp_path):
    """A row group holds several data pages here (~6 MB of ids): the old writer's pages followed
    the blocks' chunks, so the same rows read in other ranges gave other bytes."""
    rng = np.random.default_rng(0)
    n_img = 200_000
    codes = np.unique(rng.integers(0, 40 * n_img, 400_000))
    sub, img = codes // n_img, codes % n_img
    names = [f"s{i:02d}(c)" for i in range(40)]
    ids = sorted(f"{x:016x}" for x in rng.integers(0, 2**63, n_img).tolist())
    art.write_membership(tmp_path / "one.parquet", names, ids, [(sub, img)])
    cuts = np.sort(rng.choice(codes.size, 7, replace=False))
    blocks = list(zip(np.split(sub, cuts), np.split(img, cuts)))
    art.write_membership(tmp_path / "blocks.parquet", names, ids, blocks)
    assert (tmp_path / "blocks.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()


@pytest.mark.slow  # ~15 s: 400k images through the out-of-core build
def test_image_counts_run_under_the_memory_limit_not_the_read_back_limit(tmp_path, monkeypatch):
    """The distinct-image counts hash every image: under the 256 MiB read-back limit they failed at 9M images
    (DuckDB out of memory after 24 CPU minutes). Scaled down: a 16 MiB read-back limit and 400k images."""
    monkeypatch.setattr(tag_store, "READ_MEMORY_LIMIT", 16 << 20)
    # the range reads scaled with the limit: 1M-row batches at 16 MiB sat at the edge (one OOM in ~5 loaded runs)
    monkeypatch.setattr(tag_store, "_BATCH_ROWS", 1 << 18)
    rng = np.random.default_rng(0)
    n, per = 400_000, 4
    ids = np.repeat(np.char.add("im", np.arange(n).astype(str)), per)
    picks = np.argsort(rng.random((n, 20)), axis=1)[:, :per].ravel()  # 4 distinct tags of 20 per image
    pq.write_table(pa.table({"image_id": ids, "tag": np.char.add("t", picks.astype(str))}), tmp_path / "t.parquet")
    out = build_from_inputs(
        tmp_path / "art",
        given=TagsTable(tmp_path / "t.parquet"),
        plots=False,
        options=BuildOptions(min_images_per_subset=10),
    )
    stats = json.loads((out.root / "stats.json").read_text())
    assert stats["candidate_images"] == n, stats
