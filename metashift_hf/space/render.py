"""HTML of every Space view, from the data layer's records. Every text that comes from the data (task, class,
context, model names, messages) goes through :func:`esc` (``html.escape`` with quotes) and every link's values
through :func:`href`, so a name holding markup is shown as text and never acts.

Views link to each other with query strings (``?view=task&task=ID``), which the app reads on load: a link works
without JavaScript and a view can be bookmarked.
"""

from __future__ import annotations

import html
import math
import re
from typing import Callable, Iterable, Mapping
from urllib.parse import urlencode

import pandas as pd

from ..core.errors import MetashiftError
from .graphs import ClassGraph, SubsetDistance, Thumbnail
from .index import TaskPage
from .relation import Relation
from .results import Drilldown
from .task_view import CardFacts


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
NO_COMMUNITY = "#b0b0b0"
# Gradio's theme variables, so a table header or a note stays readable in the dark theme (?__theme=dark)
CSS = """
<style>
.ms-table{border-collapse:collapse;font-size:13px;margin:6px 0;color:var(--body-text-color)}
.ms-table th,.ms-table td{border:1px solid var(--border-color-primary);padding:3px 7px;text-align:left;vertical-align:top}
.ms-table th{background:var(--background-fill-secondary);color:var(--body-text-color)}
.ms-note{color:var(--body-text-color-subdued);font-size:13px}
.ms-error{color:var(--error-text-color)}
.ms-thumbs img{height:96px;margin:3px;border:1px solid var(--border-color-primary)}
.ms-code{font-family:monospace;background:var(--code-background-fill);color:var(--body-text-color);padding:2px 5px;
display:block;white-space:pre-wrap;margin:3px 0}
.ms-bug{color:var(--error-text-color);font-weight:bold}
.ms-about{display:flex;gap:14px;align-items:center;flex-wrap:wrap}
.ms-about svg{flex:0 0 auto;max-width:100%}
</style>
"""
NO_RESULTS = '<p class="ms-note">No results: run the Space with --results (a zoo folder or results repo).</p>'
CITATION = "https://arxiv.org/abs/2202.06523"


def esc(value: object) -> str:
    """Text from the data as HTML text (quotes too: safe inside an attribute)."""
    return html.escape("" if value is None else str(value), quote=True)


def href(**params: object) -> str:
    """A link to a view of this Space (``?view=...``), escaped for an attribute."""
    return esc("?" + urlencode({k: str(v) for k, v in params.items() if v not in (None, "")}))


