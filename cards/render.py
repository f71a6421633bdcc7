"""Dataset cards: README YAML metadata and the card body rendered from the ``cards/`` templates.

The templates are plain ``string.Template`` files (``$name`` placeholders), so they need no extra
dependency; the tables and sentences are formatted here from the prepared task, the artifact's
records and the written shards (numbers such as group distances are read through ``builders``). ``substitute`` (not ``safe_substitute``) makes a missing value an
error instead of a card with a hole in it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from metashift_hf.builders.artifact import ArtifactStats
from metashift_hf.builders.meta_graph_facts import EDGE_SUBSETS_MAX
from metashift_hf.builders.plots import plot_name
from metashift_hf.core import __version__
from metashift_hf.core.names import SubsetName, id_slug
from metashift_hf.core.provenance import SourceInfo, describe, is_synthetic, license_id
from metashift_hf.core.published import PUBLISHED_FULL
from metashift_hf.hub.shards import dataset_infos_yaml
from metashift_hf.tasks.group_distances import train_test_distances
from metashift_hf.tasks.spec import ShiftSpec

from .card_task import CardTask
from .shift_words import (
    first_sentence,
    group_list,
    shift_groups_table,
    shift_in_words,
    shift_label,
    shift_table,
    summary,
)
from .text import about, cell, field_meaning, fmt, personal_information, provenance_banner, render_template
from .usage import load_example, recommended_metric, usage


TAGS = ["metashift", "distribution-shift", "out-of-distribution", "image-classification", "visual-genome", "gqa"]
# shift_type as metashift_hf/tasks/shifts.py defines it: domain generalisation shifts the marginal context
# distribution; subpopulation shift changes how contexts go with labels (conditional).
SHIFT_TAGS = {
    "marginal": "domain-generalization",
    "joint": "domain-generalization",
    "conditional": "subpopulation-shift",
}
SOURCE_DATASETS = ["extended|visual_genome"]
# Synthetic artifacts (demo world): images drawn by this package's generator (MIT, like the code),
# so the card must not claim Visual Genome's licence or source for them.
# COCO-built artifacts (build --coco-annotations): COCO's annotations are CC BY 4.0, its images Flickr's
COCO_TAGS = ["metashift", "distribution-shift", "out-of-distribution", "image-classification", "coco"]
COCO_SOURCE_DATASETS = ["extended|detection-datasets/coco"]
SYNTHETIC_SOURCE_DATASETS = ["original"]
# User data (source custom: build --tags / --hf-dataset): licence and origin only as the user gave them
# (build --license / --source-name / --homepage), else none is claimed; never Visual Genome's.
CUSTOM_TAGS = ["metashift", "distribution-shift", "out-of-distribution", "image-classification"]


# -- words and tables ----------------------------------------------------------------------------


def is_multi_label(info: CardTask) -> bool:
    """One row per (class, image): an image showing several classes appears once per class (e.g. `classes`)."""
    return any(info.split_images.get(split, n) < n for split, n in info.split_rows.items())


def multi_label_note(info: CardTask) -> str:
    if not is_multi_label(info):
        return ""
    counts = ", ".join(
        f"{info.split_rows[s]:,} rows for {info.split_images[s]:,} images in `{s}`"
        for s in info.split_rows
        if s in info.split_images
    )
    return (
        "\n\nThis is a **multi-label** task: each row is one (image, class) pair, so an image showing several "
        f"classes appears once per class ({counts}). For multi-label training or scoring, gather each image's "
        "labels by `image_id`:\n\n```python\nfrom collections import defaultdict\n\nlabels = defaultdict(set)\n"
        'for image_id, label in zip(ds["train"]["image_id"], ds["train"]["label"]):\n'
        "    labels[image_id].add(label)\n```\n\nFor single-label classification, keep one row per `image_id` "
        '(e.g. `ds["train"].to_pandas().drop_duplicates("image_id")`) and expect label noise where images show '
        "several classes."
    )


NO_PICTURES = "drawn only where matplotlib is installed (`pip install 'metashift-hf[plot]'`)"


def _metagraph_section(info: CardTask) -> str:
    """Per class: its meta-graph with this task's groups highlighted, then the artifact's community picture."""
    graphs = info.pictures.graphs if info.pictures is not None else {}
    parts = []
    for c in info.spec.classes:
        shown = []
        if c in graphs:
            shown.append(graphs[c].markdown())
        if c in info.plots:
            shown.append(
                f"![meta-graph of {c}](images/{plot_file(c)})\n\n*Communities of the meta-graph of `{c}` "
                "(nodes: context subsets, size ~ images; edges: overlap; colours: communities).*"
            )
        if shown:
            parts.append(f"#### `{c}`\n\n" + "\n\n".join(shown))
    if parts:
        return "\n\n".join(parts)
    if info.pictures is None and not info.plots:
        return f"No meta-graph picture: they are {NO_PICTURES}."
    return "No meta-graph picture: no class of the task has a meta-graph in the artifact."


def _examples_section(info: CardTask) -> str:
    if info.pictures is not None and info.pictures.examples is not None:
        return info.pictures.examples.markdown()
    if info.pictures is None:
        return f"No example picture in this export: example grids are {NO_PICTURES}."
    return "No example picture: the task has no rows with a group."


def render_task_section(info: CardTask, heading: str | None = None) -> str:
    """The task's details; ``heading`` defaults to "## Task `ID`" (an index card holding several tasks)."""
    spec = info.spec
    metagraph = _metagraph_section(info)
    if info.distances:
        lines = [
            "Distances between each class's train and test groups, computed from the artifact over this task's "
            "groups (code rule: meta-graph rebuilt over the merged groups, spectral embedding, Euclidean; paper rule: "
            "size-weighted mean of the member subsets' embeddings; each number names the distance rule that gave "
            "it: `spectral` = the original embedding, `resistance` = effective resistance in the meta-graph where "
            "a subset has no embedding; `disconnected` = no path joins the groups; `–` = not computable):",
            "",
            "| class | train group | test group | d (code rule) | d (paper rule) |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {c} | `{a}` | `{b}` | {d or '–'} | {dp or '–'} |" for c, a, b, d, dp in info.distances]
        dist = spec.distance
        if dist is not None and dist.value is not None:
            how = f": {dist.note.rstrip('.')}." if dist.note else ' (see "Where our numbers differ from the paper").'
            lines += [
                "",
                f'The task\'s headline d = {fmt(dist.value)} ({dist.rule} rule, under "Shift") is computed '
                f"over other groups than these pairs, so it need not equal any row{how}",
            ]
        distance = "\n".join(lines)
    else:
        distance = "No group distance applies (no class has both train and test groups made of kept subsets)."
    b = info.build
    build_rows = [
        ("metashift-hf version", b.get("package_version")),
        ("artifact built by version", b.get("artifact_package_version")),
        ("artifact content hash", f"`{b.get('artifact_hash')}`"),
        ("provenance", b.get("provenance")),
        ("seed", b.get("seed")),
        ("rules", ", ".join(f"{k}={v}" for k, v in sorted((b.get("rules") or {}).items())) or "–"),
        ("removed images", ", ".join(f"{k}: {v}" for k, v in sorted(asdict(spec.removed).items())) or "none"),
        ("task options", ", ".join(f"{k}={v}" for k, v in sorted(spec.overrides.items())) or "defaults"),
    ]
    options = "".join(f" --set {k}={json.dumps(v)}" for k, v in sorted(spec.overrides.items()))
    reproduce = (
        f"metashift-hf export {info.task_id} --artifact ARTIFACT --images IMAGES --seed {fmt(b.get('seed'))}"
        f"{options} --out DIR"
    )
    groups_rows = [f"| {s} | `{cell(g)}` | {n} |" for s, gs in info.group_rows.items() for g, n in gs.items()]
    return render_template(
        "task_section.md",
        task_id=info.task_id,
        repo_id=info.repo_id,
        edge_subsets_max=EDGE_SUBSETS_MAX,  # the Meta-graph facts section
        heading=heading or f"## Task `{info.task_id}`",
        summary=summary(spec) + multi_label_note(info),
        fields_table="\n".join(
            f"| `{n}` | {t} | {field_meaning(n, info.build.get('provenance'))} |" for n, t in info.fields
        ),
        label_names=", ".join(f"{i} = `{n}`" for i, n in enumerate(info.label_names)),
        splits_table="\n".join(f"| {s} | {n:,} |" for s, n in info.split_rows.items()),
        groups_table="\n".join(groups_rows) or "| – | – | – |",
        shift_words=shift_in_words(spec),
        shift_table=shift_table(spec),
        shift_groups_table=shift_groups_table(spec),
        metagraph_section=metagraph,
        examples_section=_examples_section(info),
        distance_section=distance,
        build_table="\n".join(f"| {a} | {cell(v)} |" for a, v in build_rows),
        reproduce=reproduce,
        differences="\n".join(f"- {line}" for line in info.differences),
    )


