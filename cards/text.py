"""Card text that does not depend on a task: the templates, what each feature and each provenance
means, the licence and personal-information paragraphs, and cell formatting."""

from __future__ import annotations

from importlib import resources
from string import Template
from typing import Any

from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.provenance import SourceInfo, describe, is_synthetic


# BibTeX of the data sources, after MetaShift's in every card's Citation block (templates/citation_*.md)
CITE_VG, CITE_COCO = "citation_vg.md", "citation_coco.md"

# Templates are package data of metashift_hf.cards, read through importlib.resources so they work from a wheel.
TEMPLATE_DIR = resources.files("metashift_hf.cards") / "templates"


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


def load_template(name: str) -> Template:
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


def user_source(info: SourceInfo | None) -> str:
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
            f"> Provenance: built from {user_source(source_info)} with MetaShift's construction (artifact "
            "`source: custom`): not Visual Genome / GQA data, and not comparable with the MetaShift paper's figures."
        )
    return f"> Provenance: built from {describe(provenance)} (artifact `source: {provenance}`)."


def about(provenance: str | None, source_info: SourceInfo | None = None, *, sections: bool = True) -> str:
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
            f"Images and labels come from {user_source(source_info)}, not from Visual Genome or GQA; the subset "
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
    return render_template(
        "about.md",
        licence=licence,
        biases_note=note,
        source_citations=load_template(cite).template if cite else "",
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
            f"The images come from {user_source(source_info)}; whether they show people, faces, licence plates or "
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


def render_template(name: str, **values: Any) -> str:
    try:
        return load_template(name).substitute(**values)
    except KeyError as exc:
        raise InputFormatError(
            f"card template {name} uses ${exc.args[0]}, which the renderer does not fill",
            "fix the template (cards/templates/) or the values cards/render.py passes, so every placeholder is filled",
        ) from exc


def cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)