def fmt(value: object, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return esc(value)


def error_html(exc: BaseException) -> str:
    """A refusal as the CLI words it (``error:`` / ``fix:``), escaped."""
    if isinstance(exc, MetashiftError):
        return f'<p class="ms-error">error: {esc(exc.what)}<br>fix: {esc(exc.fix)}</p>'
    return f'<p class="ms-error">error: {esc(type(exc).__name__)}: {esc(exc)}</p>'


def table(
    df: pd.DataFrame,
    *,
    links: Mapping[str, Callable[[object], str]] | None = None,
    cell_class: Callable[[str, object], str] | None = None,
    caption: str = "",
) -> str:
    """A DataFrame as an escaped HTML table; ``links[col](value)`` makes that column's cells links."""
    links = links or {}
    head = "".join(f"<th>{esc(c)}</th>" for c in df.columns)
    body = []
    for row in df.itertuples(index=False):
        cells = []
        for col, value in zip(df.columns, row):
            text = fmt(value.item() if hasattr(value, "item") else value)
            if col in links and text not in ("", "–"):
                text = f'<a href="{links[col](value)}" target="_self">{text}</a>'
            klass = cell_class(col, value) if cell_class else ""
            cells.append(f'<td class="{klass}">{text}</td>' if klass else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="ms-table">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _task_link(task: object) -> str:
    return href(view="task", task=task)


def page(df: pd.DataFrame, *, page: int = 1, per_page: int = 50, total: int | None = None, what: str = "row"):
    """One page of a table (floats rounded for reading) and the note saying which rows it shows."""
    n = len(df)
    pages = max(1, math.ceil(n / per_page))
    page = min(max(1, int(page)), pages)
    part = df.iloc[(page - 1) * per_page : page * per_page].round(3).reset_index(drop=True)
    shown = f"{(page - 1) * per_page + 1 if n else 0}–{min(page * per_page, n)} of {n:,} {what}(s)"
    if total is not None and total != n:
        shown += f" (filtered from {total:,})"
    return part, CSS + f'<p class="ms-note">{esc(shown)}, page {page} of {pages}</p>'


def _markdown_inline(text: str) -> str:
    """The cards' one-sentence Markdown (``**bold**``, ```code```) as HTML, escaped first."""
    out = esc(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


def task_page_html(page: TaskPage) -> str:
    e = page.entry
    classes = ", ".join(f'<a href="{href(view="classes", cls=c, task=e.task_id)}">{esc(c)}</a>' for c in e.classes)
    sizes = ", ".join(f"{esc(s)} {n:,}" for s, n in e.split_sizes.items())
    return (
        CSS
        + f"<h3>Task {esc(e.task_id)}</h3>"
        + f"<p>{_markdown_inline(page.sentence)}</p>"
        + f"<p>Family: {esc(e.family)} · shift: {esc(page.shift_words)} (declared {esc(e.shift_type)}, measured "
        + f"{esc(e.measured or '–')}) · level: {esc(e.level or '–')} · classes: {classes} · rows: {sizes}</p>"
        + "<h4>Groups</h4>"
        + table(page.groups)
        + "<h4>Measured shift (train against each split)</h4>"
        + table(page.measured)
        + f'<p class="ms-note">{esc(page.measured_note)}</p>'
        + "<h4>Use it</h4>"
        + f'<code class="ms-code">from datasets import load_dataset\nds = {esc(page.load_line)}</code>'
        + f'<code class="ms-code">{esc(page.evaluate_line)}</code>'
    )


def _markdown_links(text: str) -> str:
    """A card paragraph's Markdown as HTML, escaped first: ``[text](https://...)`` links, ``**bold**`` and
    ```code``` only."""
    out = esc(text)
    out = re.sub(r"\[([^\]]+)\]\((https?://[^)\s]+)\)", r'<a href="\2" target="_blank" rel="noopener">\1</a>', out)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", out)


def task_data_html(facts: "CardFacts", links: Mapping[str, str]) -> str:
    """The task's data as its card states it: licence, whether it is synthetic, attribution; its Hub pages."""
    synthetic = (
        '<p class="ms-error"><strong>Synthetic data:</strong> these images and scene graphs were generated '
        f"({esc(facts.provenance)}), not photographed: no figure from them is a MetaShift result.</p>"
        if facts.synthetic
        else ""
    )
    pages = " · ".join(f'<a href="{esc(u)}" target="_blank" rel="noopener">{esc(k)}</a>' for k, u in links.items())
    return (
        CSS
        + "<h4>Data</h4>"
        + synthetic
        + f"<p>Licence: {esc(facts.license_words)} · provenance: {esc(facts.provenance or 'not stated')}"
        + (f" · on the Hub: {pages}" if pages else "")
        + "</p>"
        + (f'<p class="ms-note">{_markdown_links(facts.attribution)}</p>' if facts.attribution else "")
    )


def colour(community: int) -> str:
    return NO_COMMUNITY if community < 0 else PALETTE[community % len(PALETTE)]


def graph_svg(graph: ClassGraph, *, selected: str = "", width: int = 720, height: int = 460) -> str:
    """The class's meta-graph: nodes sized by images and coloured by community, edges by overlap; each node links
    to its page (its images and distances)."""
    pad = 40
    xy = {n.subset: (pad + n.x * (width - 2 * pad), pad + n.y * (height - 2 * pad)) for n in graph.nodes}
    biggest = max((n.n_images for n in graph.nodes), default=1) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{esc(f"meta-graph of {graph.cls} in task {graph.task_id}")}" '
        'style="background:#fff;border:1px solid #ddd">'
    ]
    for a, b, w in graph.edges:
        (x1, y1), (x2, y2) = xy[a], xy[b]
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#888" '
            f'stroke-width="{0.5 + 3 * w:.2f}" stroke-opacity="0.6"><title>{esc(a)} – {esc(b)}: {w:.3f}</title></line>'
        )
    for n in graph.nodes:
        x, y = xy[n.subset]
        r = 5 + 16 * math.sqrt(n.n_images / biggest)
        ring = ' stroke="#000" stroke-width="3"' if n.subset == selected else ' stroke="#fff" stroke-width="1"'
        link = href(view="classes", cls=graph.cls, task=graph.task_id, node=n.subset)
        parts.append(
            f'<a href="{link}" target="_self" class="ms-node"><circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" '
            f'fill="{colour(n.community)}"{ring}><title>{esc(n.subset)}: {n.n_images:,} images, community '
            f"{n.community}</title></circle>"
            f'<text x="{x:.1f}" y="{y + r + 11:.1f}" font-size="11" text-anchor="middle">{esc(n.context)}</text></a>'
        )
    parts.append("</svg>")
    communities = sorted({n.community for n in graph.nodes})
    legend = " ".join(
        f'<span style="color:{colour(c)}">●</span> {"none" if c < 0 else f"community {c}"}' for c in communities
    )
    edges = (
        f"{len(graph.edges)} overlap edge(s)"
        if graph.edges_published
        else "edges not published (class with more subsets than the export lists edges for)"
    )
    return (
        CSS
        + f"<h3>Meta-graph of {esc(graph.cls)} <small>(task {esc(graph.task_id)})</small></h3>"
        + f'<p class="ms-note">{len(graph.nodes)} context subset(s), {esc(edges)}. Node size: images; colour: '
        + f"community. Pick a node for its images and distances. {legend}</p>"
        + "".join(parts)
    )


def thumbnails_html(images: Iterable[Thumbnail]) -> str:
    imgs = [
        f'<img src="{i.data_uri}" alt="{esc(i.image_id)}" title="{esc(i.image_id)}" loading="lazy">' for i in images
    ]
    return '<div class="ms-thumbs">' + ("".join(imgs) or '<p class="ms-note">no image of this subset</p>') + "</div>"


def _distance_rows(rows: Iterable[SubsetDistance]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "subset": d.b,
                "community": d.community_b,
                "to largest community": d.to_largest_b,
                "overlap": d.overlap,
                "path": d.status,
            }
            for d in rows
        ],
        columns=["subset", "community", "to largest community", "overlap", "path"],
    )


