"""A task's meta-graph facts: each context subset's community and its distance to its class's largest community.

One object, :class:`MetaGraphFacts`, answers "community and distance of a subset" for every form a task comes
in: computed from the artifact (:meth:`MetaGraphFacts.of_artifact`) when there is one, and read back from the
``<config>/meta_graph.parquet`` an export writes beside the shards (:data:`FACTS_FILE`) when there is none, so
``evaluate`` and ``bugs`` give the same per-group figures from an artifact, an exported folder or a Hub repo.

The file holds one row per context subset that occurs in the task (every ``class(context)`` of every row's
``contexts``), sorted by subset::

    class: str, subset: str ("class(context)"), community: int64 (-1: not a kept subset of the artifact),
    distance_to_largest_community: float64 | null, n_images: int64 (the subset's images in the artifact),
    edges: list<struct<target: str, weight: float64>> | null  (its meta-graph edges to the other listed
    subsets of its class; null for a class with more than EDGE_SUBSETS_MAX listed subsets)

``datasets`` users read it with ``load_dataset(REPO, data_files="CONFIG/meta_graph.parquet")``. Read back, the file
is checked against itself (:meth:`MetaGraphFacts.from_arrow`: edges, and distances along them) and against the
task's rows (:meth:`MetaGraphFacts.check_rows`: each row's ``community``, the subsets' sizes, the distances' bound);
nothing in it can be recomputed without the artifact, so these are the constraints its writer always meets.
Builders compute, cards and the hub only write and read.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.core.fsutil import open_input, write_parquet

from .artifact import Artifact
from .distances import Distance, DistanceMatrix
from .pair_distances import NO_PAIRS_FIX, PAIRS_FILE, PairDistances


FACTS_FILE = "meta_graph.parquet"
# A task lists each of its context subsets once (GQA's largest collections: a few thousand); a file far
# past these bounds is not ours and is refused before pyarrow parses it.
FACTS_MAX_BYTES = 32 * 2**20
FACTS_MAX_ROWS = 200_000
EDGE_SUBSETS_MAX = 64  # edges are written for classes with at most this many listed subsets (<= 2,016 pairs)
DISTANCE_RULE = (
    "artifact group distance, rule 'paper' (spectral embeddings only), from the subset to the other "
    "subsets of its class's community 0"
)

EDGE_TYPE = pa.list_(pa.struct([("target", pa.string()), ("weight", pa.float64())]))
FACTS_SCHEMA = pa.schema(
    [
        ("class", pa.string()),
        ("subset", pa.string()),
        ("community", pa.int64()),
        ("distance_to_largest_community", pa.float64()),
        ("n_images", pa.int64()),
        ("edges", EDGE_TYPE),
    ]
)
_FIX = (
    "export the task again with `metashift-hf export` (the file is written from the artifact), or download the "
    "repo again (another --revision)"
)


@dataclass(frozen=True)
class SubsetFacts:
    """One context subset of a task: its community in its class's meta-graph and its distance to the largest."""

    cls: str
    subset: str
    community: int  # -1: not a kept subset of the artifact
    distance_to_largest_community: float | None  # DISTANCE_RULE; None: not a spectral number
    n_images: int
    edges: tuple[tuple[str, float], ...] | None  # (other listed subset, overlap weight); None: class too large


