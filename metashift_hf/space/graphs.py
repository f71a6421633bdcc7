"""The Classes and Distances views' data: a class's meta-graph as a task publishes it (``<config>/meta_graph.parquet``),
some of a subset's images (the parquet's own JPEG bytes) and what is known of the distance between two subsets.

Everything is read through ``metashift_hf.open_task`` (the one resolver: a tampered folder or repo is refused as
the CLI refuses it), once per task and only when a view asks: listing the tasks reads no row.
"""

from __future__ import annotations

import base64
import functools
import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

import metashift_hf

from ..builders.meta_graph_facts import DISTANCE_RULE, MetaGraphFacts
from ..core.errors import InputFormatError, MetashiftError
from ..core.names import parse_subset_name
from .index import IndexedTask


THUMBNAILS = 6  # images shown per picked subset
MAX_INLINE_BYTES = 256 * 1024  # an image larger than this is not inlined into the page (a page stays small)
_MIME = {b"\xff\xd8\xff": "image/jpeg", b"\x89PNG": "image/png", b"GIF8": "image/gif"}


@dataclass(frozen=True)
class Node:
    subset: str  # class(context)
    context: str
    community: int  # -1: not a kept subset of the build
    n_images: int
    distance_to_largest: float | None
    x: float  # layout in [0, 1]
    y: float


@dataclass(frozen=True)
class ClassGraph:
    """A class's meta-graph as one task publishes it: its context subsets and their overlap edges."""

    cls: str
    task_id: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str, float], ...]  # (a, b, overlap weight), a < b
    edges_published: bool  # False: the class has too many subsets for the export to list its edges

    def node(self, subset: str) -> Node:
        for n in self.nodes:
            if n.subset == subset:
                return n
        raise InputFormatError(
            f"no subset {subset!r} in class {self.cls!r} of task {self.task_id}", "pick a node of the meta-graph"
        )


