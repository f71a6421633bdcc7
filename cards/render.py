"""Dataset cards: README YAML metadata and the card body rendered from the ``cards/`` templates.

The templates are plain ``string.Template`` files (``$name`` placeholders), so they need no extra
dependency; the tables and sentences are formatted here from the prepared task, the artifact's
records and the written shards (numbers such as group distances are read through ``builders``). ``substitute`` (not ``safe_substitute``) makes a missing value an
error instead of a card with a hole in it.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from metashift_hf.builders.artifact import ArtifactStats
from metashift_hf.builders.group_distances import TrainTestDistance, train_test_distances
from metashift_hf.builders.meta_graph_facts import EDGE_SUBSETS_MAX
from metashift_hf.builders.spec import GroupSpec, ShiftDistance, ShiftSpec
from metashift_hf.cards.pictures import TaskPictures
from metashift_hf.core import __version__
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.names import SubsetName, id_slug
from metashift_hf.core.provenance import SourceInfo, describe, is_synthetic, license_id
from metashift_hf.core.published import PUBLISHED_FULL
from metashift_hf.hub.shards import dataset_infos_yaml


# Templates are package data of metashift_hf.cards, read through importlib.resources so they work from a wheel.
TEMPLATE_DIR = resources.files("metashift_hf.cards") / "templates"
TAGS = ["metashift", "distribution-shift", "out-of-distribution", "image-classification", "visual-genome", "gqa"]
# shift_type as builders/shifts.py defines it: domain generalisation shifts the marginal context
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
# BibTeX of the data sources, after MetaShift's in every card's Citation block (templates/citation_*.md)
CITE_VG, CITE_COCO = "citation_vg.md", "citation_coco.md"

# Meaning of the task fields (DEVELOPERS.md, "Task layer"); unknown extra fields show their type only.
FIELD_MEANING = {
    "image": "the original JPEG bytes (decoded to a PIL image on access)",
    "image_id": "GQA / Visual Genome image id",
    "label": "class index (names below)",
    "context": "the context part of the image's group: `group` is `class(context)` "
    "(e.g. `cabinet`, `indoor`, `community-0`); the image's own contexts are in `contexts`",
    "contexts": "every kept context of the image's class that the image belongs to",
    "group": "`class(context)`, the group the image was sampled for",
    "group_id": "index of `group` among the task's groups (names: every group of every split, sorted), "
    "e.g. for GroupDRO",
    "community": "meta-graph community of the group when all its subsets share one; otherwise the community "
    "holding most of the image's `contexts` (ties: smallest id); -1 when the image has none",
}


def _template(name: str) -> Template:
    path = TEMPLATE_DIR / name
    if not path.is_file():
        raise InputFormatError(
            f"card template {path} is missing",
            "reinstall metashift-hf (`pip install metashift-hf`): the templates ship inside metashift_hf.cards",
        )
    return Template(path.read_text(encoding="utf-8"))


IMAGE_ID_MEANING = {"coco": "MS-COCO image id", "custom": "image id as the source dataset gives it"}


def field_meaning(name: str, provenance: str | None) -> str:
    """What a feature holds; ``image_id`` says whose id it is (the artifact's provenance)."""
    if name == "image_id":
        if is_synthetic(provenance):
            return "image id in the generated world (not a Visual Genome / GQA id)"
        return IMAGE_ID_MEANING.get(provenance or "", FIELD_MEANING["image_id"])
    return FIELD_MEANING.get(name, "")


def _user_source(info: SourceInfo | None) -> str:
    """User data as the card names it: its name (linked to its homepage), as the builder gave them."""
    name = info.name if info and info.name else "a user-supplied dataset"
    return f"[{name}]({info.homepage})" if info and info.homepage else name


def provenance_banner(provenance: str | None, source_info: SourceInfo | None = None) -> str:
    """The first thing every card says: where the data comes from (core.provenance)."""
    if is_synthetic(provenance):
        return (
            f"> **Synthetic data, not MetaShift.** This export was built from {describe(provenance)} "
            f"(artifact `source: {provenance}`). Its images are not Visual Genome / GQA photographs, and no "
            "figure here is comparable with the MetaShift paper's. Use it to try the pipeline, not to measure models."
        )
    if provenance == "custom":
        return (
            f"> Provenance: built from {_user_source(source_info)} with MetaShift's construction (artifact "
            "`source: custom`): not Visual Genome / GQA data, and not comparable with the MetaShift paper's figures."
        )
    return f"> Provenance: built from {describe(provenance)} (artifact `source: {provenance}`)."


def _about(provenance: str | None, source_info: SourceInfo | None = None, *, sections: bool = True) -> str:
    """Licence, biases and citation; ``sections`` = this card holds the task sections the bias text points to."""
    cite = CITE_VG
    if is_synthetic(provenance):
        licence = (
            "The images and scene graphs of this export are **synthetic**: drawn by the `metashift-hf` demo "
            "generator (seeded shapes on tinted backgrounds), not taken from Visual Genome, GQA, YFCC100M or "
            "MS-COCO. They are released with the generator's licence (`license: mit`). Only the subset "
            "construction follows MetaShift (Liang & Zou, ICLR 2022)."
        )
        note = (
            "The points below describe the real MetaShift data (Visual Genome); this synthetic export only "
            "imitates its structure.\n\n"
        )
    elif provenance == "coco":
        licence = (
            "Images and object annotations come from [MS-COCO](https://cocodataset.org/) (Lin et al., ECCV "
            "2014), built as MetaShift's Appendix D describes (subsets by co-occurrence of labelled objects). "
            "COCO's annotations are released under **CC BY 4.0** (`license: cc-by-4.0` covers them and the "
            "subset structure); the images are Flickr photographs under their uploaders' licences (each "
            "image's licence is named in COCO's instances JSON: `images[].license` indexes `licenses[]`) and "
            "the [Flickr terms of use](https://www.flickr.com/help/terms), which COCO does not relicense. "
            "Cite COCO and MetaShift when you use it."
        )
        note = (
            "The points below describe MetaShift on Visual Genome; a COCO build shares its construction, and "
            "COCO's 80 object categories are coarser than Visual Genome's vocabulary.\n\n"
        )
        cite = CITE_COCO
    elif provenance == "custom":
        given = source_info.license if source_info else None
        licence = (
            f"Images and labels come from {_user_source(source_info)}, not from Visual Genome or GQA; the subset "
            "construction follows MetaShift (Liang & Zou, ICLR 2022). "
        )
        licence += (
            f"Whoever built this export declared the data's licence as `{given}` (`license: {given}`); the "
            "images keep any terms of their own, which the source states."
            if given
            else "**No licence was given** when the artifact was built, so this card claims none: check the "
            "source's terms before using or sharing it (`metashift-hf build ... --license ID` records one; "
            "`metashift-hf publish` refuses an export without it)."
        )
        licence += " Cite the source dataset and MetaShift when you use it."
        note = (
            "The points below describe MetaShift on Visual Genome; this export shares its construction, but its "
            "labels, images and their biases are the source dataset's.\n\n"
        )
        cite = ""
    else:
        licence = (
            "Images and scene graphs come from [Visual Genome](https://homes.cs.washington.edu/~ranjay/visualgenome/) "
            "(Krishna et al., IJCV 2017) through [GQA](https://cs.stanford.edu/people/dorarad/gqa/) (Hudson & "
            "Manning, CVPR 2019); the subset construction follows MetaShift (Liang & Zou, ICLR 2022). Visual "
            "Genome's images come from [YFCC100M](https://multimediacommons.wordpress.com/yfcc100m-core-dataset/) "
            "and [MS-COCO](https://cocodataset.org/) (Flickr photographs under their uploaders' Creative Commons "
            "licences). Visual Genome, GQA scene graphs and the MetaShift data are released under **CC BY 4.0**; "
            "this export keeps that licence (`license: cc-by-4.0`). Cite the works below when you use it."
        )
        note = ""
    return _render(
        "about.md",
        licence=licence,
        biases_note=note,
        source_citations=_template(cite).template if cite else "",
        sizes_where="in the tables\n  above" if sections else "in each task's card",
        in_cards="" if sections else " in each task's card",
    )


def personal_information(provenance: str | None, source_info: SourceInfo | None = None) -> str:
    """The card's personal and sensitive information section, by where the images come from."""
    if is_synthetic(provenance):
        return (
            "None: the images are drawn shapes made by a seeded program, not photographs, so they show no people, "
            "faces, licence plates or homes. Names such as `man` are labels copied from the structure of the real "
            "data, not descriptions of persons."
        )
    if provenance == "custom":
        return (
            f"The images come from {_user_source(source_info)}; whether they show people, faces, licence plates or "
            "homes, and how their labels were assigned, is for that source's documentation to say. This export "
            "adds no names or other identifiers."
        )
    photos = (
        "MS-COCO images are Flickr photographs" if provenance == "coco" else "Visual Genome images are photographs"
    )
    return (
        f"{photos} of everyday scenes and may show people, faces, licence plates or homes; no names or other "
        "identifiers are attached, and labels describe objects, not persons. People-related class and attribute "
        "names were assigned by annotators from appearance (see the limitations below)."
    )


def _render(name: str, **values: Any) -> str:
    try:
        return _template(name).substitute(**values)
    except KeyError as exc:
        raise InputFormatError(
            f"card template {name} uses ${exc.args[0]}, which the renderer does not fill",
            "fix the template or cards.py so every placeholder is provided",
        ) from exc


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


@dataclass
class CardTask:
    """Everything a card says about one task, gathered once by :func:`task_info`."""

    task_id: str
    repo_id: str  # what users pass to load_dataset (ns/repo, or the local folder)
    spec: ShiftSpec
    label_names: list[str]
    fields: list[tuple[str, str]]  # (name, type)
    split_rows: dict[str, int]
    group_rows: dict[str, dict[str, int]]
    build: dict[str, Any]
    plots: list[str] = field(default_factory=list)  # classes whose meta-graph picture is copied
    distances: list[TrainTestDistance] = field(
        default_factory=list
    )  # read from the artifact (builders.group_distances)
    differences: list[str] = field(default_factory=list)
    example: dict = field(default_factory=dict)  # the first row without its image bytes (data-instance section)
    pictures: TaskPictures | None = None  # the task's own pictures (cards.pictures), None when not drawn
    split_images: dict[str, int] = field(default_factory=dict)  # distinct image_id per split (< rows: multi-label)


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
            f"; the original code's value is {_fmt(dist.original_code_value)}"
            if dist.original_code_value is not None
            else ""
        )
        out.append(f"Distance d: paper {_fmt(dist.paper_value)}, ours {_fmt(dist.value)} ({dist.rule} rule){code}.")
    if dist is not None and dist.note:
        out.append(f"How d is computed here: {dist.note}.")
    for key, value in sorted((spec.paper.sizes if spec.paper else {}).items()):
        out.append(f"`{key}`: paper {_fmt(value)}, ours {_fmt(_ours(key, spec))}.")
    scale = spec.overrides.get("scale")  # overrides: the task options given, by name
    if scale is not None:
        out.append(
            f"Sizes were scaled by {_fmt(scale)} (task option `scale`), so sampled group sizes are that fraction of the paper's."
        )
    mf = spec.minority_fraction
    if mf is not None and mf.target is not None and mf.achieved is not None and mf.target != mf.achieved:
        out.append(
            f"Minority fraction: target p = {_fmt(mf.target)}, achieved {_fmt(mf.achieved)} "
            "(group sizes are whole images, so p can only be approached)."
        )
    source = build.get("artifact_source")
    if stats is not None:
        if is_synthetic(source):
            out.append(
                f"This export was built from **synthetic data** ({describe(source)}), not from GQA: its {stats.classes} classes "
                f"and {stats.subsets:,} subsets are small stand-ins, so no figure here is comparable to the paper's "
                f"({PUBLISHED_FULL['classes']} classes, {PUBLISHED_FULL['subsets']:,} subsets)."
            )
        elif source in ("coco", "custom"):
            out.append(
                f"The artifact has {stats.classes} classes and {stats.subsets:,} kept subsets, built from "
                f"{describe(source)} (source here: {source}), not from Visual Genome: the paper's figures for the "
                f"full MetaShift ({PUBLISHED_FULL['classes']} classes, {PUBLISHED_FULL['subsets']:,} subsets) do "
                "not apply to it."
            )
        else:
            out.append(
                f"The artifact has {stats.classes} classes and {stats.subsets:,} kept subsets; the paper reports "
                f"{PUBLISHED_FULL['classes']} and {PUBLISHED_FULL['subsets']:,} for the full MetaShift (source here: {source}). "
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
        "artifact_source": art.provenance,
        "artifact_source_info": art.manifest.source_info,  # user data's licence and origin (not a table row)
        "seed": spec.seed,
        "rules": asdict(spec.rules) if spec.rules is not None else art.options.to_dict(),
    }
    plots = [c for c in spec.classes if (Path(art.root) / "plots" / f"{c}.png").is_file()]
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
        shutil.copyfile(Path(art.root) / "plots" / f"{cls}.png", dst)
        copied.append(dst.relative_to(repo_dir).as_posix())
    return copied


