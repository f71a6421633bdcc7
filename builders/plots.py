"""Meta-graph pictures: one PNG per class, node size ~ subset size, colour = community.

matplotlib is the optional ``plot`` extra, so it is imported only when a picture is drawn.
The layout is a seeded force-directed (spring) layout, as in the original code's pictures, so the
same analysis always gives the same picture. Subsets without any edge are not left to the spring
layout (which pushes them to a meaningless ring): they sit in a compact grid below the connected part.
``plot_roles`` draws the same layout with the subsets coloured by their role in a task (the cards'
"train / test groups" pictures).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.fsutil import atomic_file
from metashift_hf.core.names import SubsetName, file_stem


LAYOUT_SEED = 1234  # the original code's spring_layout seed
GRID_STEP = 0.5  # distance between neighbouring isolated subsets, in layout units (the spring part spans [-1, 1])


def plot_name(cls: str) -> str:
    """A class's meta-graph picture in an artifact's ``plots/``: the one rule the build writes by and cards read by.
    A class named ``..`` or ``../../pwn`` is drawn under a safe name (``core.names.file_stem``), never a hidden file
    or a path outside ``plots/``; the build says which classes were renamed."""
    return file_stem(cls) + ".png"


def have_matplotlib() -> bool:
    """Whether pictures can be drawn (matplotlib is the optional ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401  optional extra: only to know whether to draw

    except ImportError:
        return False
    return True


def _matplotlib():
    """The matplotlib pieces we draw with, imported on first use (optional ``plot`` extra)."""
    try:
        import matplotlib  # noqa: F401  first, so a missing package fails here with its own name
        from matplotlib import colormaps, patheffects
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError as exc:
        raise MetashiftError(
            f"cannot draw meta-graph pictures: matplotlib is not installed ({exc})",
            "pip install 'metashift-hf[plot]' or build without pictures",
        ) from exc
    return colormaps, patheffects, FigureCanvasAgg, LineCollection, Figure, Line2D


def new_figure(size: tuple[float, float]):
    """A matplotlib Figure of ``size`` inches at 100 dpi, drawn off screen (no pyplot state)."""
    _colormaps, _patheffects, FigureCanvasAgg, _lines, Figure, _line2d = _matplotlib()
    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _dot(Line2D, colour, size: float):
    """A legend handle: one filled dot with a thin black ring, like the nodes."""
    return Line2D(
        [], [], marker="o", linestyle="", markersize=size, markeredgecolor="black", markeredgewidth=0.3, color=colour
    )


def save_png(fig, path: str | os.PathLike) -> None:
    """Write a figure as PNG, atomically; no Software/date metadata, so the same input gives the same bytes."""
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", metadata={"Software": None}, bbox_inches="tight", pad_inches=0.1)


def spring_positions(
    n: int, edges: list[tuple[int, int, float]], seed: int = LAYOUT_SEED, iterations: int = 50
) -> np.ndarray:
    """Fruchterman-Reingold force layout (dense numpy), seeded, returns n x 2 positions in [-1, 1].

    Our own small version rather than nx.spring_layout: networkx switches to a slow sparse
    variant above 500 nodes (seconds for the largest classes), and we want one code path.
    """
    rng = np.random.default_rng(seed)
    pos = rng.random((n, 2))
    if n <= 1:
        return pos * 0.0
    adj = np.zeros((n, n))
    for i, j, w in edges:
        adj[i, j] = adj[j, i] = w
    k = np.sqrt(1.0 / n)  # optimal distance between nodes
    t = 0.1  # temperature: the largest step, cooled linearly to 0
    dt = t / (iterations + 1)
    for _ in range(iterations):
        dx = pos[:, 0, None] - pos[None, :, 0]
        dy = pos[:, 1, None] - pos[None, :, 1]
        dist = np.maximum(np.sqrt(dx * dx + dy * dy), 0.01)
        # repulsion k^2/d between all pairs, attraction w*d^2/k along edges (as force/d times delta)
        f = k * k / (dist * dist) - adj * dist / k
        disp = np.stack([(f * dx).sum(axis=1), (f * dy).sum(axis=1)], axis=1)
        length = np.maximum(np.sqrt((disp**2).sum(axis=1)), 0.01)
        pos += disp * (t / length)[:, None]
        t -= dt
    pos -= pos.mean(axis=0)
    lim = np.abs(pos).max()
    return pos / lim if lim > 0 else pos


@dataclass(frozen=True)
class Layout:
    """Where each subset of a class is drawn: ``xy`` (one row per name, in ``names`` order)."""

    names: list[str]
    xy: np.ndarray
    isolated: list[str]  # subsets without any edge, placed on the grid
    grid_columns: int  # columns of that grid (0 when nothing is isolated)


def layout(names: Sequence[str], edges: Sequence[tuple[str, str, float]], seed: int = LAYOUT_SEED) -> Layout:
    """The picture layout of a class: the spring layout of the subsets that have an edge (exactly
    ``spring_positions`` of the whole graph when every subset has one), the isolated subsets in a
    compact grid below it, in name order."""
    names = list(names)
    linked = sorted({a for a, _b, _w in edges} | {b for _a, b, _w in edges})
    linked_set = set(linked)
    isolated = [s for s in names if s not in linked_set]
    if not isolated:
        index = {s: i for i, s in enumerate(names)}
        return Layout(names, spring_positions(len(names), [(index[a], index[b], w) for a, b, w in edges], seed), [], 0)
    xy = np.zeros((len(names), 2))
    row_of = {s: i for i, s in enumerate(names)}
    top = -1.0 - GRID_STEP  # the grid starts below the spring part
    if linked:
        order = [s for s in names if s in linked_set]
        index = {s: i for i, s in enumerate(order)}
        pos = spring_positions(len(order), [(index[a], index[b], w) for a, b, w in edges], seed)
        for s, p in zip(order, pos):
            xy[row_of[s]] = p
        columns = max(1, int(round(2.0 / GRID_STEP)) + 1)  # as wide as the spring part
    else:
        top = 0.0
        columns = max(1, math.ceil(math.sqrt(len(isolated) * 1.5)))  # a little wider than tall
    for k, s in enumerate(isolated):
        r, c = divmod(k, columns)
        xy[row_of[s]] = (c * GRID_STEP - (min(columns, len(isolated)) - 1) * GRID_STEP / 2, top - r * GRID_STEP)
    return Layout(names, xy, isolated, min(columns, len(isolated)))


def _short(subset: str) -> str:
    """The context of ``subject(context)`` (the subject is the picture's title)."""
    try:
        return SubsetName.parse(subset).context
    except MetashiftError:
        return subset


def _figure_size(lay: Layout) -> tuple[float, float]:
    n = len(lay.names)
    if lay.isolated and len(lay.isolated) == n:  # grid only: sized by the grid, not the spring rule
        rows = math.ceil(n / max(lay.grid_columns, 1))
        return float(1.1 * lay.grid_columns + 3.5), float(0.7 * rows + 0.9)
    side = float(min(20.0, max(7.0, 0.35 * np.sqrt(n) * 4)))
    extra = 0.0
    if lay.isolated:
        extra = 0.6 * math.ceil(len(lay.isolated) / max(lay.grid_columns, 1))
    return side, side * 0.75 + extra


def _edge_note(analysis, lay: Layout) -> str:
    """Title words on the edges: a graph without edges says so instead of drawing a ring of dots."""
    t = f"{analysis.edge_threshold:g}"
    if not analysis.edges:
        return f"no edges at overlap >= {t} (no two subsets share enough images)"
    note = f"{len(analysis.edges)} edges (overlap >= {t})"
    if lay.isolated:
        note += f"; {len(lay.isolated)} without an edge in the grid below"
    return note


def _nodes_and_labels(
    ax, members, lay: Layout, patheffects, *, face, edgecolors, linewidths, alpha, label_colours=None
):
    sizes = np.array([len(members[s]) for s in lay.names], dtype=np.float64)
    # area grows with the square root of the image count, so a 5,000-image subset does not hide the rest
    area = 30.0 + 400.0 * np.sqrt(sizes / max(sizes.max(), 1.0))
    xy = lay.xy
    ax.scatter(xy[:, 0], xy[:, 1], s=area, c=face, alpha=alpha, edgecolors=edgecolors, linewidths=linewidths, zorder=3)
    n = len(lay.names)
    font = 9 if n <= 60 else 8 if n <= 200 else 7  # never below 7 pt: smaller text is unreadable
    # a white halo keeps labels readable where edges and nodes crowd (dense hubs)
    halo = [patheffects.withStroke(linewidth=2.5, foreground="white")]
    grid = set(lay.isolated)
    for i, (s, (x, y)) in enumerate(zip(lay.names, xy)):
        # on the grid the label goes under the dot, so long context names do not cover their neighbours
        offset = dict(xytext=(0, -14), textcoords="offset points", va="top") if s in grid else dict(va="center")
        ax.annotate(
            _short(s),
            (x, y),
            fontsize=font,
            ha="center",
            zorder=4,
            path_effects=halo,
            color=label_colours[i] if label_colours is not None else "black",
            annotation_clip=False,
            clip_on=False,
            **offset,
        )


def _finish(ax, lay: Layout) -> None:
    if len(lay.isolated) == len(lay.names):
        ax.set_aspect("equal")  # a square grid, not one stretched to the figure
    ax.set_axis_off()
    ax.autoscale_view()
    ax.margins(0.12)  # room for the labels of outer nodes (text is not counted by autoscale)


def _community_colours(colormaps, comm: Sequence[int]) -> list:
    cmap = colormaps["tab20"]
    # tab20 comes in light/dark pairs: use the 10 dark shades first so neighbouring ids differ
    return [cmap((2 * int(c)) % 20 + (int(c) // 10) % 2) for c in comm]


def plot_class(analysis, members: Mapping[str, np.ndarray], path: str | os.PathLike) -> list[str]:
    """Write the meta-graph of one class (a ``ClassAnalysis``) as a PNG at ``path``.

    Returns the legend's entries (one per community colour, or one line for a graph without edges,
    where every subset is its own community), in the order drawn.
    """
    colormaps, patheffects, _canvas, LineCollection, _figure, Line2D = _matplotlib()
    lay = layout(analysis.subsets, analysis.edges)
    names, xy = lay.names, lay.xy
    index = {s: i for i, s in enumerate(names)}
    comm = np.array([analysis.communities[s] for s in names])
    no_edges = not analysis.edges
    # without edges every subset is its own community: one neutral colour says more than 18 random ones
    colours = ["tab:blue"] * len(names) if no_edges else _community_colours(colormaps, comm)

    fig = new_figure(_figure_size(lay))
    ax = fig.add_subplot(1, 1, 1)
    internal, external, in_colours = [], [], []
    for a, b, _w in analysis.edges:
        seg = (xy[index[a]], xy[index[b]])
        if analysis.communities[a] == analysis.communities[b]:
            internal.append(seg)
            in_colours.append(colours[index[a]])
        else:
            external.append(seg)
    if external:
        ax.add_collection(LineCollection(external, colors="silver", linewidths=0.5, zorder=1))
    if internal:
        ax.add_collection(LineCollection(internal, colors=in_colours, linewidths=0.8, alpha=0.7, zorder=2))
    _nodes_and_labels(ax, members, lay, patheffects, face=colours, edgecolors="black", linewidths=0.3, alpha=0.85)
    legend, handles = [], []
    if no_edges:
        legend.append(f"{len(names)} subsets, each its own community (no edges)")
        handles.append(_dot(Line2D, colours[0], 8))
    else:
        for c in sorted(set(comm.tolist())):
            k = int((comm == c).sum())
            legend.append(f"community {c}: {k} subset{'s' if k != 1 else ''}")
            handles.append(_dot(Line2D, colours[int(np.flatnonzero(comm == c)[0])], 8))
    ax.legend(
        handles,
        legend,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=9,
        frameon=False,
        title="colour = meta-graph community",
        title_fontsize=9,
    )
    n_comm = len(set(comm.tolist()))
    subject = analysis.subject or SubsetName.parse(names[0]).subject
    communities = (
        "every subset its own community"
        if no_edges
        else f"{n_comm} communit{'ies' if n_comm != 1 else 'y'} ({analysis.community_method})"
    )
    ax.set_title(
        f"{subject}: {len(names)} subsets, {_edge_note(analysis, lay)}\n{communities}, "
        f"embedding: {analysis.embedding_status}",
        fontsize=10,
    )
    _finish(ax, lay)
    save_png(fig, path)
    return legend


def _group_callouts(ax, xy: np.ndarray, index: Mapping[str, int], group_labels, fig_height: float) -> None:
    """A boxed label per group at the left or right of the graph (the side of its members' mean
    position), joined to that position by a thin line; labels on one side are pushed apart so
    that none covers another, and none covers the nodes."""
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = np.maximum(hi - lo, 1e-9)
    centre = (lo + hi) / 2
    # vertical room one two-line label needs, in data units (axes ~ 75% of the figure height)
    gap = 34.0 / (0.75 * fig_height * 72.0) * span[1] * 1.24
    sides: dict[bool, list[tuple[float, float, float, str]]] = {False: [], True: []}
    for text, group in group_labels:
        pts = np.array([xy[index[s]] for s in group if s in index])
        if len(pts):
            x, y = pts.mean(axis=0)
            sides[bool(x >= centre[0])].append((y, x, y, text))
    for right, items in sides.items():
        placed: list[float] = []
        for y_target, x, y, text in sorted(items, reverse=True):  # top to bottom
            y_text = min(y_target, placed[-1] - gap) if placed else y_target
            placed.append(y_text)
            x_text = hi[0] + 0.25 * span[0] if right else lo[0] - 0.25 * span[0]
            # the leader line goes behind the nodes (zorder 3), the label box above everything
            ax.plot([x, x_text], [y, y_text], color="dimgray", linewidth=0.7, zorder=2.5)
            ax.annotate(
                text,
                (x_text, y_text),
                fontsize=8,
                ha="left" if right else "right",
                va="center",
                zorder=5,
                annotation_clip=False,
                bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="gray"),
            )


@dataclass(frozen=True)
class RoleStyle:
    """How the subsets of one role are drawn in ``plot_roles`` (legend text and fill colour)."""

    label: str
    colour: str
    word: str = ""  # the colour in words, for captions ("blue")


OTHER_COLOUR = "#d9d9d9"  # subsets that take no part in the task: faded grey


def plot_roles(
    analysis,
    members: Mapping[str, np.ndarray],
    roles: Mapping[str, str],
    styles: Mapping[str, RoleStyle],
    path: str | os.PathLike,
    *,
    title: str,
    group_labels: Sequence[tuple[str, Sequence[str]]] = (),
) -> list[str]:
    """The class meta-graph (same layout as ``plot_class``) with each subset filled by its role.

    ``roles`` maps subset -> a key of ``styles`` (missing subsets are "other": faded grey); rings
    are thin and neutral (the community colours are in ``plot_class``'s picture). ``group_labels`` (text, member subsets)
    put a boxed label at the mean position of each group's members. Returns the legend entries.
    """
    _colormaps, patheffects, _canvas, LineCollection, _figure, Line2D = _matplotlib()
    lay = layout(analysis.subsets, analysis.edges)
    names, xy = lay.names, lay.xy
    index = {s: i for i, s in enumerate(names)}
    # thin rings only: community colours would clash with the role fills (the community picture has them)
    rings = ["black" if s in roles else "darkgray" for s in names]
    face = [styles[roles[s]].colour if s in roles else OTHER_COLOUR for s in names]
    labels = ["black" if s in roles else "dimgray" for s in names]
    size = _figure_size(lay)
    fig = new_figure(size)
    ax = fig.add_subplot(1, 1, 1)
    # edges between two subsets of the task stand out; the rest stay in the background
    strong = [(xy[index[a]], xy[index[b]]) for a, b, _w in analysis.edges if a in roles and b in roles]
    weak = [(xy[index[a]], xy[index[b]]) for a, b, _w in analysis.edges if not (a in roles and b in roles)]
    if weak:
        ax.add_collection(LineCollection(weak, colors="gainsboro", linewidths=0.5, zorder=1))
    if strong:
        ax.add_collection(LineCollection(strong, colors="gray", linewidths=0.7, alpha=0.8, zorder=2))
    _nodes_and_labels(
        ax,
        members,
        lay,
        patheffects,
        face=face,
        edgecolors=rings,
        linewidths=[0.6 if s in roles else 0.4 for s in names],
        alpha=0.95,
        label_colours=labels,
    )
    _group_callouts(ax, xy, index, group_labels, size[1])
    used = [k for k in styles if k in set(roles.values())]
    legend = [styles[k].label for k in used]
    handles = [_dot(Line2D, styles[k].colour, 9) for k in used]
    n_other = sum(1 for s in names if s not in roles)
    if n_other:
        legend.append(f"other subsets ({n_other})")
        handles.append(_dot(Line2D, OTHER_COLOUR, 9))
    # below the graph: the sides hold the group callouts
    below = 28.0 / (0.77 * size[1] * 72.0) if lay.isolated else 0.0  # under the grid's labels
    ax.legend(
        handles,
        legend,
        loc="upper center",
        bbox_to_anchor=(0.5, -below),
        ncol=len(handles),
        fontsize=9,
        frameon=False,
        title="fill = role of the subset in this task",
        title_fontsize=9,
    )
    ax.set_title(f"{title}\n{len(names)} subsets, {_edge_note(analysis, lay)}", fontsize=10)
    _finish(ax, lay)
    save_png(fig, path)
    return legend
