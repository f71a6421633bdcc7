"""A task's pairwise meta-graph distances, as an export publishes them: for every class of the task, every pair of
the class's kept subsets with its distance and rule, or ``disconnected`` (what ``metashift-hf distance --artifact A
--class C --matrix`` prints), so a Hub user answers "how far is cat(sofa) from cat(bed)?" without the build.

An export writes ``<config>/meta_graph_distances.parquet`` (:data:`PAIRS_FILE`) beside ``meta_graph.parquet``: a side
file, like it, that no split's ``data_files`` pattern (``<config>/<split>-*``) matches, so it is never rows of the
task's config in ``load_dataset`` or the dataset viewer. One row per unordered pair, classes sorted, pairs in the
artifact's matrix order (``DistanceMatrix.pairs``)::

    class: str, source: str, target: str ("class(context)", source before target in the matrix),
    distance: float64 | null, rule: str | null ("spectral" | "resistance"), status: str ("ok" | "disconnected")

The numbers are the artifact's float64 values, bit for bit. ``rule`` names the scale of a number: ``spectral``
(Euclidean distance of K-dimensional spectral embeddings whose coordinates lie in [-1, 1], so at most 2 sqrt(K))
and ``resistance`` (effective resistance in the thresholded meta-graph) are two scales, never compared
(builders/distances.py). Read back (:meth:`PairDistances.from_arrow`), the file is checked against itself (every
pair of each class's subsets once, a rule exactly when there is a number, no negative or non-finite number, the
spectral bound) and against the task's classes; the task's shift spec records its sha256 (metashift_hf.hub.task_data).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.core.fsutil import write_parquet
from metashift_hf.core.names import SubsetName

from .artifact import Artifact
from .distances import RULES, STATUS_DISCONNECTED, STATUS_OK, Distance, DistanceMatrix


PAIRS_FILE = "meta_graph_distances.parquet"
PAIRS_MAX_BYTES = 256 * 2**20  # a few million pairs; a file past it is not ours and is not parsed
PAIRS_SCHEMA = pa.schema(
    [
        ("class", pa.string()),
        ("source", pa.string()),
        ("target", pa.string()),
        ("distance", pa.float64()),
        ("rule", pa.string()),
        ("status", pa.string()),
    ]
)
PAIRS_FIX = (
    "export the task again with `metashift-hf export` (the file is written from the artifact), or download the "
    "repo again (another --revision)"
)
NO_PAIRS_FIX = (
    "export the task again with this version of metashift-hf (it publishes every pair's distance), or ask the "
    "build itself: metashift-hf distance --artifact ARTIFACT ..."
)


@dataclass(frozen=True)
class PairDistances:
    """Every pair of each class's kept subsets (module docstring): ``matrices`` by class, the artifact's own
    :class:`DistanceMatrix` type, so ``distance``/``matrix`` answer exactly as ``Artifact.distance``/
    ``Artifact.distance_matrix`` do."""

    matrices: Mapping[str, DistanceMatrix]

    def classes(self) -> list[str]:
        return sorted(self.matrices)

    def matrix(self, cls: str) -> DistanceMatrix:
        """Every pair of class ``cls``'s kept subsets (``Artifact.distance_matrix``)."""
        if cls not in self.matrices:
            raise UnknownNameError(
                f"{cls!r} is not a class with a meta-graph in this task (classes: {', '.join(self.classes())})",
                "pass one of the task's classes",
            )
        return self.matrices[cls]

    def distance(self, a: str, b: str) -> Distance:
        """Distance between two kept subsets of one class (``Artifact.distance``): a number and its rule, or
        status ``disconnected``."""
        sa, sb = SubsetName.parse(a).subject, SubsetName.parse(b).subject
        if sa != sb:
            raise MetashiftError(
                f"{a!r} and {b!r} belong to different classes ({sa!r}, {sb!r}); distances are defined "
                "within one class's meta-graph",
                f"compare two subsets of the same class, e.g. {a!r} and another '{sa}(...)' subset",
            )
        m = self.matrix(sa)
        for name in (a, b):
            if name not in m.names:
                raise UnknownNameError(
                    f"{name!r} is not a kept subset of class {sa!r} ({len(m.names)} kept subsets)",
                    f"list them with metashift-hf distance --task TASK --class {sa} --matrix",
                )
        return m.get(a, b)

    # -- computed from the artifact -------------------------------------------------------------------
    @classmethod
    def of_artifact(cls, art: "Artifact | str", classes: Iterable[str]) -> "PairDistances":
        """The matrices of ``classes`` that are classes of the artifact (others have no meta-graph)."""
        art = Artifact.load(art)
        known = set(art.classes())
        return cls({c: art.distance_matrix(c) for c in sorted(set(classes)) if c in known})

    # -- the file -------------------------------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        cols: dict[str, list] = {name: [] for name in PAIRS_SCHEMA.names}
        for c in self.classes():
            for a, b, d in self.matrices[c].pairs():
                for k, v in zip(PAIRS_SCHEMA.names, (c, a, b, d.value, d.rule, d.status)):
                    cols[k].append(v)
        return pa.table({k: pa.array(v, PAIRS_SCHEMA.field(k).type) for k, v in cols.items()}, schema=PAIRS_SCHEMA)

    def write(self, where: "str | BinaryIO") -> None:
        """The file (fixed parquet settings: the same distances give the same bytes)."""
        write_parquet(self.to_arrow(), where)

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        self.write(buf)
        return buf.getvalue()

    @classmethod
    def from_bytes(
        cls, data: bytes, where: str, classes: Iterable[str], spectral_dim: int | None = None
    ) -> "PairDistances":
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise InputFormatError(
                f"{where} is not a readable parquet file ({type(exc).__name__})", PAIRS_FIX
            ) from None
        return cls.from_arrow(table, where, classes, spectral_dim)

    @classmethod
    def from_arrow(
        cls, table: pa.Table, where: str, classes: Iterable[str], spectral_dim: int | None = None
    ) -> "PairDistances":
        """Distances from a table of :data:`PAIRS_SCHEMA`, checked (module docstring); anything else is an
        :class:`InputFormatError` naming ``where``."""
        if table.schema.remove_metadata() != PAIRS_SCHEMA:
            raise InputFormatError(
                f"{where}: columns {table.schema.names} are not the pairwise distances schema "
                f"({', '.join(PAIRS_SCHEMA.names)})",
                PAIRS_FIX,
            )
        for name in ("class", "source", "target", "status"):
            if table.column(name).null_count:
                raise InputFormatError(f"{where}: column {name!r} has empty cells", PAIRS_FIX)
        known = set(classes)
        cols = {k: table.column(k).to_pylist() for k in PAIRS_SCHEMA.names}
        by_class: dict[str, list[int]] = {}
        for i, c in enumerate(cols["class"]):
            by_class.setdefault(c, []).append(i)
        bound = None if spectral_dim is None else 2 * math.sqrt(spectral_dim) * (1 + 1e-9)
        out = {}
        for c, idx in by_class.items():
            if c not in known:
                raise InputFormatError(f"{where}: class {c!r} is not a class of the task ({sorted(known)})", PAIRS_FIX)
            out[c] = _class_matrix(c, [tuple(cols[k][i] for k in PAIRS_SCHEMA.names[1:]) for i in idx], where, bound)
        return cls(dict(sorted(out.items())))