def size_category(n: int) -> str:
    for bound, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < bound:
            return label
    return "1M<n<10M"


def card_data(
    infos: list[CardTask], configs, pretty_name: str, provenance: str | None, source_info: SourceInfo | None = None
):
    """The README YAML as ``huggingface_hub.DatasetCardData`` (configs + dataset_info included).

    Licence, paperswithcode id, source datasets and tags follow the provenance: MetaShift's own
    (Visual Genome / GQA) only for ``gqa`` / ``published``; COCO's for ``coco``; the generator's for
    synthetic data; for user data (``custom``) only what its builder gave (``build --license``), else none.
    """
    from huggingface_hub import DatasetCardData

    shift_tags = sorted({SHIFT_TAGS[i.spec.shift_type] for i in infos if i.spec.shift_type in SHIFT_TAGS})
    synthetic = is_synthetic(provenance)
    custom = provenance == "custom"
    data = DatasetCardData(
        license=license_id(provenance, source_info),
        pretty_name=pretty_name + (" (synthetic demo data)" if synthetic else ""),
        task_categories=["image-classification"],
        size_categories=[size_category(sum(sum(i.split_rows.values()) for i in infos))] if configs else None,
        # synthetic data is not Visual Genome / GQA: its tags must not say so
        tags=[
            t
            for t in (COCO_TAGS if provenance == "coco" else CUSTOM_TAGS if custom else TAGS)
            if not (synthetic and t in ("visual-genome", "gqa"))
        ]
        + shift_tags
        + (["synthetic"] if synthetic else []),
        source_datasets=(
            SYNTHETIC_SOURCE_DATASETS
            if synthetic
            else None
            if custom
            else COCO_SOURCE_DATASETS
            if provenance == "coco"
            else SOURCE_DATASETS
        ),
        task_ids=(
            ["multi-label-image-classification"]
            if infos and all(is_multi_label(i) for i in infos)
            else ["multi-class-image-classification"]
        ),
        # the paperswithcode entry is MetaShift on Visual Genome: not COCO builds, user or synthetic data
        paperswithcode_id="metashift" if provenance in ("gqa", "published") else None,
        # an index repo holds only its README: without this the Hub viewer says "no data files found"
        viewer=None if configs else False,
    )
    if configs:
        dataset_infos_yaml(configs, data)
    return data