def node_html(graph: ClassGraph, subset: str, images: Iterable[Thumbnail], rows: list[SubsetDistance]) -> str:
    n = graph.node(subset)
    return (
        CSS
        + f"<h4>{esc(n.subset)}</h4>"
        + f"<p>{n.n_images:,} images in the build; community {n.community}; distance to the largest community "
        + f"{fmt(n.distance_to_largest)}</p>"
        + thumbnails_html(images)
        + "<h4>Against the other subsets of the class</h4>"
        + table(_distance_rows(rows))
        + f'<p class="ms-note">Distances to the largest community: {esc(rows[0].rule if rows else "")}.</p>'
    )


def distance_html(d: SubsetDistance, pair: str | None = None, why: str = "", repo: str = "") -> str:
    """Two subsets: d between them (the repo's published pairwise distance, ``pair``), then what the meta-graph
    facts say about each (community, distance to the largest community) and the overlap edges."""
    answer = (
        f'<p class="ms-d">d({esc(d.a)}, {esc(d.b)}) = <strong>{esc(pair)}</strong></p>'
        f'<p class="ms-note">The task repo\'s published pairwise distance: what <code>metashift-hf distance --task '
        f"{esc(repo)} --value {esc(repr(d.a))} {esc(repr(d.b))}</code> prints.</p>"
        if pair is not None
        else f'<p class="ms-note">No pairwise distance: {esc(why)}</p>'
    )
    return (
        CSS
        + f"<h4>{esc(d.a)} and {esc(d.b)}</h4>"
        + answer
        + table(
            pd.DataFrame(
                [
                    {"subset": d.a, "community": d.community_a, "to largest community": d.to_largest_a},
                    {"subset": d.b, "community": d.community_b, "to largest community": d.to_largest_b},
                ]
            )
        )
        + f"<p>Overlap edge: {fmt(d.overlap)} · path of overlap edges: <strong>{esc(d.status)}</strong> · "
        + f"same community: {'yes' if d.community_a == d.community_b and d.community_a >= 0 else 'no'}</p>"
        + f'<p class="ms-note">Distances to the largest community: rule {esc(d.rule)}.</p>'
    )


MAX_CHART_ROWS = 60  # contexts drawn in a drill-down chart (the table below lists them all)