# -- words and tables ----------------------------------------------------------------------------


def _contexts(groups: "tuple[GroupSpec, ...]") -> str:
    """Group names (``class(context-group)``); their member contexts are in the groups table."""
    return ", ".join(g.group for g in groups) or "–"


def _metric(dist: ShiftDistance) -> str:
    """Which distance rule gave the number (spectral / resistance), when the spec records it."""
    return f", {dist.metric} distance" if dist.metric else ""


def shift_in_words(spec: ShiftSpec) -> str:
    kind = spec.shift_type
    groups = spec.groups()
    classes = ", ".join(f"`{c}`" for c in spec.classes)
    dist = spec.distance
    d = (
        f" The train/test distance is d = {_fmt(dist.value)} ({dist.rule} rule{_metric(dist)})."
        if dist is not None and dist.value is not None
        else ""
    )
    if kind == "joint":  # paper DG tasks, shift-joint levels: new contexts, and contexts go with labels differently
        return (
            f"**Domain generalisation** with a context-label shift (joint shift: P(context) and P(label | context) "
            f"both change) over {classes}: the model is trained on images of each class in some contexts "
            f"({_contexts(groups.get('train', []))}) and tested in other contexts "
            f"({_contexts(groups.get('test', []))}).{d}"
        )
    if kind == "marginal":
        return (
            f"**Domain generalisation** (marginal shift of the context distribution) over {classes}: the model is "
            f"trained on images of each class in some contexts ({_contexts(groups.get('train', []))}) and tested in "
            f"other contexts ({_contexts(groups.get('test', []))}) that it never saw in training.{d}"
        )
    if kind == "conditional":
        mf = spec.minority_fraction
        p = (
            f" Minority groups make up p = {_fmt(mf.achieved)} of the training set (target {_fmt(mf.target)})."
            if mf is not None
            else ""
        )
        return (
            f"**Subpopulation shift** (conditional shift: which contexts go with which label changes) over {classes}: "
            f"training and test sets contain the same kinds of groups in different proportions.{p} Train groups: "
            f"{_contexts(groups.get('train', []))}; test groups: {_contexts(groups.get('test', []))}.{d}"
        )
    return (
        f"**No designed shift**: classes {classes} with every group in one split "
        f"({_contexts(groups.get('train', []))}); use it as a whole-class collection or an in-distribution reference."
    )


