"""A build whose memory does not grow with the corpus (issue 28, part 1): no column overflows
Arrow's 2 GiB text limit, membership.parquet is streamed in row groups with the bytes of one write."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import pytest

from metashift_hf.builders import artifact as art
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core import fsutil
from fixtures.worlds import two_cluster_subsets


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
    art.write_membership(c, tmp_path / "new.parquet")
    assert (tmp_path / "new.parquet").read_bytes() == (tmp_path / "old.parquet").read_bytes()
    assert pq.read_table(tmp_path / "new.parquet").schema == art.MEMBERSHIP_SCHEMA


def test_membership_groups_close_on_text_size(monkeypatch):
    monkeypatch.setattr(art, "MEMBERSHIP_GROUP_BYTES", 11)
    groups = list(art.membership_groups(["a(b)", "a(c)"], ["1", "22", "x" * 30],
                                        [(np.array([0, 0, 1, 1]), np.array([0, 2, 0, 1]))]))
    # rows of 5, 35 (alone: over the limit by itself), 5 and 6 bytes; the limit is 11
    assert [g.num_rows for g in groups] == [1, 1, 2]
    assert pa.concat_tables(groups).to_pydict() == {"subset": ["a(b)", "a(b)", "a(c)", "a(c)"],
                                                    "image_id": ["1", "x" * 30, "1", "22"]}


@pytest.mark.slow
def test_build_past_the_2gib_text_column(tmp_path):
    """700 subsets of one image whose id is ~3 MB: the membership image_id column holds > 2**31
    bytes of text (the old writer, _old_membership_table, raises ArrowInvalid: offset overflow on
    it, at ~2 GB of memory, so it is not run here); the read-back is strings."""
    subjects, contexts = 100, 7
    length = -(-(2 ** 31 + 1) // (subjects * contexts))
    image = "a" * length
    names = [f"s{i:03d}(c{j})" for i in range(subjects) for j in range(contexts)]
    c = CandidateSubsets.from_codes(names, ["object"] * len(names), [None] * len(names), [image],
                                    np.arange(len(names), dtype=np.int64), np.zeros(len(names), dtype=np.int64))
    a = build_artifact(c, tmp_path / "art", BuildOptions(min_images_per_subset=1), plots=False)
    f = pq.ParquetFile(a.root / "membership.parquet")
    text = sum(pa.compute.sum(pa.compute.binary_length(f.read_row_group(g, columns=["image_id"]).column(0))).as_py()
               for g in range(f.metadata.num_row_groups))
    assert text > 2 ** 31 and f.metadata.num_rows == len(names)
    assert pq.read_schema(a.root / "membership.parquet") == art.MEMBERSHIP_SCHEMA
    first = f.read_row_group(0)
    assert first.schema == art.MEMBERSHIP_SCHEMA and first.column("image_id")[0].as_py() == image
    assert len(a.classes()) == subjects
