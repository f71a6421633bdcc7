"""A task card's own pictures: each class's meta-graph with the task's groups highlighted by role,
and a grid of example images per group (as the MetaShift paper's figures show).

Both are drawn at export time into ``<repo>/images/`` (``builders.plots`` for the graphs, matplotlib
for the grid). matplotlib is the optional ``plot`` extra: without it nothing is drawn and the card
says so. Every picture is deterministic: the same task and artifact give the same PNG bytes (seeded
layout and example choice, no PNG metadata).
"""

from __future__ import annotations

import io
import logging
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from metashift_hf.builders import plots
from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.names import id_slug
from metashift_hf.hub.task_rows import dataset_images
from metashift_hf.tasks.group_distances import group_subsets
from metashift_hf.tasks.plan import SPLITS
from metashift_hf.tasks.spec import ShiftSpec


logger = logging.getLogger(__name__)

# Role of a subset in a task, in legend order (Okabe-Ito colours: distinct for colour-blind readers).
ROLE_STYLES: dict[str, plots.RoleStyle] = {
    "train": plots.RoleStyle("train groups", "#0072B2", "blue"),
    "test": plots.RoleStyle("test groups", "#D55E00", "red"),
    "train+test": plots.RoleStyle("train and test groups", "#CC79A7", "pink"),
    "id_test": plots.RoleStyle("id_test groups only", "#009E73", "green"),
    "validation": plots.RoleStyle("validation groups only", "#E69F00", "orange"),
}
SPLIT_COLOURS = {split: ROLE_STYLES[split].colour for split in SPLITS}  # the example grid's row labels
EXAMPLES_PER_GROUP = 5
MAX_EXAMPLE_ROWS = 24  # a taller grid is no longer a picture one reads on a card
THUMB_PIXELS = 160


@dataclass(frozen=True)
class Picture:
    """One picture of a card: its path in the repo (``images/...``), alt text and one-line caption."""

    file: str
    alt: str
    caption: str

    def markdown(self) -> str:
        return f"![{self.alt}]({self.file})\n\n*{self.caption}*"


@dataclass(frozen=True)
class TaskPictures:
    """What ``draw_task_pictures`` wrote: per class the role graph, and the example grid."""

    graphs: dict[str, Picture] = field(default_factory=dict)
    examples: Picture | None = None


# -- roles ---------------------------------------------------------------------------------------


def subset_splits(spec: ShiftSpec, cls: str, kept: set[str]) -> dict[str, tuple[str, ...]]:
    """Subset of class ``cls`` -> the splits whose groups hold it (train, validation, test, id_test order)."""
    found: dict[str, list[str]] = {}
    for split, groups in spec.groups().items():
        for g in groups:
            if g.cls != cls:
                continue
            for s in group_subsets(g, kept):
                if split not in found.setdefault(s, []):
                    found[s].append(split)
    return {s: tuple(sorted(v, key=SPLITS.index)) for s, v in sorted(found.items())}


def role_of(splits: tuple[str, ...] | list[str]) -> str:
    """The role drawn for a subset in these splits: train and/or test first; validation or id_test
    only where a subset is in neither (where those groups differ from the train groups)."""
    s = set(splits)
    if "train" in s and "test" in s:
        return "train+test"
    for role in ("train", "test", "id_test", "validation"):
        if role in s:
            return role
    raise ValueError(f"no split given for a subset: {splits!r}")


def subset_roles(spec: ShiftSpec, cls: str, kept: set[str]) -> dict[str, str]:
    """Kept subset of ``cls`` -> its role key in ``ROLE_STYLES``; subsets of no group are absent ("other")."""
    return {s: role_of(splits) for s, splits in subset_splits(spec, cls, kept).items()}


# -- file names ----------------------------------------------------------------------------------


def graph_file(task_id: str, cls: str) -> str:
    """Hub-safe name of a class's role graph (tasks share ``images/`` in the one-repo layout)."""
    return f"images/{task_id}-{id_slug(cls)}-groups.png"


def examples_file(task_id: str) -> str:
    return f"images/{task_id}-examples.png"


# -- the role graphs -----------------------------------------------------------------------------