@dataclass(frozen=True)
class MetaGraphFacts:
    """The meta-graph facts of a task's context subsets, by subset name (see the module docstring)."""

    subsets: Mapping[str, SubsetFacts]
    # every pair of each class's kept subsets (builders.pair_distances), read from the task's published file;
    # None: facts computed from an artifact (ask it: Artifact.distance), or an export made before the file existed
    distances: PairDistances | None = None

    def _pairs(self) -> PairDistances:
        if self.distances is None:
            raise MetashiftError(
                f"these meta-graph facts carry no pairwise distances ({PAIRS_FILE} is not beside {FACTS_FILE}: an "
                "export made before it was published, or facts computed from an artifact)",
                NO_PAIRS_FIX,
            )
        return self.distances

    def distance(self, a: str, b: str) -> Distance:
        """Distance between two kept subsets of one class, as ``Artifact.distance`` gives it (published pairs)."""
        return self._pairs().distance(a, b)

    def matrix(self, cls: str) -> DistanceMatrix:
        """Every pair of class ``cls``'s kept subsets, as ``Artifact.distance_matrix`` gives it (published pairs)."""
        return self._pairs().matrix(cls)

    def community_map(self) -> dict[str, int]:
        """subset -> community, for the subsets kept in the artifact (what ``scoring.groups.group_table`` takes)."""
        return {s: f.community for s, f in self.subsets.items() if f.community >= 0}

    def distance_to_largest(self, subset: str) -> float | None:
        """The subset's distance to its class's largest community (None: unknown, or not a task subset)."""
        f = self.subsets.get(subset)
        return None if f is None else f.distance_to_largest_community

    def check_rows(
        self,
        rows: Iterable[tuple[str, str, str, "Iterable[str] | None", int]],
        where: str,
        *,
        spectral_dim: int | None = None,
        min_images: int | None = None,
    ) -> None:
        """Refuse facts that the task's rows ((image id, class, group, contexts, community) each) contradict, with
        an :class:`InputFormatError` naming ``where`` (the file) and the first rows:

        - a row's ``community`` is one of its context subsets' communities here (the builder takes the group's
          community, which every subset of the group shares, or the one most of the row's contexts are in), and
          -1 exactly when none of them is kept (tasks.shifts.majority_community);
        - a subset's ``n_images`` (its images in the artifact) is at least the task's images that show it;
        - (``min_images``: the build's rule) a kept subset (community >= 0) has at least that many images;
        - (``spectral_dim``: the build's K) a distance is at most 2 sqrt(K): the embedding scales every coordinate
          into [-1, 1] (builders.metagraph.spectral_embedding), and so does the mean it is measured to.
        """
        bad: list[str] = []
        n_bad = 0
        seen: dict[str, set[str]] = {}
        for image_id, cls, group, contexts, community in rows:
            names = [f"{cls}({c})" for c in (contexts if contexts is not None else ())]
            for s in names:
                seen.setdefault(s, set()).add(str(image_id))
            comms = {self.subsets[s].community if s in self.subsets else None for s in names} - {-1}
            if (community in comms) if comms else community == -1:
                continue
            n_bad += 1
            if len(bad) < 3:
                has = sorted(k for k in comms if k is not None) or "none kept"
                bad.append(
                    f"image {image_id} of group {group!r} has community {community}, its contexts' here: {has}"
                    + (" (a context subset it does not list)" if None in comms else "")
                )
        if n_bad:
            raise InputFormatError(
                f"{where} and the task's rows disagree on communities ({n_bad} row(s)): " + "; ".join(bad), _FIX
            )
        small = sorted(s for s, ids in seen.items() if s in self.subsets and len(ids) > self.subsets[s].n_images)
        if small:
            s = small[0]
            raise InputFormatError(
                f"{where}: subset {s!r} has n_images {self.subsets[s].n_images}, but {len(seen[s])} of the task's "
                f"images show it" + (f" (and {len(small) - 1} more subset(s))" if len(small) > 1 else ""),
                _FIX,
            )
        if min_images is not None:
            few = sorted(s for s, f in self.subsets.items() if f.community >= 0 and f.n_images < min_images)
            if few:
                raise InputFormatError(
                    f"{where}: subset {few[0]!r} is kept (community {self.subsets[few[0]].community}) with n_images "
                    f"{self.subsets[few[0]].n_images}; the build keeps a subset only from {min_images} images",
                    _FIX,
                )
        if spectral_dim is not None:
            bound = 2 * math.sqrt(spectral_dim)
            far = sorted(
                s for s, f in self.subsets.items() if (f.distance_to_largest_community or 0) > bound * (1 + 1e-9)
            )
            if far:
                raise InputFormatError(
                    f"{where}: subset {far[0]!r} is at distance {self.subsets[far[0]].distance_to_largest_community} "
                    f"from its class's largest community; a {spectral_dim}-dimensional spectral embedding puts every "
                    f"subset within {bound:.4g}" + (f" ({len(far)} subsets are further)" if len(far) > 1 else ""),
                    _FIX,
                )

    # -- computed from the artifact -------------------------------------------------------------------
    @classmethod
    def of_artifact(
        cls, art: "Artifact | str | os.PathLike", rows: Iterable[tuple[str, Iterable[str]]]
    ) -> "MetaGraphFacts":
        """The facts of the context subsets of ``rows`` ((class, contexts) per row), from the artifact."""
        art = Artifact.load(art)
        wanted = task_subsets(rows)
        table = art.subsets_table()
        sizes = dict(zip(table["subset"], (int(n) for n in table["n_images"])))
        classes = set(art.classes())
        out: dict[str, SubsetFacts] = {}
        for c, names in sorted(wanted.items()):
            comm = art.communities(c) if c in classes else {}
            edges = _class_edges(art, c, names) if c in classes and len(names) <= EDGE_SUBSETS_MAX else None
            for s in sorted(names):
                out[s] = SubsetFacts(
                    c,
                    s,
                    comm.get(s, -1),
                    _distance_to_largest(art, c, s, comm),
                    sizes.get(s, 0),
                    None if edges is None else tuple(edges.get(s, ())),
                )
        return cls(dict(sorted(out.items())))

    # -- the file -------------------------------------------------------------------------------------
    def to_arrow(self) -> pa.Table:
        rows = list(self.subsets.values())
        return pa.table(
            {
                "class": pa.array([f.cls for f in rows], pa.string()),
                "subset": pa.array([f.subset for f in rows], pa.string()),
                "community": pa.array([f.community for f in rows], pa.int64()),
                "distance_to_largest_community": pa.array(
                    [f.distance_to_largest_community for f in rows], pa.float64()
                ),
                "n_images": pa.array([f.n_images for f in rows], pa.int64()),
                "edges": pa.array(
                    [None if f.edges is None else [{"target": t, "weight": w} for t, w in f.edges] for f in rows],
                    EDGE_TYPE,
                ),
            },
            schema=FACTS_SCHEMA,
        )

    def write(self, where: "str | os.PathLike | BinaryIO") -> None:
        """Write the facts file to a path or an open binary file (fixed parquet settings: the same facts give
        the same bytes)."""
        write_parquet(self.to_arrow(), where)

    @classmethod
    def read(
        cls,
        path: "str | os.PathLike",
        where: str,
        classes: Iterable[str],
        rows: Iterable[tuple[str, Iterable[str]]] | None = None,
    ) -> "MetaGraphFacts":
        """The facts file at ``path`` (a regular file of at most :data:`FACTS_MAX_BYTES`), checked against the
        task: its schema, names of the task's ``classes`` and, with ``rows``, exactly the task's context subsets."""
        return cls.from_bytes(read_bounded(Path(path), where, FACTS_MAX_BYTES), where, classes, rows)

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        where: str,
        classes: Iterable[str],
        rows: Iterable[tuple[str, Iterable[str]]] | None = None,
    ) -> "MetaGraphFacts":
        """The facts file's bytes, parsed and checked as :meth:`from_arrow`."""
        try:
            table = pq.read_table(io.BytesIO(data))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise InputFormatError(f"{where} is not a readable parquet file ({type(exc).__name__})", _FIX) from None
        return cls.from_arrow(table, where, classes, rows)

    @classmethod
    def from_arrow(
        cls,
        table: pa.Table,
        where: str,
        classes: Iterable[str],
        rows: Iterable[tuple[str, Iterable[str]]] | None = None,
    ) -> "MetaGraphFacts":
        """Facts from a table of :data:`FACTS_SCHEMA`; anything else is an :class:`InputFormatError` naming ``where``."""
        if table.schema.remove_metadata() != FACTS_SCHEMA:
            raise InputFormatError(
                f"{where}: columns {table.schema.names} ({', '.join(str(t) for t in table.schema.types)}) "
                f"are not the meta-graph facts schema ({', '.join(FACTS_SCHEMA.names)})",
                _FIX,
            )
        if table.num_rows > FACTS_MAX_ROWS:
            raise InputFormatError(f"{where} has {table.num_rows} rows; a task lists at most {FACTS_MAX_ROWS}", _FIX)
        for name in ("class", "subset", "community", "n_images"):
            if table.column(name).null_count:
                raise InputFormatError(f"{where}: column {name!r} has empty cells", _FIX)
        known = set(classes)
        out: dict[str, SubsetFacts] = {}
        for r in table.to_pylist():
            c, s, k, d, n = r["class"], r["subset"], r["community"], r["distance_to_largest_community"], r["n_images"]
            what = f"{where}: subset {s!r}"
            if c not in known:
                raise InputFormatError(
                    f"{what} is of class {c!r}, which is not a class of the task ({sorted(known)})", _FIX
                )
            if not (s.startswith(f"{c}(") and s.endswith(")")) or s in out:
                raise InputFormatError(f"{what} is not a class({c})(context) subset listed once", _FIX)
            if k < -1 or n < 0 or (d is not None and not (math.isfinite(d) and d >= 0)) or (k == -1 and d is not None):
                raise InputFormatError(
                    f"{what}: community {k}, distance {d}, n_images {n} are not valid "
                    "(community >= -1, a distance >= 0 only for a kept subset, n_images >= 0)",
                    _FIX,
                )
            edges = r["edges"]
            if edges is not None:
                edges = tuple((e["target"], e["weight"]) for e in edges)
                if any(t is None or w is None or not (0 < w <= 1) or not t.startswith(f"{c}(") for t, w in edges):
                    raise InputFormatError(
                        f"{what}: an edge has no target of its class or a weight outside (0, 1]", _FIX
                    )
            out[s] = SubsetFacts(c, s, int(k), d, int(n), edges)
        listed = set(out)
        if any(f.edges is not None and not {t for t, _ in f.edges} <= listed for f in out.values()):
            raise InputFormatError(f"{where}: an edge names a subset the file does not list", _FIX)
        _check_graph(out, where)
        if rows is not None:
            wanted = {s for names in task_subsets(rows).values() for s in names}
            if wanted != listed:
                missing, extra = sorted(wanted - listed)[:5], sorted(listed - wanted)[:5]
                raise InputFormatError(
                    f"{where} does not list the task's context subsets"
                    + (f" (missing: {missing})" if missing else "")
                    + (f" (not in the task: {extra})" if extra else ""),
                    _FIX,
                )
        return cls(dict(sorted(out.items())))


