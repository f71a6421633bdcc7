"""Candidate subsets of a multi-label table counted out of core, in DuckDB under a memory limit.

The in-memory path (``tags.candidates_from_tags`` -> ``CandidateSubsets``) holds every (subset,
image) row as int64 arrays plus every subset name as a Python string: ~7.3 KB per image on
OpenImages-like tags (issue 28). Here the (subject, context, image) rows live in a DuckDB file in
a spill folder inside the build's own temporary folder; group-bys and sorts spill there past
``memory_limit``. Python holds only the tag table's integer codes, the kept subsets' names and
one class's members at a time. The tables it yields are equal to the in-memory build's
(tests/test_build_scale.py builds every multi-label fixture both ways).
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Collection, Iterator

import duckdb
import numpy as np
import pyarrow as pa

from metashift_hf.core.errors import EmptyResultError
from metashift_hf.core.options import byte_size, positive_int

from .subsets import KINDS, KeptSubsets
from .tags import TagTable, allowed_subjects


logger = logging.getLogger(__name__)

DEFAULT_MEMORY_FRACTION = 0.25  # of physical memory, the default --memory-limit
_BATCH_ROWS = 1 << 20  # rows fetched from DuckDB per record batch


def default_memory_limit() -> int:
    """``DEFAULT_MEMORY_FRACTION`` of this machine's physical memory, in bytes."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * DEFAULT_MEMORY_FRACTION)