def interval_chart(groups: pd.DataFrame, *, level: str = "context", width: int = 640) -> str:
    """Accuracy per ``level`` row as an SVG chart: a bar to the accuracy and the Wilson 95% interval as a whisker
    (the intervals of :func:`metashift_hf.scoring.stats.wilson_interval`, computed by the data layer); bugs red."""
    rows = groups[groups["level"] == level].head(MAX_CHART_ROWS)
    if rows.empty:
        return ""
    label_w, row_h, top = 190, 18, 22
    plot_w = width - label_w - 20
    x = lambda v: label_w + plot_w * float(v)  # noqa: E731
    height = top + row_h * len(rows) + 8
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="accuracy per {esc(level)} with Wilson 95% intervals" class="ms-chart" '
        'font-size="11" fill="currentColor">'
    ]
    for t in (0, 0.25, 0.5, 0.75, 1):
        parts.append(
            f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{height - 6}" stroke="#999" '
            f'stroke-opacity="0.4"/><text x="{x(t):.1f}" y="{top - 8}" text-anchor="middle">{t:g}</text>'
        )
    for i, r in enumerate(rows.itertuples(index=False)):
        y = top + i * row_h
        bug = str(r.bug).lower() in ("true", "1")
        fill = "#d62728" if bug else "#1f77b4"
        acc = 0.0 if pd.isna(r.accuracy) else float(r.accuracy)
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{esc(r.name)} (n={fmt(r.n)})</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{plot_w * acc:.1f}" height="{row_h - 7}" fill="{fill}" '
            f'fill-opacity="0.75"><title>{esc(r.name)}: {fmt(r.accuracy)} [{fmt(r.ci_low)}, {fmt(r.ci_high)}]'
            "</title></rect>"
        )
        if not (pd.isna(r.ci_low) or pd.isna(r.ci_high)):
            yc = y + row_h / 2
            parts.append(
                f'<line x1="{x(r.ci_low):.1f}" y1="{yc:.1f}" x2="{x(r.ci_high):.1f}" y2="{yc:.1f}" '
                f'stroke="currentColor" stroke-width="1.5" class="ms-ci"/>'
            )
    parts.append("</svg>")
    more = len(groups[groups["level"] == level]) - len(rows)
    note = f'<p class="ms-note">{more} more {esc(level)}(s) in the table below.</p>' if more > 0 else ""
    return (
        f"<h4>Accuracy per {esc(level)} (bars) with Wilson 95% intervals (lines); red: a context bug</h4>"
        + "".join(parts)
        + note
    )


def relation_html(rel: "Relation", *, width: int = 560, height: int = 300) -> str:
    """Each test context's accuracy (Wilson 95% interval) against its distance to the training subsets, as an
    SVG scatter, with Spearman's rank correlation and the points as a table."""
    pts = rel.points.dropna(subset=["distance", "accuracy"])
    head = "<h4>Accuracy against distance to training (test contexts)</h4>"
    corr = (
        f'<p class="ms-rho">Spearman rank correlation ρ = <strong>{rel.rho:.3f}</strong> (p = {rel.p_value:.3g}, '
        f"{len(pts)} contexts); the paper: farther test contexts score lower (ρ &lt; 0).</p>"
        if rel.rho is not None
        else ""
    )
    note = f'<p class="ms-note">{esc(rel.note)}</p>' if rel.note else ""
    if pts.empty:
        return head + corr + note
    pad = 40
    lo, hi = float(pts["distance"].min()), float(pts["distance"].max())
    if hi == lo:  # one distance: the points in the middle
        lo, hi = lo - 0.5, hi + 0.5
    span = hi - lo
    x = lambda v: pad + (width - 2 * pad) * (float(v) - lo) / span  # noqa: E731
    y = lambda v: height - pad - (height - 2 * pad) * float(v)  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="accuracy against distance to training" class="ms-relation" font-size="11" '
        'fill="currentColor">',
        f'<line x1="{pad}" y1="{y(0)}" x2="{width - pad}" y2="{y(0)}" stroke="#999"/>',
        f'<line x1="{pad}" y1="{y(0)}" x2="{pad}" y2="{y(1)}" stroke="#999"/>',
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">distance to the nearest training subset '
        f"({lo:.3f} – {hi:.3f})</text>",
        f'<text x="12" y="{height / 2}" transform="rotate(-90 12 {height / 2})" text-anchor="middle">accuracy</text>',
    ]
    for r in pts.to_dict("records"):
        cx, cy = x(r["distance"]), y(r["accuracy"])
        if not (pd.isna(r["ci_low"]) or pd.isna(r["ci_high"])):
            parts.append(
                f'<line x1="{cx:.1f}" y1="{y(r["ci_low"]):.1f}" x2="{cx:.1f}" y2="{y(r["ci_high"]):.1f}" '
                'stroke="currentColor" class="ms-ci"/>'
            )
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="#1f77b4" class="ms-point"><title>{esc(r["context"])}: '
            f"accuracy {fmt(r['accuracy'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}], d {fmt(r['distance'])} to "
            f"{esc(r['nearest'])}</title></circle>"
        )
    parts.append("</svg>")
    return head + corr + "".join(parts) + note + table(rel.points)


