"""Meta-graph pictures: one PNG per class, node size ~ subset size, colour = community.

matplotlib is the optional ``plot`` extra, so it is imported only when a picture is drawn.
The layout is a seeded force-directed (spring) layout, as in the original code's pictures, so the
same analysis always gives the same picture.
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.fsutil import atomic_file

LAYOUT_SEED = 1234  # the original code's spring_layout seed


def spring_positions(n: int, edges: list[tuple[int, int, float]], seed: int = LAYOUT_SEED, iterations: int = 50) -> np.ndarray:
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


def plot_class(analysis, members: Mapping[str, np.ndarray], path: str | os.PathLike) -> list[str]:
    """Write the meta-graph of one class (a ``ClassAnalysis``) as a PNG at ``path``.

    Returns the legend's entries (one per community colour), in the order drawn.
    """
    try:
        from matplotlib import colormaps
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib import patheffects
    except ImportError as exc:
        raise MetashiftError(
            f"cannot draw meta-graph pictures: matplotlib is not installed ({exc})",
            "pip install 'metashift-hf[plot]' or build without pictures",
        ) from exc
    names = analysis.subsets
    index = {s: i for i, s in enumerate(names)}
    xy = spring_positions(len(names), [(index[a], index[b], w) for a, b, w in analysis.edges])
    comm = np.array([analysis.communities[s] for s in names])
    cmap = colormaps["tab20"]
    # tab20 comes in light/dark pairs: use the 10 dark shades first so neighbouring ids differ
    colours = [cmap((2 * int(c)) % 20 + (int(c) // 10) % 2) for c in comm]
    sizes = np.array([len(members[s]) for s in names], dtype=np.float64)
    # area grows with the square root of the image count, so a 5,000-image subset does not hide the rest
    area = 30.0 + 400.0 * np.sqrt(sizes / sizes.max())

    n = len(names)
    side = float(min(20.0, max(7.0, 0.35 * np.sqrt(n) * 4)))
    fig = Figure(figsize=(side, side * 0.75), dpi=100)
    FigureCanvasAgg(fig)
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
    ax.scatter(xy[:, 0], xy[:, 1], s=area, c=colours, alpha=0.85, edgecolors="black", linewidths=0.3, zorder=3)
    font = 9 if n <= 60 else 8 if n <= 200 else 7  # never below 7 pt: smaller text is unreadable
    # a white halo keeps labels readable where edges and nodes crowd (dense hubs)
    halo = [patheffects.withStroke(linewidth=2.5, foreground="white")]
    for s, (x, y) in zip(names, xy):
        label = s[s.find("(") + 1 : -1] if s.endswith(")") and "(" in s else s
        ax.annotate(label, (x, y), fontsize=font, ha="center", va="center", zorder=4, path_effects=halo,
                    annotation_clip=False, clip_on=False)
    legend = []
    handles = []
    for c in sorted(set(comm.tolist())):
        k = int((comm == c).sum())
        legend.append(f"community {c}: {k} subset{'s' if k != 1 else ''}")
        handles.append(Line2D([], [], marker="o", linestyle="", markersize=8, markeredgecolor="black",
                              markeredgewidth=0.3, color=colours[int(np.flatnonzero(comm == c)[0])]))
    ax.legend(handles, legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9, frameon=False,
              title="colour = meta-graph community", title_fontsize=9)
    n_comm = len(set(comm.tolist()))
    ax.set_title(
        f"{analysis.subject or names[0].split('(')[0]}: {n} subsets, {len(analysis.edges)} edges "
        f"(overlap >= {analysis.edge_threshold:g})\n{n_comm} communities ({analysis.community_method}), "
        f"embedding: {analysis.embedding_status}",
        fontsize=10,
    )
    ax.set_axis_off()
    ax.autoscale_view()
    ax.margins(0.12)  # room for the labels of outer nodes (text is not counted by autoscale)
    with atomic_file(path, "wb") as f:
        # no Software/date metadata: the same analysis gives the same bytes
        fig.savefig(f, format="png", metadata={"Software": None}, bbox_inches="tight", pad_inches=0.1)
    return legend