def _group_labels(spec: ShiftSpec, cls: str, kept: set[str]) -> list[tuple[str, list[str]]]:
    """One label per group of the class: its name and its rows per split (``train 100 · test 72``)."""
    counts: dict[str, list[str]] = {}
    members: dict[str, list[str]] = {}
    for split, groups in spec.groups().items():
        for g in groups:
            subsets = group_subsets(g, kept) if g.cls == cls else []
            if subsets:
                members.setdefault(g.group, subsets)
                counts.setdefault(g.group, []).append(f"{split} {g.n:,}")
    return [(f"{name}\n{' · '.join(counts[name])}", members[name]) for name in members]


def _split_words(spec: ShiftSpec, cls: str, kept: set[str]) -> str:
    """``train `a`, `b`; test `c``` (validation / id_test groups only where they add a group)."""
    parts, named = [], set()
    for split, groups in sorted(spec.groups().items(), key=lambda kv: kv[0] not in ("train", "test")):
        names = [g.group for g in groups if g.cls == cls and group_subsets(g, kept) and g.group not in named]
        if names:
            parts.append(f"{split} " + ", ".join(f"`{n}`" for n in names))
        if split in ("train", "test"):
            named |= set(names)
    return "; ".join(parts)


def draw_role_graph(spec: ShiftSpec, art, cls: str, repo_dir: Path) -> Picture | None:
    """The meta-graph of ``cls`` with the task's subsets filled by role; None when the artifact
    has no meta-graph for the class or no group of the task is made of its kept subsets."""
    try:
        analysis, members = art.analysis(cls)
    except MetashiftError:
        return None  # not a class of this artifact (e.g. too few kept subsets)
    kept = set(analysis.subsets)
    roles = subset_roles(spec, cls, kept)
    if not roles:
        return None
    file = graph_file(spec.task_id, cls)
    plots.plot_roles(
        analysis,
        members,
        roles,
        ROLE_STYLES,
        Path(repo_dir) / file,
        title=f"{spec.task_id}: meta-graph of {cls}, subsets by role in the task",
        group_labels=_group_labels(spec, cls, kept),
    )
    other = len(kept) - len(roles)
    used = set(roles.values())
    colours = ", ".join(f"{style.label} {style.word}" for key, style in ROLE_STYLES.items() if key in used)
    caption = (
        f"Meta-graph of `{cls}` in this task ({_split_words(spec, cls, kept)}): fill = role ({colours}"
        + (f", {other} other subsets faded grey" if other else "")
        + "); node size ~ images"
        + ("." if analysis.edges else "; no edges at the overlap threshold.")
    )
    return Picture(file, f"meta-graph of {cls} with the train and test groups of {spec.task_id} highlighted", caption)


# -- the example grid ----------------------------------------------------------------------------


def _rows_of(ds) -> list[tuple[str, str, list[int]]]:
    """(split, group, row indices sorted by image_id) for each group row of the grid: every train
    and test group, and the validation / id_test groups whose name differs from those."""
    out = []
    shown: set[str] = set()
    # train and test first so that validation / id_test rows are only the groups they add
    for split in sorted(ds, key=lambda s: s not in ("train", "test")):
        d = ds[split]
        if "group" not in d.column_names or len(d) == 0:
            continue
        table = d.select_columns(["image_id", "group"] if "image_id" in d.column_names else ["group"]).with_format(
            "arrow"
        )[:]
        groups = table.column("group").to_pylist()
        ids = table.column("image_id").to_pylist() if "image_id" in table.column_names else list(range(len(groups)))
        by_group: dict[str, list[int]] = {}
        for i in sorted(range(len(groups)), key=lambda i: (str(ids[i]), i)):
            by_group.setdefault(groups[i], []).append(i)
        for g in sorted(by_group):
            if split in ("train", "test") or g not in shown:
                out.append((split, g, by_group[g]))
        if split in ("train", "test"):
            shown |= set(by_group)
    order = {s: k for k, s in enumerate(("train", "test", "validation", "id_test"))}
    return sorted(out, key=lambda r: (order.get(r[0], len(order)), r[0], r[1]))