def _check_graph(facts: Mapping[str, SubsetFacts], where: str) -> None:
    """The file against itself, by how :meth:`MetaGraphFacts.of_artifact` writes it: per class edges for every
    listed subset or for none (none above :data:`EDGE_SUBSETS_MAX`); an edge listed from both ends with one weight,
    never to itself nor to or from a subset the artifact does not keep; and the distances of two subsets joined by
    an edge both known or both unknown (an edge puts both in one connected component, and :data:`DISTANCE_RULE`
    has a number for every subset of the embedded one, none for the others), except a subset alone in its class's
    largest community, which is at 0 without an embedding."""
    by_class: dict[str, list[SubsetFacts]] = {}
    for f in facts.values():
        by_class.setdefault(f.cls, []).append(f)
    for c, fs in by_class.items():
        with_edges = [f for f in fs if f.edges is not None]
        if with_edges and (len(with_edges) != len(fs) or len(fs) > EDGE_SUBSETS_MAX):
            raise InputFormatError(
                f"{where}: class {c!r} lists edges for {len(with_edges)} of its {len(fs)} subsets (the file lists "
                f"them for every subset of a class with at most {EDGE_SUBSETS_MAX}, else for none)",
                _FIX,
            )
    for f in facts.values():
        for t, w in f.edges or ():
            other = facts[t]
            why = None
            if t == f.subset or f.community < 0 or other.community < 0:
                why = "joins a subset to itself or to a subset the artifact does not keep (community -1)"
            elif (f.subset, w) not in (other.edges or ()):
                why = f"is not listed from {t!r} with the same weight"
            elif (
                (f.distance_to_largest_community is None) != (other.distance_to_largest_community is None)
                and f.distance_to_largest_community != 0
                and other.distance_to_largest_community != 0
            ):
                why = f"joins a subset with a distance to one without ({t!r}), in one connected component"
            if why:
                raise InputFormatError(f"{where}: the edge {f.subset!r} - {t!r} {why}", _FIX)