def _card(data, body: str) -> str:
    return f"---\n{data.to_yaml()}\n---\n\n{body.rstrip()}\n"


def _opening(spec: ShiftSpec, provenance: str | None, source_info: SourceInfo | None) -> str:
    """The card's first lines: the task in one sentence, then where the data comes from; a warning that the
    data is not MetaShift (synthetic or user data) goes above even that sentence."""
    banner, sentence = provenance_banner(provenance, source_info), first_sentence(spec)
    warning = is_synthetic(provenance) or provenance == "custom"
    return f"{banner}\n\n{sentence}" if warning else f"{sentence}\n\n{banner}"


def render_task_card(info: CardTask, configs) -> str:
    provenance = info.build.get("provenance")
    source_info = info.build.get("source_info")
    body = render_template(
        "task_card.md",
        task_id=info.task_id,
        repo_id=info.repo_id,
        opening=_opening(info.spec, provenance, source_info),
        metric=recommended_metric(info),
        usage=usage(info),
        example=load_example(info),
        personal=personal_information(provenance, source_info),
        # the page title already names the task: no second "Task `ID`" heading
        task_section=render_task_section(info, heading="## Details"),
        about=about(provenance, source_info),
    )
    return _card(card_data([info], configs, f"MetaShift: {info.task_id}", provenance, source_info), body)


def _task_link(task_id: str, repo_id: str) -> str:
    """The task id as a link to its repo: the Hub page for ``ns/repo``, else the local folder."""
    if repo_id.count("/") == 1 and not repo_id.startswith((".", "/")):
        return f"[`{task_id}`](https://huggingface.co/datasets/{repo_id})"
    return f"[`{task_id}`](../{Path(repo_id).name})"


def index_row(task_id: str, repo_id: str, spec: ShiftSpec, rows: int) -> str:
    """A task's row in the ``metashift`` overview's table (from its spec and its number of rows)."""
    groups = spec.groups()
    dist = spec.distance.value if spec.distance is not None else None
    mf = spec.minority_fraction.achieved if spec.minority_fraction is not None else None
    return (
        f'| {_task_link(task_id, repo_id)} | `load_dataset("{repo_id}", "{task_id}")` | {", ".join(spec.classes)} | '
        f"{shift_label(spec)} ({spec.shift_type}) | {cell(group_list(groups.get('train', ())))} | "
        f"{cell(group_list(groups.get('test', ())))} | {fmt(dist)} | {fmt(mf)} | {rows:,} |"
    )