def pick_examples(indices: list[int], k: int, seed: int, split: str, group: str) -> list[int]:
    """``k`` of a group's rows, chosen by a generator seeded with the task seed and the group (so one
    group's choice does not depend on the others), returned in image_id order."""
    if len(indices) <= k:
        return list(indices)
    rng = np.random.default_rng([seed, zlib.crc32(f"{split}/{group}".encode())])
    return [indices[i] for i in sorted(rng.choice(len(indices), size=k, replace=False).tolist())]


def _thumbnail(data: bytes):
    """A small RGB copy of the row's ORIGINAL image bytes (decoded for the picture only; the stored
    bytes are never touched)."""
    from PIL import Image  # Pillow comes with datasets' Image feature; only needed to draw

    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    rgb.thumbnail((THUMB_PIXELS, THUMB_PIXELS))
    return np.asarray(rgb)


def draw_examples(prepared, repo_dir: Path, *, per_group: int = EXAMPLES_PER_GROUP) -> Picture | None:
    """One PNG: a row per group (labelled with split, group and rows), ``per_group`` thumbnails each."""
    spec = prepared.spec
    ds = prepared.dataset
    rows = _rows_of(ds)
    if not rows or "image" not in next(iter(ds.values())).column_names:
        return None
    total = len(rows)
    rows = rows[:MAX_EXAMPLE_ROWS]
    pixels = dataset_images(ds, f"task {prepared.task_id}")  # the hub's reader: the stored bytes, never a path
    cells = []
    for split, group, indices in rows:
        chosen = pick_examples(indices, per_group, spec.seed, split, group)
        cells.append([_thumbnail(pixels.read(str(i))) for i in ds[split].select(chosen)["image_id"]])
    height = 0.6 + 1.35 * len(rows)
    fig = plots.new_figure((2.6 + 1.45 * per_group, height))
    grid = fig.add_gridspec(
        len(rows),
        per_group + 1,
        width_ratios=[1.8] + [1.0] * per_group,
        wspace=0.05,
        hspace=0.12,
        top=1.0 - 0.45 / height,
        bottom=0.1 / height,
    )
    for r, ((split, group, indices), thumbs) in enumerate(zip(rows, cells)):
        ax = fig.add_subplot(grid[r, 0])
        ax.set_axis_off()
        ax.text(
            1.0,
            0.5,
            f"{split}\n{group}\n{len(indices):,} rows",
            ha="right",
            va="center",
            fontsize=9,
            color=SPLIT_COLOURS.get(split, "black"),
            transform=ax.transAxes,
        )
        for c in range(per_group):
            ax = fig.add_subplot(grid[r, c + 1])
            ax.set_axis_off()
            if c < len(thumbs) and thumbs[c] is not None:
                ax.imshow(thumbs[c])
    more = f" (first {len(rows)} of {total} group rows)" if total > len(rows) else ""
    fig.suptitle(
        f"{spec.task_id}: up to {per_group} example images per group{more}", fontsize=10, y=1.0 - 0.12 / height
    )
    file = examples_file(spec.task_id)
    plots.save_png(fig, Path(repo_dir) / file)
    caption = (
        f"Up to {per_group} images per group, one row per split and group (rows of the validation and "
        f"id_test splits only for groups not already shown); chosen with seed {spec.seed}, thumbnails "
        f"decoded from the exported image bytes{more}."
    )
    return Picture(file, f"example images of each group of {spec.task_id}", caption)


def draw_task_pictures(prepared, art, repo_dir: Path) -> TaskPictures | None:
    """Draw the card pictures of a prepared task into ``repo_dir/images/``; None without matplotlib."""
    if not plots.have_matplotlib():
        logger.info(
            f"{prepared.task_id}: no card pictures (matplotlib is not installed: pip install 'metashift-hf[plot]')"
        )
        return None
    graphs = {}
    for cls in prepared.spec.classes:
        picture = draw_role_graph(prepared.spec, art, cls, repo_dir)
        if picture is not None:
            graphs[cls] = picture
    examples = draw_examples(prepared, repo_dir)
    logger.info(f"{prepared.task_id}: {len(graphs)} group graph(s)" + (" and an example grid" if examples else ""))
    return TaskPictures(graphs, examples)