def task_subsets(rows: Iterable[tuple[str, Iterable[str]]]) -> dict[str, set[str]]:
    """class -> the context subsets ``class(context)`` its rows name (each row: its class and its contexts)."""
    out: dict[str, set[str]] = {}
    for cls, contexts in rows:
        names = out.setdefault(str(cls), set())
        names.update(f"{cls}({ctx})" for ctx in (contexts if contexts is not None else ()))
    return {c: names for c, names in out.items() if names}


def _class_edges(art: Artifact, cls: str, names: set[str]) -> dict[str, list[tuple[str, float]]]:
    """subset -> its meta-graph edges to the other ``names`` (both directions, sorted by target)."""
    out: dict[str, list[tuple[str, float]]] = {}
    e = art.edges(cls)
    for a, b, w in zip(e["source"], e["target"], e["weight"]):
        if a in names and b in names:
            out.setdefault(a, []).append((b, float(w)))
            out.setdefault(b, []).append((a, float(w)))
    return {s: sorted(v) for s, v in out.items()}


def _distance_to_largest(art: Artifact, cls: str, subset: str, communities: Mapping[str, int]) -> float | None:
    """:data:`DISTANCE_RULE`: Euclidean between the subset's stored spectral embedding and the size-weighted
    mean embedding of the largest community's other subsets (the 'code' rule re-embeds a two-group graph,
    which is too small for a spectral embedding)."""
    largest = sorted(s for s, c in communities.items() if c == 0)
    if not largest or subset not in communities:
        return None
    others = [s for s in largest if s != subset]
    if not others:  # the subset is the whole largest community
        return 0.0
    try:
        d = art.group_distance(cls, {"subset": [subset], "largest": others}, "subset", "largest", rule="paper")
    except MetashiftError:
        return None
    # one scale per column: a subset without a spectral embedding gets a resistance number (another
    # scale) or 'disconnected'; both are reported as unknown here
    return d.value if d.rule == "spectral" else None


def read_bounded(path: "str | os.PathLike", where: str, limit: int) -> bytes:
    """A published facts file's bytes: a regular file of at most ``limit`` bytes, never a link, FIFO or device
    (core.fsutil.open_input; nothing is parsed before these checks)."""
    with open_input(path, where, _FIX, follow_links=False) as f:
        st = os.fstat(f.fileno())
        if st.st_size > limit:
            raise InputFormatError(
                f"{where} is {st.st_size} bytes; a task's meta-graph facts are at most {limit}", _FIX
            )
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputFormatError(f"{where} grew past {limit} bytes while read", _FIX)
    return data


__all__ = [
    "FACTS_FILE",
    "FACTS_SCHEMA",
    "DISTANCE_RULE",
    "EDGE_SUBSETS_MAX",
    "SubsetFacts",
    "MetaGraphFacts",
    "task_subsets",
    "read_bounded",
]