INDEX_NOTE = "Overview of the MetaShift tasks: what each one shifts and how to load it."


def collection_note(spec: ShiftSpec) -> str:
    """The shift spec in one line (the Hub caps collection notes at 500 characters)."""
    groups = spec.groups()
    d = spec.distance.value if spec.distance is not None else None
    p = spec.minority_fraction.achieved if spec.minority_fraction is not None else None
    text = (
        f"{spec.shift_type} shift; train {_contexts(groups.get('train', ()))} -> "
        f"test {_contexts(groups.get('test', ()))}"
        + (f"; d={_fmt(d)}" if d is not None else "")
        + (f"; p={_fmt(p)}" if p is not None else "")
    )
    return text if len(text) <= 500 else text[:497] + "..."


def shift_label(spec: ShiftSpec) -> str:
    return {
        "marginal": "domain generalisation",
        "joint": "domain generalisation (joint shift)",
        "conditional": "subpopulation shift",
    }.get(spec.shift_type, "no designed shift")


def summary(spec: ShiftSpec) -> str:
    kind = shift_label(spec)
    return f"Classify {', '.join(f'`{c}`' for c in spec.classes)} under {kind}."


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


def _shift_table(spec: ShiftSpec) -> str:
    dist, mf = spec.distance, spec.minority_fraction
    groups = spec.groups()
    rows = [
        ("shift type", spec.shift_type),
        ("train groups", _contexts(groups.get("train", ()))),
        ("test groups", _contexts(groups.get("test", ()))),
        ("distance d", f"{_fmt(dist.value)} ({dist.rule}{_metric(dist)})" if dist is not None else "–"),
        ("minority fraction p", f"{_fmt(mf.achieved)} (target {_fmt(mf.target)})" if mf is not None else "–"),
        ("split sizes", ", ".join(f"{k}: {v}" for k, v in spec.split_sizes.items()) or "–"),
        ("measured shift (test vs train)", measured_words(spec) or "not measured (spec version 1)"),
    ]
    return "\n".join(f"| {a} | {_cell(b)} |" for a, b in rows)