@dataclass(frozen=True)
class Thumbnail:
    image_id: str
    mime: str
    data: bytes  # the image's original bytes, as the parquet stores them

    @property
    def data_uri(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


@dataclass(frozen=True)
class SubsetDistance:
    """What the published facts say about two subsets of one class (the repos carry no pairwise distance)."""

    a: str
    b: str
    community_a: int
    community_b: int
    to_largest_a: float | None
    to_largest_b: float | None
    rule: str  # the rule of the distances to the largest community
    overlap: float | None  # the edge weight between a and b (None: no edge at the threshold)
    connected: bool | None  # a path of overlap edges joins them (None: edges not published)

    @property
    def status(self) -> str:
        if self.connected is None:
            return "unknown (edges not published for this class)"
        return "connected" if self.connected else "disconnected"


@functools.lru_cache(maxsize=64)
def _task(repo: str, config: str):
    """The task's ``TaskData`` (spec checked now; rows, facts and images when first asked), one per task."""
    return metashift_hf.open_task(metashift_hf.TaskRef(repo, config=config))


def task_data(e: IndexedTask):
    return _task(e.repo, e.config)


def facts(e: IndexedTask) -> MetaGraphFacts:
    mg = task_data(e).meta_graph
    if mg is None:
        raise InputFormatError(
            f"task {e.task_id} has no meta_graph.parquet (exported before the file existed)",
            "export the task again with `metashift-hf export`",
        )
    return mg


def _layout(names: list[str], edges: list[tuple[str, str, float]]) -> dict[str, tuple[float, float]]:
    """Seeded spring layout of the connected subsets, the others on a grid below; scaled into [0, 1]."""
    g = nx.Graph()
    g.add_nodes_from(names)
    g.add_weighted_edges_from(edges)
    linked = sorted(n for n in names if g.degree(n) > 0)
    alone = sorted(n for n in names if g.degree(n) == 0)
    pos: dict[str, tuple[float, float]] = {}
    if linked:
        raw = nx.spring_layout(g.subgraph(linked), seed=0, weight="weight")
        xy = np.array([raw[n] for n in linked], dtype=float)
        lo, span = xy.min(axis=0), np.ptp(xy, axis=0)
        span[span == 0] = 1.0
        xy = (xy - lo) / span
        top = 0.75 if alone else 1.0
        pos.update({n: (float(x), float(y) * top) for n, (x, y) in zip(linked, xy)})
    if alone:
        cols = max(1, math.ceil(math.sqrt(len(alone) * 2)))
        rows = math.ceil(len(alone) / cols)
        y0 = 0.85 if linked else 0.0
        for i, n in enumerate(alone):
            r, c = divmod(i, cols)
            pos[n] = (c / max(cols - 1, 1), y0 + (r / max(rows - 1, 1)) * (1.0 - y0))
    return pos


def class_graph(e: IndexedTask, cls: str) -> ClassGraph:
    """The meta-graph of ``cls`` as task ``e`` publishes it, laid out (seeded: the same picture every time)."""
    if cls not in e.classes:
        raise InputFormatError(f"task {e.task_id} has no class {cls!r}", f"pick one of {', '.join(e.classes)}")
    subs = sorted((s for s in facts(e).subsets.values() if s.cls == cls), key=lambda s: s.subset)
    published = all(s.edges is not None for s in subs)
    edges = sorted(
        {(min(s.subset, t), max(s.subset, t), float(w)) for s in subs for t, w in (s.edges or ())},
    )
    pos = _layout([s.subset for s in subs], edges)
    nodes = tuple(
        Node(
            s.subset,
            parse_subset_name(s.subset)[1],
            s.community,
            s.n_images,
            s.distance_to_largest_community,
            *pos[s.subset],
        )
        for s in subs
    )
    return ClassGraph(cls, e.task_id, nodes, tuple(edges), published)


def mime_of(data: bytes) -> str | None:
    return next((m for magic, m in _MIME.items() if data.startswith(magic)), None)


def thumbnails(e: IndexedTask, subset: str, k: int = THUMBNAILS) -> list[Thumbnail]:
    """Up to ``k`` images of ``subset`` (rows of its class holding its context), by image id, from the parquet."""
    cls, context = parse_subset_name(subset)
    td = task_data(e)
    ids = sorted(
        {r.image_id for rows in td.plan.splits.values() for r in rows if r.label == cls and context in r.contexts}
    )[:k]
    if not ids:
        return []
    source = td.images()
    out = []
    for image_id in ids:
        data = source.read(image_id)
        mime = mime_of(data)
        if mime is not None and len(data) <= MAX_INLINE_BYTES:  # never inlined: non-images, huge images
            out.append(Thumbnail(image_id, mime, data))
    return out


def pair_distance(e: IndexedTask, a: str, b: str) -> tuple[str | None, str]:
    """d between two subsets as the task repo publishes it (``TaskData.distances``; what ``metashift-hf distance
    --task REPO A B --value`` prints: the number and its rule, or ``disconnected``), or None and why not."""
    try:
        return str(task_data(e).distances.distance(a, b)), ""
    except MetashiftError as exc:
        return None, f"{exc.what} ({exc.fix})"


def subset_distance(graph: ClassGraph, a: str, b: str) -> SubsetDistance:
    """What the task's facts say about subsets ``a`` and ``b`` of ``graph``'s class."""
    na, nb = graph.node(a), graph.node(b)
    weight = {(x, y): w for x, y, w in graph.edges}
    overlap = weight.get((min(a, b), max(a, b)))
    connected = None
    if graph.edges_published:
        g = nx.Graph()
        g.add_nodes_from(n.subset for n in graph.nodes)
        g.add_edges_from((x, y) for x, y, _ in graph.edges)
        connected = nx.has_path(g, a, b)
    return SubsetDistance(
        a,
        b,
        na.community,
        nb.community,
        na.distance_to_largest,
        nb.distance_to_largest,
        DISTANCE_RULE,
        overlap,
        connected,
    )


def distances_from(graph: ClassGraph, subset: str) -> list[SubsetDistance]:
    """``subset`` against every other subset of its class (the node page's table)."""
    return [subset_distance(graph, subset, n.subset) for n in graph.nodes if n.subset != subset]