class TagCandidates:
    """Every ``s(c)`` of a :class:`TagTable` (as ``candidates_from_tags``), held in DuckDB.

    Use as a context manager around the build (``open(spill)`` ... ``close()``): the spill folder
    is created on open and removed on close, also after an error.
    """

    def __init__(self, table: TagTable, *, subjects: Collection[str] = (), subject_categories: Collection[str] = (),
                 memory_limit: int | None = None, threads: int = 1) -> None:
        if len(table) == 0:
            raise EmptyResultError("the multi-label input has no (image, tag) rows", "give a non-empty input")
        self.table = table
        self.allowed = allowed_subjects(table, subjects, subject_categories)  # checks the names before any work
        self.memory_limit = default_memory_limit() if memory_limit is None else byte_size(memory_limit, "memory_limit")
        self.threads = positive_int(threads, "threads")
        self.kinds = ("object",)  # every tag subset is an object context (as candidates_from_tags)
        self.collisions = 0
        self._con: duckdb.DuckDBPyConnection | None = None
        self._spill: Path | None = None

    # -- lifetime -------------------------------------------------------------------------------
    def open(self, spill: Path) -> "TagCandidates":
        """Count the candidates, with DuckDB's database and spill files in the new folder ``spill``."""
        spill.mkdir()
        self._spill = spill
        con = duckdb.connect(str(spill / "candidates.duckdb"), config={
            "memory_limit": f"{self.memory_limit}B", "temp_directory": str(spill / "tmp"),
            "threads": self.threads, "preserve_insertion_order": False})
        self._con = con
        t = self.table
        n_tags = len(t.tags)
        # codes fit int32 (tags, images < 2**31); DuckDB reads the numpy arrays without a copy in Python
        con.register("tag_rows", pa.table({"img": pa.array(t.image_codes.astype(np.int32)),
                                           "tag": pa.array(t.tag_codes.astype(np.int32))}))
        con.register("tag_names", pa.table({
            "tag": pa.array(np.arange(n_tags, dtype=np.int32)), "name": pa.array(t.tags, pa.string()),
            "category": pa.array([t.categories.get(x) for x in t.tags], pa.string()),
            "allowed": pa.array(self.allowed)}))
        con.execute("""
            CREATE TABLE pairs AS
            SELECT a.tag AS s, b.tag AS c, a.img AS img
            FROM tag_rows a JOIN tag_names n ON n.tag = a.tag AND n.allowed
            JOIN tag_rows b ON b.img = a.img AND b.tag <> a.tag""")
        # subset ranks in name order: bytewise (UTF-8 = code-point order, as Python sorts str)
        con.execute("""
            CREATE TABLE subsets AS
            SELECT (row_number() OVER (ORDER BY name) - 1)::BIGINT AS sid, *
            FROM (SELECT p.s, p.c, count(*)::BIGINT AS n, ns.name || '(' || nc.name || ')' AS name,
                         ns.name AS subject, nc.name AS context, nc.category AS category
                  FROM pairs p JOIN tag_names ns ON ns.tag = p.s JOIN tag_names nc ON nc.tag = p.c
                  GROUP BY p.s, p.c, ns.name, nc.name, nc.category)""")
        con.execute("""
            CREATE TABLE members AS
            SELECT x.sid::INTEGER AS sid, p.img FROM pairs p JOIN subsets x ON x.s = p.s AND x.c = p.c""")
        con.execute("DROP TABLE pairs")
        return self

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None

    def __enter__(self) -> "TagCandidates":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _sql(self, query: str, *params, con: "duckdb.DuckDBPyConnection | None" = None) -> "duckdb.DuckDBPyRelation":
        if self._con is None:
            raise RuntimeError("TagCandidates used before open()")  # a programming error, not user input
        return (con or self._con).sql(query, params=list(params))

    def _one(self, query: str, *params) -> tuple:
        """The one row of a query (figures)."""
        if self._con is None:
            raise RuntimeError("TagCandidates used before open()")
        return self._con.execute(query, list(params)).fetchone()

    def _arrow(self, query: str, *params) -> pa.Table:
        rel = self._sql(query, *params)
        # duckdb 2 names it to_arrow_table; 1.x only fetch_arrow_table (deprecated in 2)
        return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.fetch_arrow_table()

    # -- figures --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._one("SELECT count(*) FROM subsets")[0])

    @property
    def image_ids(self) -> list[str]:
        return self.table.image_ids

    def big(self, min_images: int) -> tuple[int, int]:
        """(subsets with at least ``min_images`` images, largest subset size)."""
        n, top = self._one("SELECT count(*) FILTER (WHERE n >= ?), coalesce(max(n), 0) FROM subsets", min_images)
        return int(n), int(top)

    def kind_counts(self) -> dict:
        kept = int(self._one("SELECT count(*) FROM kept")[0])
        return {k: {"candidates": len(self) if k == "object" else 0, "kept": kept if k == "object" else 0}
                for k in KINDS}

    def rules(self, min_images: int, min_subsets: int, max_subsets: int = 0) -> KeptSubsets:
        """The rules of ``subsets.apply_rules``, the kept subsets stored in DuckDB as table ``kept``."""
        self._con.execute("CREATE OR REPLACE TABLE classes AS SELECT s FROM subsets WHERE n >= ? GROUP BY s "
                  "HAVING count(*) > ?", [min_images, min_subsets])
        self._con.execute("""CREATE OR REPLACE TABLE kept AS
                     SELECT sid, name, subject, n, dense_rank() OVER (ORDER BY subject) AS crank FROM (
                         SELECT x.sid, x.name, x.subject, x.n,
                                row_number() OVER (PARTITION BY x.s ORDER BY x.n DESC, x.sid) AS r
                         FROM subsets x JOIN classes k ON k.s = x.s WHERE x.n >= ?)
                     WHERE ? = 0 OR r <= ? ORDER BY sid""", [min_images, max_subsets, max_subsets])
        t = self._arrow("SELECT sid, name, subject, n FROM kept ORDER BY sid")
        classes = sorted(set(t.column("subject").to_pylist()))
        return KeptSubsets(classes, t.column("sid").to_numpy().astype(np.int64), t.column("name").to_pylist(),
                           t.column("subject").to_pylist(), t.column("n").to_numpy().astype(np.int64))

    def best_subject(self, min_images: int) -> tuple[str, int]:
        """The subject with the most subsets of at least ``min_images`` images (for the empty-rules message)."""
        row = self._one("SELECT subject, count(*) FILTER (WHERE n >= ?) AS k FROM subsets GROUP BY subject "
                        "ORDER BY k DESC, subject DESC LIMIT 1", min_images)
        return str(row[0]), int(row[1])

    def distinct_images(self, kept_only: bool) -> int:
        q = ("SELECT count(DISTINCT m.img) FROM members m SEMI JOIN kept k ON k.sid = m.sid" if kept_only
             else "SELECT count(DISTINCT img) FROM members")
        return int(self._one(q)[0])

    # -- rows, streamed in order ----------------------------------------------------------------
    def names_array(self) -> pa.Array:
        t = self._arrow("SELECT name FROM subsets ORDER BY sid")
        return t.column("name").combine_chunks().cast(pa.large_string())

    def _codes(self, query: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # a cursor of its own: membership.parquet is written from another thread than the analyses
        rel = self._sql(query, con=self._con.cursor())
        reader = rel.to_arrow_reader(_BATCH_ROWS) if hasattr(rel, "to_arrow_reader") else rel.fetch_arrow_reader(_BATCH_ROWS)
        for batch in reader:
            yield (batch.column(0).to_numpy().astype(np.int64), batch.column(1).to_numpy().astype(np.int64))

    def membership_codes(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(subset rank, image code) of every candidate row, sorted (membership.parquet's order)."""
        return self._codes("SELECT sid, img FROM members ORDER BY sid, img")

    def class_members(self, kept: KeptSubsets) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """(subject, {kept subset: sorted image codes}) per class, classes sorted; one class in memory."""
        name_of = dict(zip(kept.sid.tolist(), kept.names))
        subject_of = dict(zip(kept.sid.tolist(), kept.subjects))
        current: str | None = None
        members: dict[str, list[np.ndarray]] = {}
        # by subject (not by subset name: 'cat food(x)' < 'cat(y)' but 'cat' < 'cat food'), then name, image
        for sid, img in self._codes("SELECT m.sid, m.img FROM members m JOIN kept k ON k.sid = m.sid "
                                    "ORDER BY k.crank, m.sid, m.img"):
            cuts = np.flatnonzero(np.diff(sid)) + 1
            for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [sid.size]]).tolist()):
                s = int(sid[lo])
                subject = subject_of[s]
                if subject != current:
                    if current is not None:
                        yield current, {n: np.concatenate(v) for n, v in members.items()}
                    current, members = subject, {}
                members.setdefault(name_of[s], []).append(img[lo:hi])
        if current is not None:
            yield current, {n: np.concatenate(v) for n, v in members.items()}

    def subsets_table(self, communities: dict[str, int], schema: pa.Schema) -> pa.Table:
        """subsets.parquet (every candidate, name order): kept from the rules, community from the analyses."""
        self._con.register("communities", pa.table({"name": pa.array(list(communities), pa.string()),
                                                    "community": pa.array(list(communities.values()), pa.int64())}))
        t = self._arrow("""
            SELECT x.name AS subset, x.subject, x.context, 'object' AS kind, x.category, x.n AS n_images,
                   (k.sid IS NOT NULL) AS kept, coalesce(c.community, -1)::BIGINT AS community
            FROM subsets x LEFT JOIN kept k ON k.sid = x.sid LEFT JOIN communities c ON c.name = x.name
            ORDER BY x.sid""")
        self._con.unregister("communities")
        return t.cast(schema).combine_chunks()