_ROW_TASK = re.compile(r"^\| \[`([^`]+)`\]")


def add_index_rows(card: str, extra: "list[tuple[str, str, ShiftSpec]]") -> str:
    """The ``metashift`` overview ``card`` (repo-per-task layout) with the rows of tasks published beside it before
    (``extra``: task id, repo id, spec) added to its table, every task once in task-id order, and their shift tags
    added to its YAML; a task the card lists already keeps its row."""
    from huggingface_hub import DatasetCard

    lines = card.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("| task | load |")) + 2  # after the separator
    end = next((i for i in range(at, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = {m.group(1): line for line in lines[at:end] if (m := _ROW_TASK.match(line))}
    for task_id, repo_id, spec in extra:
        rows.setdefault(task_id, index_row(task_id, repo_id, spec, sum(spec.split_sizes.values())))
    merged = DatasetCard("\n".join([*lines[:at], *(rows[t] for t in sorted(rows)), *lines[end:]]))
    tags = list(merged.data.tags or [])
    merged.data.tags = tags + sorted(
        {SHIFT_TAGS[s.shift_type] for *_, s in extra if s.shift_type in SHIFT_TAGS} - set(tags)
    )
    return str(merged)


def render_index_card(infos: list[CardTask], art, *, configs=None, repo_id: str) -> str:
    """The ``metashift`` overview. With ``configs`` (one-repo layout) it also holds every task."""

    rows = [index_row(i.task_id, i.repo_id, i.spec, sum(i.split_rows.values())) for i in infos]
    sections = "\n\n".join(render_task_section(i) for i in infos) if configs else ""
    body = render_template(
        "index_card.md",
        package_version=__version__,
        artifact_hash=art.content_hash,
        provenance=provenance_banner(art.provenance, art.manifest.source_info),
        tasks_table="\n".join(rows),
        sections=sections,
        about=about(art.provenance, art.manifest.source_info, sections=bool(sections)),
    )
    return _card(card_data(infos, configs, "MetaShift", art.provenance, art.manifest.source_info), body)


def _feature_type(feature) -> str:
    import datasets

    if isinstance(feature, datasets.Image):
        return "image"
    if isinstance(feature, datasets.ClassLabel):
        return f"class label ({feature.num_classes})"
    if isinstance(feature, datasets.Value):
        return feature.dtype
    if isinstance(feature, list) or hasattr(feature, "feature"):  # list / List / LargeList / Sequence
        inner = feature[0] if isinstance(feature, list) else feature.feature
        return f"list of {_feature_type(inner)}"
    return type(feature).__name__


def _ours(key: str, spec: ShiftSpec):
    """Our value of a published size such as ``train_total`` or ``test_dog_shelf``."""
    if key.endswith("_total"):
        return spec.split_sizes.get(key[: -len("_total")])
    split, _, rest = key.partition("_")
    for g in spec.groups().get(split, ()):
        if f"{g.cls}_{SubsetName.parse(g.group).context}".replace(" ", "_") == rest:
            return g.n
    return None


def _differences(spec: ShiftSpec, build: dict, stats: ArtifactStats) -> list[str]:
    out = []
    dist = spec.distance
    if dist is not None and dist.paper_value is not None:
        code = (
            f"; the original code's value is {fmt(dist.original_code_value)}"
            if dist.original_code_value is not None
            else ""
        )
        out.append(f"Distance d: paper {fmt(dist.paper_value)}, ours {fmt(dist.value)} ({dist.rule} rule){code}.")
    if dist is not None and dist.note:
        out.append(f"How d is computed here: {dist.note}.")
    for key, value in sorted((spec.paper.sizes if spec.paper else {}).items()):
        out.append(f"`{key}`: paper {fmt(value)}, ours {fmt(_ours(key, spec))}.")
    scale = spec.overrides.get("scale")  # overrides: the task options given, by name
    if scale is not None:
        out.append(
            f"Sizes were scaled by {fmt(scale)} (task option `scale`), so sampled group sizes are that fraction of the paper's."
        )
    mf = spec.minority_fraction
    if mf is not None and mf.target is not None and mf.achieved is not None and mf.target != mf.achieved:
        out.append(
            f"Minority fraction: target p = {fmt(mf.target)}, achieved {fmt(mf.achieved)} "
            "(group sizes are whole images, so p can only be approached)."
        )
    provenance = build.get("provenance")
    if stats is not None:
        if is_synthetic(provenance):
            out.append(
                f"This export was built from **synthetic data** ({describe(provenance)}), not from GQA: its {stats.classes} classes "
                f"and {stats.subsets:,} subsets are small stand-ins, so no figure here is comparable to the paper's "
                f"({PUBLISHED_FULL['classes']} classes, {PUBLISHED_FULL['subsets']:,} subsets)."
            )
        elif provenance in ("coco", "custom"):
            out.append(
                f"The artifact has {stats.classes} classes and {stats.subsets:,} kept subsets, built from "
                f"{describe(provenance)} (source here: {provenance}), not from Visual Genome: the paper's figures for the "
                f"full MetaShift ({PUBLISHED_FULL['classes']} classes, {PUBLISHED_FULL['subsets']:,} subsets) do "
                "not apply to it."
            )
        else:
            out.append(
                f"The artifact has {stats.classes} classes and {stats.subsets:,} kept subsets; the paper reports "
                f"{PUBLISHED_FULL['classes']} and {PUBLISHED_FULL['subsets']:,} for the full MetaShift (source here: {provenance}). "
                "Differences come from the input version (GQA scene graphs vs. the published pickles) and from our rule "
                "reading (a subset needs at least 25 images, a class more than 5 such subsets)."
            )
    removed = asdict(spec.removed)
    if any(removed.values()):
        out.append(
            "Images that are ambiguous or would leak between splits are removed ("
            + ", ".join(f"{k}: {v}" for k, v in sorted(removed.items()))
            + "), so group sizes can be below the paper's sampled sizes."
        )
    if not out:
        out.append("No published figure exists for this task; nothing to compare.")
    return out


def task_info(prepared, art, config_files=None, *, repo_id: str) -> CardTask:
    """Gather the card facts for a ``PreparedTask`` built from artifact ``art``."""
    import datasets

    ds = prepared.dataset
    spec = prepared.spec
    first = next(iter(ds.values()))
    label = first.features.get("label")
    names = list(label.names) if isinstance(label, datasets.ClassLabel) else list(spec.classes)
    group_rows = {}
    for split, d in ds.items():
        group_rows[split] = dict(sorted(Counter(d["group"]).items())) if "group" in d.features else {}
    manifest = art.manifest
    build = {
        "package_version": __version__,
        "artifact_package_version": manifest.package_version,
        "artifact_hash": art.content_hash,
        "provenance": art.provenance,
        "source_info": art.manifest.source_info,  # user data's licence and origin (not a table row)
        "seed": spec.seed,
        "rules": asdict(spec.rules) if spec.rules is not None else art.options.to_dict(),
    }
    plots = [c for c in spec.classes if (Path(art.root) / "plots" / plot_name(c)).is_file()]
    stats = art.stats
    example = first.select_columns([c for c in first.column_names if c != "image"])[0] if len(first) else {}
    return CardTask(
        example=dict(example),
        task_id=prepared.task_id,
        repo_id=repo_id,
        spec=spec,
        label_names=names,
        fields=[(k, _feature_type(v)) for k, v in first.features.items()],
        split_rows={s: len(d) for s, d in ds.items()},
        split_images={s: len(set(d["image_id"])) for s, d in ds.items() if "image_id" in d.features},
        group_rows=group_rows,
        build=build,
        plots=plots,
        distances=train_test_distances(spec, art),
        differences=_differences(spec, build, stats),
    )


def plot_file(cls: str) -> str:
    """The picture's name in the repo: Hub-safe, since a space breaks a Markdown image link."""
    return f"{id_slug(cls)}.png"


def copy_plots(info: CardTask, art, repo_dir: Path) -> list[str]:
    """Copy the class meta-graph PNGs into ``repo_dir/images/`` (the card links them)."""
    copied = []
    for cls in info.plots:
        dst = Path(repo_dir) / "images" / plot_file(cls)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(art.root) / "plots" / plot_name(cls), dst)
        copied.append(dst.relative_to(repo_dir).as_posix())
    return copied


INDEX_NOTE = "Overview of the MetaShift tasks: what each one shifts and how to load it."


def collection_note(spec: ShiftSpec) -> str:
    """The shift spec in one line (the Hub caps collection notes at 500 characters)."""
    groups = spec.groups()
    d = spec.distance.value if spec.distance is not None else None
    p = spec.minority_fraction.achieved if spec.minority_fraction is not None else None
    text = (
        f"{spec.shift_type} shift; train {group_list(groups.get('train', ()))} -> "
        f"test {group_list(groups.get('test', ()))}"
        + (f"; d={fmt(d)}" if d is not None else "")
        + (f"; p={fmt(p)}" if p is not None else "")
    )
    return text if len(text) <= 500 else text[:497] + "..."
