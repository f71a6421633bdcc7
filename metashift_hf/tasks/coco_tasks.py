"""The MetaShift paper's COCO subpopulation experiment (Appendix D) as task configs.

``paper-coco-subpop-cat-dog-p13`` / ``-p7`` / ``-p1``: cat vs dog, where "indoor" = the COCO
super-categories indoor, kitchen, electronic, appliance, furniture and "outdoor" = outdoor,
vehicle, sports. Training: 3,000 images (1,500 per class), cats mostly indoor and dogs mostly
outdoor, the minority (outdoor cats, indoor dogs) p = 13 / 7 / 1 % of each class; test: balanced,
524 images (131 per group). A group is the union of the class's subsets whose context has one of
those super-categories (subsets.parquet ``category`` of a COCO build), kept or not; images of both
classes are dropped, an image with indoor and outdoor objects belongs to the minority group (the
GQA task's rule), and the splits share no image (asserted when the plan is made).
"""

from __future__ import annotations

from metashift_hf.core.errors import EmptyResultError, UnknownNameError, did_you_mean

from .plan import ArtifactSource, GroupDef, TaskPlan
from .shifts import SubpopSizes, subpopulation_shift
from .spec import PaperFacts


CLASSES = ("cat", "dog")
INDOOR = ("indoor", "kitchen", "electronic", "appliance", "furniture")
OUTDOOR = ("outdoor", "vehicle", "sports")
VARIANTS = {"p13": 0.13, "p7": 0.07, "p1": 0.01}  # minority share of each class's training images
TASK_IDS = tuple(f"paper-coco-subpop-cat-dog-{v}" for v in VARIANTS)
TRAIN_PER_CLASS = 1500  # the paper: 3,000 training images
TEST_PER_GROUP = 131  # the paper: balanced test of 524 images over the 4 groups
VALIDATION_PER_CLASS = 150  # the paper gives none; 10% of training, as the GQA task (85 of 850)
PAPER_SIZES = {"train_total": 3000, "test_total": 524}  # the test split is the balanced test set
PAPER_FRACTIONS = ("13%", "7%", "1%")


def default_sizes(task_id: str) -> SubpopSizes:
    _check_id(task_id)
    base = SubpopSizes(TRAIN_PER_CLASS, 0, TEST_PER_GROUP, VALIDATION_PER_CLASS)
    return base.with_fraction(VARIANTS[task_id.rsplit("-", 1)[1]])


def _check_id(task_id: str) -> None:
    if task_id not in TASK_IDS:
        raise UnknownNameError(
            f"unknown COCO task {task_id!r}" + did_you_mean(task_id, TASK_IDS), f"use one of {', '.join(TASK_IDS)}"
        )


def groups(source: ArtifactSource) -> dict[str, GroupDef]:
    """cat(indoor), cat(outdoor), dog(indoor), dog(outdoor): contexts by their COCO super-category."""
    table = source.artifact.subsets_table()
    out = {}
    for cls in CLASSES:
        rows = table[table["subject"] == cls]
        for label, cats in (("indoor", INDOOR), ("outdoor", OUTDOOR)):
            contexts = tuple(sorted(rows.loc[rows["category"].isin(cats), "context"].astype(str)))
            out[f"{cls}({label})"] = GroupDef(cls, label, contexts)
    return out


def applicable(source: ArtifactSource) -> bool:
    """cat and dog are classes and each has indoor and outdoor contexts (a COCO-style build)."""
    if not set(CLASSES) <= set(source.artifact.classes()):
        return False
    return all(g.contexts for g in groups(source).values())


def plan(task_id: str, source: ArtifactSource, *, sizes: SubpopSizes, seed: int = 0) -> TaskPlan:
    _check_id(task_id)
    if not applicable(source):
        raise EmptyResultError(
            f"task {task_id} needs the classes cat and dog with contexts of COCO super-categories "
            f"({', '.join(INDOOR)} / {', '.join(OUTDOOR)}); artifact {source.artifact.root} has none",
            "build the artifact from COCO: metashift-hf build --coco-annotations instances_train2017.json --out DIR",
        )
    g = groups(source)
    return subpopulation_shift(
        task_id,
        source,
        majority=[g["cat(indoor)"], g["dog(outdoor)"]],
        minority=[g["cat(outdoor)"], g["dog(indoor)"]],
        sizes=sizes,
        seed=seed,
        paper=PaperFacts(
            sizes=dict(PAPER_SIZES),
            minority_fractions=PAPER_FRACTIONS,
            categories={"indoor": INDOOR, "outdoor": OUTDOOR},
            ambiguous_rule="images of both cat and dog; an image with indoor and outdoor objects is in "
            "the minority group",
        ),
    )