def measured_words(spec: ShiftSpec) -> str | None:
    """The shift measured from the rows (builders/measured.py), test split against train, in one line."""
    m = spec.measured
    test = None if m is None else (m.split("test") or (m.splits[-1] if m.splits else None))
    if test is None:
        return None
    shared = "" if test.p_y_given_s_tv is not None else "; no context shared, so from the class-context dependence"
    agree = (
        "agrees with the declared type"
        if m.agrees and not m.by_construction
        else f"declared {spec.shift_type}: {m.note}"
    )  # by construction: the note says what and shows the figures
    return (
        f"{m.type}: P(context) TV {_fmt(test.p_s_tv)} (counts above {_fmt(test.p_s_threshold)}), P(class | context) "
        f"shift {_fmt(test.conditional)} (counts above {_fmt(test.conditional_threshold)}{shared}); {agree}"
    )


def _shift_groups_table(spec: ShiftSpec) -> str:
    """One row per group (its splits listed): the row counts live in the Splits and groups table."""
    first: dict[str, GroupSpec] = {}
    splits: dict[str, list[str]] = {}
    for split, groups in spec.groups().items():
        for g in groups:
            first.setdefault(g.group, g)
            if split not in splits.setdefault(g.group, []):
                splits[g.group].append(split)
    rows = [
        f"| `{_cell(name)}` | {_cell(g.cls)} | {', '.join(splits[name])} | {_cell(', '.join(g.contexts) or '–')} |"
        for name, g in first.items()
    ]
    return "\n".join(rows) or "| – | – | – | – |"


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
                f'The task\'s headline d = {_fmt(dist.value)} ({dist.rule} rule, under "Shift") is computed '
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
        ("artifact source", b.get("artifact_source")),
        ("seed", b.get("seed")),
        ("rules", ", ".join(f"{k}={v}" for k, v in sorted((b.get("rules") or {}).items())) or "–"),
        ("removed images", ", ".join(f"{k}: {v}" for k, v in sorted(asdict(spec.removed).items())) or "none"),
        ("task options", ", ".join(f"{k}={v}" for k, v in sorted(spec.overrides.items())) or "defaults"),
    ]
    options = "".join(f" --set {k}={json.dumps(v)}" for k, v in sorted(spec.overrides.items()))
    reproduce = (
        f"metashift-hf export {info.task_id} --artifact ARTIFACT --images IMAGES --seed {_fmt(b.get('seed'))}"
        f"{options} --out DIR"
    )
    groups_rows = [f"| {s} | `{_cell(g)}` | {n} |" for s, gs in info.group_rows.items() for g, n in gs.items()]
    return _render(
        "task_section.md",
        task_id=info.task_id,
        repo_id=info.repo_id,
        edge_subsets_max=EDGE_SUBSETS_MAX,  # the Meta-graph facts section
        heading=heading or f"## Task `{info.task_id}`",
        summary=summary(spec) + multi_label_note(info),
        fields_table="\n".join(
            f"| `{n}` | {t} | {field_meaning(n, info.build.get('artifact_source'))} |" for n, t in info.fields
        ),
        label_names=", ".join(f"{i} = `{n}`" for i, n in enumerate(info.label_names)),
        splits_table="\n".join(f"| {s} | {n:,} |" for s, n in info.split_rows.items()),
        groups_table="\n".join(groups_rows) or "| – | – | – |",
        shift_words=shift_in_words(spec),
        shift_table=_shift_table(spec),
        shift_groups_table=_shift_groups_table(spec),
        metagraph_section=metagraph,
        examples_section=_examples_section(info),
        distance_section=distance,
        build_table="\n".join(f"| {a} | {_cell(v)} |" for a, v in build_rows),
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


def recommended_metric(info: CardTask) -> str:
    """How to score and report this task, by shift type (what `metashift-hf score` computes)."""
    kind = info.spec.shift_type
    if getattr(info.spec, "registry", None) is not None:
        return (
            "Report **accuracy per class and per context with 95% intervals, the worst context and the context bugs** "
            "of pretrained ImageNet-1k classifiers (top-1 counted correct when it lies under the class's matched "
            "WordNet synset, or restricted to the task's classes), as `metashift-hf evaluate` computes them."
        )
    if kind == "conditional":
        val = info.group_rows.get("validation") or {}
        few = (
            (
                f" The `validation` split is small per group (as few as {min(val.values()):,} images in a group: "
                f"{', '.join(f'`{g}` {n:,}' for g, n in sorted(val.items(), key=lambda x: x[1])[:3])}), so "
                "worst-group accuracy on it is noisy: select models on it with care and report intervals."
            )
            if val
            else ""
        )
        return (
            "Report **average and worst-group accuracy on `test`** (groups: the `group` field), each with a 95% "
            "interval, and the training minority fraction p." + few
        )
    if kind in ("marginal", "joint"):
        return (
            "Report **accuracy on `test` (out of distribution) next to in-distribution accuracy** (`id_test`, "
            "else `validation`), the gap between them, and per-group accuracy (`group` field), each with a 95% "
            "interval; name the distance d of the shift."
        )
    return "No designed shift: report per-group accuracy (`group` field) with 95% intervals."


def _example(info: CardTask) -> str:
    row = {"image": "<PIL.Image: the original JPEG>", **info.example}
    return "```python\n{\n" + "\n".join(f"    {k!r}: {v!r}," for k, v in row.items()) + "\n}\n```"


def _opening(spec: ShiftSpec, provenance: str | None, source_info: SourceInfo | None) -> str:
    """The card's first lines: the task in one sentence, then where the data comes from; a warning that the
    data is not MetaShift (synthetic or user data) goes above even that sentence."""
    banner, sentence = provenance_banner(provenance, source_info), first_sentence(spec)
    warning = is_synthetic(provenance) or provenance == "custom"
    return f"{banner}\n\n{sentence}" if warning else f"{sentence}\n\n{banner}"


def _few(groups: "tuple[GroupSpec, ...]", most: int = 6) -> str:
    """Group names for one sentence: all of a few, else the first ones and how many (the tables list all)."""
    if len(groups) <= most:
        return _contexts(groups)
    return f"{_contexts(groups[: most - 2])} and {len(groups) - (most - 2)} more groups"


def first_sentence(spec: ShiftSpec) -> str:
    """The one sentence a Hub visitor needs first: train on what, test on what, and what shifts."""
    groups = spec.groups()
    train, test = _few(groups.get("train", ())), _few(groups.get("test", ()))
    dist = spec.distance
    d = f", meta-graph distance d = {_fmt(dist.value)}" if dist is not None and dist.value is not None else ""
    what = {
        "marginal": "new contexts at test time (P(context) shifts)",
        "joint": "new contexts at test time, and which contexts go with which class changes "
        "(P(context) and P(class | context) shift)",
        "conditional": "the same kinds of groups in other proportions (P(class | context) shifts)",
    }
    if spec.shift_type not in what:
        return (
            f"**Classify {', '.join(f'`{c}`' for c in spec.classes)}: train and test are drawn from the same "
            "groups; there is no designed shift.**"
        )
    return f"**Train on {train}; test on {test}; the shift is {what[spec.shift_type]}{d}.**"


def _score_in_python(info: CardTask) -> str:
    """The Evaluator snippet: ID and OOD in one call where the task has both (the ID split as
    ``builders.splits.split_roles`` picks it), else the test split alone."""
    splits = info.split_rows
    iid = next((s for s in ("id_test", "validation") if s in splits), None)
    lines = [
        "```python",
        "import numpy as np",
        "import metashift_hf",
        "",
        "ev = metashift_hf.Evaluator(ds)  # rows are matched by image_id: ds may be shuffled or select()-ed",
    ]
    if iid and "test" in splits and info.spec.shift_type != "none":
        lines += [
            f'y_id = np.zeros(len(ds["{iid}"]), dtype=np.int64)  # your model\'s class indices, in ds["{iid}"] row order',
            'y_ood = np.zeros(len(ds["test"]), dtype=np.int64)  # the same for ds["test"]',
            f'print(ev.eval({{"{iid}": y_id, "test": y_ood}}))  # average, worst group and class, intervals, ID vs OOD',
        ]
    else:
        lines += [
            'y_pred = np.zeros(len(ds["test"]), dtype=np.int64)  # your model\'s class indices, in ds["test"] row order',
            'print(ev.eval(y_pred, split="test"))  # average, worst group and class, intervals',
        ]
    lines += [
        'groups = ev.grouping("group", split="train")  # integer group ids (and their names) for reweighting or GroupDRO',
        "```",
    ]
    return "\n".join(lines)


# The measured per-image cost of evaluate's model pass (benchmarks/bench_eval.py cost --write), package data:
# the cards' time estimates are that cost x the images a command scores, never a number typed into a template.
EVAL_COST_FILE = "eval_cost.json"
QUICK_SAMPLE = 100  # the quick variant's --sample: images of the test split
QUICK_IMAGE_SIZE = 128  # the quick variant's --image-size
FULL_IMAGE_SIZE = 224  # EfficientNet-Lite0's own input side (models.lite0), the full command's


def eval_cost() -> dict[str, Any]:
    """The measured cost file: ``seconds_per_image`` by input side (\"224\", \"128\"), the ``machine`` it was measured on."""
    return json.loads((resources.files("metashift_hf.cards") / EVAL_COST_FILE).read_text(encoding="utf-8"))


def estimated_seconds(images: int, image_size: int, cost: dict[str, Any]) -> int:
    """Seconds of Lite0's model pass over ``images`` at ``image_size`` px: the measured per-image cost x images (>= 1)."""
    return max(1, round(cost["seconds_per_image"][str(image_size)] * images))


def _duration(seconds: int) -> str:
    return f"about {seconds:,} s" + (f" ({seconds / 60:.0f} min)" if seconds >= 120 else "")


def _quick_variant(info: CardTask, task: str) -> str:
    """The quick evaluate (test split, a sample, 128 px) with its time and the full run's, both from the measured cost."""
    test = info.split_images.get("test")
    if not test:
        return ""
    cost = eval_cost()
    quick = min(QUICK_SAMPLE, test)
    full = sum(info.split_images.values())  # no image is in two splits
    full_s = estimated_seconds(full, FULL_IMAGE_SIZE, cost)
    quick_s = estimated_seconds(quick, QUICK_IMAGE_SIZE, cost)
    return (
        f"Or a quick look: the test split only, {quick:,} of its {test:,} images, fed at {QUICK_IMAGE_SIZE} px instead "
        f"of the model's {FULL_IMAGE_SIZE} (the report says it is not the full-resolution score). EfficientNet-Lite0's model pass "
        f"on {cost['machine']}: {_duration(quick_s)} for this, {_duration(full_s)} for the {full:,} images of the "
        f"full run above (measured {cost['seconds_per_image'][str(QUICK_IMAGE_SIZE)]} and "
        f"{cost['seconds_per_image'][str(FULL_IMAGE_SIZE)]} s per image by `benchmarks/bench_eval.py cost`; model loading and "
        "scoring add a few seconds):\n\n"
        f"```bash\nmetashift-hf evaluate --model efficientnet-lite0 --task {task} --splits test --sample {QUICK_SAMPLE} "
        f"--image-size {QUICK_IMAGE_SIZE} --out eval-quick\n```\n\n"
    )


def usage(info: CardTask) -> str:
    """Commands that run as written with only this package and this repo (tests run them verbatim)."""
    task = f"{shlex.quote(info.repo_id)} --config {info.task_id}"
    if (
        getattr(info.spec, "registry", None) is not None
    ):  # matched to ImageNet-1k: what a pretrained classifier gets right
        return (
            "Evaluate a pretrained ImageNet-1k classifier (`--model efficientnet-lite0`, whose weights ship with "
            "the package, or another model of the registry: docs/evaluate.md): accuracy per class and per context "
            "with intervals, worst context and context bugs:\n\n"
            f"```bash\nmetashift-hf evaluate --model efficientnet-lite0 --task {task} --out eval-lite0\n```\n\n"
            f"{_quick_variant(info, task)}"
            f"Or score your own model's predictions on the task's classes from Python:\n\n{_score_in_python(info)}"
        )
    return (
        "Score your model inside its training loop (numpy or torch arrays; the truth and the groups come from the "
        f"task):\n\n{_score_in_python(info)}\n\nOr from the shell: an ERM baseline (a linear probe on EfficientNet-Lite0 "
        "features), then the scores of its predictions (`score` takes any model's .csv with `image_id` and "
        "`prediction` or `prob_<class>` columns):\n\n"
        f"```bash\nmetashift-hf train --task {task} --probe linear --out runs-erm\n"
        f"metashift-hf score --task {task} --predictions runs-erm/seed-0/predictions.csv --out scores-erm\n```"
    )


def render_task_card(info: CardTask, configs) -> str:
    provenance = info.build.get("artifact_source")
    source_info = info.build.get("artifact_source_info")
    body = _render(
        "task_card.md",
        task_id=info.task_id,
        repo_id=info.repo_id,
        opening=_opening(info.spec, provenance, source_info),
        metric=recommended_metric(info),
        usage=usage(info),
        example=_example(info),
        personal=personal_information(provenance, source_info),
        # the page title already names the task: no second "Task `ID`" heading
        task_section=render_task_section(info, heading="## Details"),
        about=_about(provenance, source_info),
    )
    return _card(card_data([info], configs, f"MetaShift: {info.task_id}", provenance, source_info), body)


def _task_link(info: CardTask) -> str:
    """The task id as a link to its repo: the Hub page for ``ns/repo``, else the local folder."""
    if info.repo_id.count("/") == 1 and not info.repo_id.startswith((".", "/")):
        return f"[`{info.task_id}`](https://huggingface.co/datasets/{info.repo_id})"
    return f"[`{info.task_id}`](../{Path(info.repo_id).name})"


def render_index_card(infos: list[CardTask], art, *, configs=None, repo_id: str) -> str:
    """The ``metashift`` overview. With ``configs`` (one-repo layout) it also holds every task."""

    rows = []
    for i in infos:
        spec = i.spec
        groups = spec.groups()
        dist = spec.distance.value if spec.distance is not None else None
        mf = spec.minority_fraction.achieved if spec.minority_fraction is not None else None
        rows.append(
            f'| {_task_link(i)} | `load_dataset("{i.repo_id}", "{i.task_id}")` | {", ".join(spec.classes)} | '
            f"{shift_label(spec)} ({spec.shift_type}) | {_cell(_contexts(groups.get('train', ())))} | "
            f"{_cell(_contexts(groups.get('test', ())))} | {_fmt(dist)} | {_fmt(mf)} | {sum(i.split_rows.values()):,} |"
        )
    sections = "\n\n".join(render_task_section(i) for i in infos) if configs else ""
    body = _render(
        "index_card.md",
        package_version=__version__,
        artifact_hash=art.content_hash,
        provenance=provenance_banner(art.provenance, art.manifest.source_info),
        tasks_table="\n".join(rows),
        sections=sections,
        about=_about(art.provenance, art.manifest.source_info, sections=bool(sections)),
    )
    return _card(card_data(infos, configs, "MetaShift", art.provenance, art.manifest.source_info), body)