def drilldown_html(dd: Drilldown) -> str:
    row = dd.row
    head = (
        f"<h4>{esc(dd.model)} on {esc(dd.task)}</h4><p>balanced accuracy {fmt(row.get('balanced_accuracy'))} on "
        f"{esc(row.get('split'))}; worst group {esc(row.get('worst_group'))} "
        f"{fmt(row.get('worst_group_accuracy'))}</p>"
    )
    if dd.note:
        return CSS + head + f'<p class="ms-note">{esc(dd.note)}</p>'
    bugs = (
        table(dd.bugs, caption="context bugs (significantly below the rest of their class)")
        if not dd.bugs.empty
        else '<p class="ms-note">no context bug found</p>'
    )
    return (
        CSS
        + head
        + interval_chart(dd.groups)
        + bugs
        + table(
            dd.groups,
            cell_class=lambda col, v: "ms-bug" if col == "bug" and str(v).lower() in ("true", "1") else "",
            caption="accuracy per group, class and context (Wilson 95% intervals)",
        )
    )


# One picture for the About paragraph: a class's context subsets, the training ones and a test one at a distance
ABOUT_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 230 110" width="230" height="110" role="img" '
    'aria-label="MetaShift: subsets of one class by context; train on some, test on another at a distance">'
    '<g font-size="10" text-anchor="middle" fill="currentColor">'
    '<line x1="45" y1="40" x2="100" y2="30" stroke="#888" stroke-width="2"/>'
    '<line x1="45" y1="40" x2="70" y2="85" stroke="#888" stroke-width="2"/>'
    '<line x1="100" y1="30" x2="185" y2="60" stroke="#888" stroke-dasharray="4 3"/>'
    '<circle cx="45" cy="40" r="16" fill="#1f77b4"/><text x="45" y="70">cat(sofa)</text>'
    '<circle cx="100" cy="30" r="12" fill="#1f77b4"/><text x="100" y="12">cat(bed)</text>'
    '<circle cx="70" cy="85" r="10" fill="#1f77b4"/><text x="70" y="106">cat(couch)</text>'
    '<circle cx="185" cy="60" r="14" fill="#ff7f0e"/><text x="185" y="90">cat(grass)</text>'
    '<text x="150" y="38">distance d</text></g></svg>'
)


def header_html(source: str, n_tasks: int, n_classes: int, n_results: int) -> str:
    """The title, what this Space serves, and the About paragraph (one picture, the linked citation)."""
    return (
        CSS
        + "<h2>MetaShift: tasks, meta-graphs and leaderboards</h2>"
        + f'<div class="ms-about">{ABOUT_SVG}<p><strong>About MetaShift.</strong> MetaShift groups the images of '
        + "each class by their context (<em>cat(sofa)</em>, <em>cat(grass)</em>): each group is a subset, and "
        + "subsets sharing images are joined in the class's meta-graph. Training on some contexts and testing "
        + "on another gives a distribution shift whose size is the distance <em>d</em> between them; the paper "
        + "finds accuracy falls as <em>d</em> grows. "
        + f'<a href="{CITATION}" target="_blank" rel="noopener">Liang &amp; Zou, MetaShift: A Dataset of Datasets '
        + "for Evaluating Contextual Distribution Shifts and Training Conflicts, ICLR 2022</a>.</p></div>"
        + f'<p class="ms-note">{n_tasks:,} task(s) and {n_classes:,} class(es) from {esc(source)}; '
        + f"{n_results:,} result row(s).</p>"
    )
