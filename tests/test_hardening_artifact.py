"""Hardening, the artifact: tables from two builds are never mixed (per-table sha256 in manifest.json,
checked when a table is read), and a truncated, garbage or foreign-schema table is a one-line error."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hardening_inputs import assert_one_line_error, run_cli, small_subsets

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.errors import InputFormatError


def _build(out, rename: str = ""):
    subsets = {k: sorted(f"{rename}{i}" for i in v) for k, v in small_subsets().items()}
    return build_artifact(CandidateSubsets.from_dict(subsets), out, BuildOptions(), plots=False)


def test_membership_from_another_build_is_refused(tmp_path):
    a = _build(tmp_path / "a")
    b = _build(tmp_path / "b", rename="other-")  # same subsets and row counts, other image ids
    assert (
        pq.read_metadata(a.root / "membership.parquet").num_rows
        == pq.read_metadata(b.root / "membership.parquet").num_rows
    )
    shutil.copyfile(b.root / "membership.parquet", a.root / "membership.parquet")
    mixed = Artifact.load(a.root)
    with pytest.raises(InputFormatError, match="not the file this artifact's build wrote"):
        mixed.images("cat(ctx0)")


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_table_is_one_line(tmp_path, capsys, damage):
    art = _build(tmp_path / "a")
    path = art.root / "subsets.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00garbage" * 100)
    code, _, err = run_cli(capsys, "stats", "--artifact", art.root)
    assert_one_line_error(code, err, "subsets.parquet")


@pytest.mark.parametrize("table", ["subsets", "classes", "embeddings"])
def test_wrong_schema_table_is_one_line(tmp_path, capsys, table):
    art = _build(tmp_path / "a")
    manifest = json.loads((art.root / "manifest.json").read_text())
    manifest.pop("table_sha256", None)  # an artifact of an earlier version: no per-table hashes to catch it
    (art.root / "manifest.json").write_text(json.dumps(manifest))
    pq.write_table(pa.table({"something": ["else"]}), art.root / f"{table}.parquet")
    with pytest.raises(InputFormatError, match="lacks the column"):
        loaded = Artifact.load(art.root)
        loaded.embedding("cat(ctx0)")
    code, _, err = run_cli(capsys, "distance", "--artifact", art.root, "cat(ctx0)", "cat(ctx1)")
    assert_one_line_error(code, err, f"{table}.parquet")