def _class_matrix(c: str, rows: list[tuple], where: str, bound: float | None) -> DistanceMatrix:
    """One class's rows (source, target, distance, rule, status) as its matrix: every unordered pair of its
    subsets exactly once, in matrix order, each answer well formed."""
    if not rows:
        raise InputFormatError(f"{where}: class {c!r} lists no pair", PAIRS_FIX)
    first = rows[0][0]
    names = [first] + [t for s, t, *_ in rows if s == first]
    n = len(names)
    pos = {s: i for i, s in enumerate(names)}
    expected = [(names[i], names[j]) for i, j in zip(*np.triu_indices(n, 1))]
    if len(pos) != n or [(s, t) for s, t, *_ in rows] != expected:
        raise InputFormatError(
            f"{where}: class {c!r} does not list every pair of its {n} subsets once, in order "
            f"({len(rows)} rows, {len(expected)} pairs)",
            PAIRS_FIX,
        )
    if any(not (s.startswith(f"{c}(") and s.endswith(")")) for s in names):
        raise InputFormatError(f"{where}: class {c!r} lists a subset that is not {c}(context)", PAIRS_FIX)
    values = np.full((n, n), np.nan)
    rules = np.full((n, n), "", dtype=object)
    np.fill_diagonal(values, 0.0)
    for s, t, d, rule, status in rows:
        ok = (status == STATUS_OK and rule in RULES and d is not None and math.isfinite(d) and d >= 0) or (
            status == STATUS_DISCONNECTED and rule is None and d is None
        )
        if not ok or (bound is not None and rule == "spectral" and d > bound):
            raise InputFormatError(
                f"{where}: the pair {s!r} - {t!r} has distance {d}, rule {rule!r}, status {status!r} "
                f"(a number >= 0 with rule {' or '.join(RULES)} and status ok"
                + (f", spectral at most {bound:.4g}" if bound is not None else "")
                + ", or none with status disconnected)",
                PAIRS_FIX,
            )
        i, j = pos[s], pos[t]
        if d is not None:
            values[i, j] = values[j, i] = d
            rules[i, j] = rules[j, i] = rule
    return DistanceMatrix(tuple(names), values, rules)


__all__ = ["PAIRS_FILE", "PAIRS_SCHEMA", "PAIRS_MAX_BYTES", "NO_PAIRS_FIX", "PairDistances"]
