"""The MetaShift paper's cat/dog tasks (Liang & Zou, ICLR 2022), as package data.

Facts (group definitions, leakage order, sizes, published distances) are transcribed from the
paper and the original code's task definitions; they live here so that building a paper task
needs nothing but an artifact. A group is the union of ``<class>(<context>)`` subsets.

Task ids: ``paper-dg-cat-dog-1`` .. ``-4`` (domain generalisation; four dog training sets of
growing distance to ``dog(shelf)``) and ``paper-subpop-cat-dog-p12|p6|p1`` (indoor/outdoor
subpopulation shift, minority 100/50/10 training images per class).
"""

from __future__ import annotations

from typing import Mapping

from metashift_hf.builders.metagraph import group_distance_code
from metashift_hf.core import options as opt
from metashift_hf.core.errors import (
    MetashiftError,
    UnknownNameError,
    did_you_mean,
)

from .plan import GroupDef, GroupSource, TaskPlan
from .shifts import (
    DGGroups,
    DGSizes,
    SubpopSizes,
    ambiguous_images,
    domain_generalisation,
    group_images,
    subpopulation_shift,
)
from .spec import PaperFacts, ShiftDistance


CLASSES = ("cat", "dog")

# Ambiguous images: cat(dog) (== dog(cat)) are removed from every cat and dog group.
LEAKAGE_ORDER = (
    "test groups: remove ambiguous images",
    "train groups: remove ambiguous images and every test image",
    "additional test groups: remove ambiguous images and every train image",
)

# ---- domain generalisation -------------------------------------------------------------------
DG_TRAIN_CAT: dict[str, tuple[str, ...]] = {
    "cat(sofa)": ("cup", "sofa", "chair"),
    "cat(bed)": ("bed", "comforter", "sheet", "blanket", "remote control", "pillow", "couch"),
}
DG_DOG_EXPERIMENTS: tuple[dict[str, tuple[str, ...]], ...] = (
    {
        "dog(cabinet)": ("floor", "clothes", "towel", "door", "rug", "cabinet"),
        "dog(bed)": ("blanket", "bed", "sheet", "remote control", "pillow", "lamp", "couch", "books", "curtain"),
    },
    {"dog(bag)": ("bag", "backpack", "purse"), "dog(box)": ("box", "container", "food", "table", "plate", "cup")},
    {"dog(bench)": ("bench", "trash can"), "dog(bike)": ("basket", "woman", "bike", "bicycle")},
    {"dog(boat)": ("frisbee", "rope", "flag", "trees", "boat"), "dog(surfboard)": ("water", "surfboard", "sand")},
)
DG_PAPER_DISTANCES = (0.44, 0.71, 1.12, 1.43)
DG_ORIGINAL_CODE_DISTANCES = (0.025, 0.755, 1.049, 1.332)  # what the released code prints
DG_TEST: dict[str, tuple[str, ...]] = {
    "cat(shelf)": ("container", "shelf", "vase", "bowl"),
    "dog(shelf)": ("desk", "screen", "laptop", "shelf", "picture", "chair"),
}
DG_ADDITIONAL_TEST: dict[str, tuple[str, ...]] = {
    "cat(grass)": ("house", "car", "grass", "bird"),
    "cat(sink)": ("sink", "bottle", "faucet", "towel", "toilet"),
    "cat(computer)": ("speaker", "computer", "screen", "laptop", "computer mouse", "keyboard", "monitor", "desk"),
    "cat(box)": ("box", "paper", "suitcase", "bag"),
    "cat(book)": ("books", "book", "television", "bookshelf", "blinds"),
    "dog(sofa)": ("sofa", "television", "carpet", "phone", "book"),
    "dog(grass)": ("house", "grass", "horse", "cow", "sheep", "animal"),
    "dog(vehicle)": ("car", "motorcycle", "truck", "bike", "basket", "bicycle", "skateboard"),
    "dog(cap)": ("cap", "scarf", "jacket", "toy", "collar", "tie"),
}
DG_PAPER_SIZES = {"train_total": 400, "test_dog_shelf": 129}
# Declared joint, not marginal: the training groups are class-specific (cat(sofa), cat(bed) vs the dog
# groups: the group context tells the class in training) while cat(shelf) and dog(shelf) share the test
# context, so P(Y|S) shifts as well as P(S); in -4 every training cat is indoor and no training dog is,
# and the test is all indoor. ShiftSpec.measured gives the figures (metashift_hf/tasks/measured.py).
DG_SHIFT_TYPE = "joint"

# ---- subpopulation shift ---------------------------------------------------------------------
SUBPOP_GROUPS: dict[str, tuple[str, ...]] = {
    "cat(outdoor)": ("car", "fence", "grass", "roof", "bench", "bird", "house"),
    "dog(indoor)": (
        "screen",
        "shelf",
        "desk",
        "picture",
        "laptop",
        "remote control",
        "blanket",
        "bed",
        "sheet",
        "lamp",
        "books",
        "pillow",
        "curtain",
        "container",
        "table",
        "cup",
        "plate",
        "food",
        "box",
        "rug",
        "floor",
        "cabinet",
        "towel",
        "bowl",
        "television",
        "carpet",
        "sofa",
    ),
    "cat(indoor)": (
        "speaker",
        "computer",
        "screen",
        "laptop",
        "computer mouse",
        "keyboard",
        "monitor",
        "desk",
        "sheet",
        "bed",
        "blanket",
        "remote control",
        "comforter",
        "pillow",
        "couch",
        "books",
        "book",
        "television",
        "bookshelf",
        "blinds",
        "sink",
        "bottle",
        "faucet",
        "towel",
        "counter",
        "curtain",
        "toilet",
        "pot",
        "carpet",
        "toy",
        "floor",
        "plate",
        "rug",
        "food",
        "table",
        "box",
        "paper",
        "suitcase",
        "bag",
        "container",
        "vase",
        "shelf",
        "bowl",
        "picture",
        "papers",
        "lamp",
        "cup",
        "sofa",
    ),
    "dog(outdoor)": (
        "house",
        "grass",
        "horse",
        "fence",
        "cow",
        "sheep",
        "dirt",
        "car",
        "motorcycle",
        "truck",
        "helmet",
        "snow",
        "flag",
        "boat",
        "rope",
        "trees",
        "frisbee",
        "bike",
        "bicycle",
        "sand",
        "surfboard",
        "water",
        "fire hydrant",
        "pole",
        "skateboard",
        "bench",
        "trash can",
    ),
}
SUBPOP_MINORITY = ("cat(outdoor)", "dog(indoor)")
SUBPOP_MAJORITY = ("cat(indoor)", "dog(outdoor)")
# The original code truncates each group after a seeded shuffle; test + train must fit in it.
SUBPOP_POOL = {"cat(outdoor)": 294, "dog(indoor)": 294, "cat(indoor)": 994, "dog(outdoor)": 994}
SUBPOP_VARIANTS = {"p12": 100, "p6": 50, "p1": 10}  # minority training images per class
SUBPOP_PAPER_SIZES = {"train_total": 1700, "test_total": 576}  # the test split is the balanced test set
SUBPOP_PAPER_FRACTIONS = ("12%", "6%", "1%")
# Table 2's ERM figures at p = 12/6/1% (balanced test, 576 images): average and worst-group accuracy.
# Package data, so that experiments can print them on any machine; tests/test_paper_tasks.py checks
# them against the reference transcription (paper-tasks.json).
SUBPOP_PAPER_ERM: dict[str, tuple[float, ...]] = {
    "average": (0.84, 0.823, 0.759),
    "worst_group": (0.715, 0.701, 0.562),
}
AMBIGUOUS_RULE = "images of cat(dog)/dog(cat) and images in subsets of both classes"

DG_IDS = tuple(f"paper-dg-cat-dog-{i}" for i in range(1, 5))
SUBPOP_IDS = tuple(f"paper-subpop-cat-dog-{v}" for v in SUBPOP_VARIANTS)
TASK_IDS = DG_IDS + SUBPOP_IDS


def _group(name: str, contexts: tuple[str, ...], defining: bool) -> GroupDef:
    cls, label = name[: name.index("(")], name[name.index("(") + 1 : -1]
    # DG groups are named after a context of theirs (dog(shelf) holds dog(shelf)); indoor/outdoor are not.
    return GroupDef(cls, label, tuple(contexts), label if defining and label in contexts else "")


def _check_id(task_id: str) -> None:
    if task_id not in TASK_IDS:
        raise UnknownNameError(
            f"unknown paper task {task_id!r}" + did_you_mean(task_id, TASK_IDS), f"use one of {', '.join(TASK_IDS)}"
        )


def applicable(source: GroupSource) -> list[str]:
    """The paper task ids whose groups all have images on this source (sizes aside): an artifact
    of attribute subsets only has classes cat and dog but none of the paper's object contexts."""

    def has(name: str, contexts: tuple[str, ...]) -> bool:
        return bool(group_images(source, _group(name, contexts, True)))

    ids = []
    if all(has(n, c) for n, c in DG_TEST.items()) and all(has(n, c) for n, c in DG_TRAIN_CAT.items()):
        ids += [i for i, e in zip(DG_IDS, DG_DOG_EXPERIMENTS) if all(has(n, c) for n, c in e.items())]
    if all(has(n, c) for n, c in SUBPOP_GROUPS.items()):
        ids += list(SUBPOP_IDS)
    return ids


def dg_distance(source: GroupSource, experiment: int) -> ShiftDistance:
    """The original code's distance of dog training set ``experiment`` (1..4) to dog(shelf).

    Meta-graph over every dog group of the task family (test, the 8 training groups, the
    additional test groups; ambiguous images removed), spectral layout dim 5, mean distance of the
    experiment's two groups to ``dog(shelf)``.
    """

    amb = ambiguous_images(source, CLASSES)
    dog_groups = {
        **{k: v for k, v in DG_TEST.items() if k.startswith("dog(")},
        **{k: v for e in DG_DOG_EXPERIMENTS for k, v in e.items()},
        **{k: v for k, v in DG_ADDITIONAL_TEST.items() if k.startswith("dog(")},
    }
    sets = {k: group_images(source, _group(k, v, True)) - amb for k, v in sorted(dog_groups.items())}
    sets = {k: v for k, v in sets.items() if v}
    train_names = sorted(DG_DOG_EXPERIMENTS[experiment - 1])
    published = {
        "paper_value": DG_PAPER_DISTANCES[experiment - 1],
        "original_code_value": DG_ORIGINAL_CODE_DISTANCES[experiment - 1],
    }
    try:
        d = group_distance_code(sets, "dog(shelf)", train_names)
    except MetashiftError as exc:
        return ShiftDistance(value=None, rule="code", note=f"not computable on this artifact: {exc.what}", **published)
    if d.value is None:
        return ShiftDistance(
            value=None,
            rule="code",
            metric=d.status,
            note="dog(shelf) and a training group are "
            "disconnected in the meta-graph over all dog groups of the task family",
            **published,
        )
    return ShiftDistance(
        value=round(d.value, 6),
        rule="code",
        metric=d.rule,
        note="mean distance of the two dog training groups to dog(shelf), meta-graph over all dog "
        "groups of the task family (edges < 0.2 dropped, spectral dim 5)",
        **published,
    )


def dg_plan(
    task_id: str, source: GroupSource, *, sizes: DGSizes = DGSizes(), seed: int = 0, with_distance: bool = True
) -> TaskPlan:
    """``paper-dg-cat-dog-<k>``: train cat(sofa), cat(bed) + dog experiment k; test cat(shelf),
    dog(shelf) (the paper's test set). The additional test groups join the test split, flagged
    ``additional`` in the spec, only with ``additional_test_per_group`` (None = whole groups)."""
    _check_id(task_id)
    k = int(task_id.rsplit("-", 1)[1])
    train = [_group(n, c, True) for n, c in DG_TRAIN_CAT.items()]
    train += [_group(n, c, True) for n, c in DG_DOG_EXPERIMENTS[k - 1].items()]
    test = [_group(n, c, True) for n, c in DG_TEST.items()]
    extra = [_group(n, c, True) for n, c in DG_ADDITIONAL_TEST.items()]
    distance = dg_distance(source, k) if with_distance else None
    return domain_generalisation(
        task_id,
        source,
        DGGroups(tuple(CLASSES), tuple(train), tuple(test), tuple(extra)),
        sizes=sizes,
        seed=seed,
        distance=distance,
        shift_type=DG_SHIFT_TYPE,
        paper=PaperFacts(sizes=dict(DG_PAPER_SIZES), ambiguous_rule=AMBIGUOUS_RULE, leakage_order=LEAKAGE_ORDER),
    )


def subpop_plan(
    task_id: str, source: GroupSource, *, sizes: SubpopSizes | None = None, seed: int = 0, use_pool: bool = True
) -> TaskPlan:
    """``paper-subpop-cat-dog-<variant>``: cat mostly indoor, dog mostly outdoor in training;
    balanced test over the four groups."""
    _check_id(task_id)
    variant = task_id.rsplit("-", 1)[1]
    if sizes is None:
        sizes = SubpopSizes(minority_per_class=SUBPOP_VARIANTS[variant])
    groups = {n: _group(n, c, False) for n, c in SUBPOP_GROUPS.items()}
    return subpopulation_shift(
        task_id,
        source,
        majority=[groups[n] for n in SUBPOP_MAJORITY],
        minority=[groups[n] for n in SUBPOP_MINORITY],
        sizes=sizes,
        seed=seed,
        pool=SUBPOP_POOL if use_pool else None,
        paper=PaperFacts(
            sizes=dict(SUBPOP_PAPER_SIZES),
            ambiguous_rule=AMBIGUOUS_RULE,
            pool=dict(SUBPOP_POOL) if use_pool else None,
            minority_fractions=SUBPOP_PAPER_FRACTIONS,
        ),
    )


def default_sizes(task_id: str) -> DGSizes | SubpopSizes:
    _check_id(task_id)
    if task_id in DG_IDS:
        return DGSizes()
    return SubpopSizes(minority_per_class=SUBPOP_VARIANTS[task_id.rsplit("-", 1)[1]])


def sized(
    task_id: str,
    sizes: DGSizes | SubpopSizes,
    scale: float | None = None,
    overrides: Mapping[str, object] | None = None,
) -> DGSizes | SubpopSizes:
    """``sizes`` with ``scale`` (multiplies every size) and ``overrides`` (individual size fields,
    ``minority_fraction`` for subpopulation sizes) applied and checked."""
    from dataclasses import fields, replace

    if scale is not None:
        if not 0 < opt.finite_float(scale, "scale") <= 1:
            raise opt.OptionError(
                f"scale must lie in (0, 1], got {scale}",
                "pass e.g. scale=0.1 to build a tenth-size version of the paper task",
            )
        sizes = sizes.scaled(float(scale))
    overrides = dict(overrides or {})
    if "minority_fraction" in overrides and isinstance(sizes, SubpopSizes):
        sizes = sizes.with_fraction(opt.finite_float(overrides.pop("minority_fraction"), "minority_fraction"))
    names = {f.name for f in fields(sizes)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise UnknownNameError(
            f"unknown override(s) {bad} for task {task_id}" + did_you_mean(bad[0], names),
            f"this task accepts: {', '.join(sorted(names | {'scale', 'seed'}))}"
            + (", minority_fraction" if isinstance(sizes, SubpopSizes) else ""),
        )
    for k, v in overrides.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < 0):
            # a bad value, not a task too big for the artifact: the resolver must not answer it with a --set scale=
            raise opt.OptionError(
                f"override {k}={v!r} for task {task_id} is not a non-negative integer",
                f"pass {k}=<count>, e.g. {k}=20",
            )
    return replace(sizes, **{k: (None if v is None else int(v)) for k, v in overrides.items()})


def plan(
    task_id: str,
    source: GroupSource,
    *,
    seed: int = 0,
    scale: float | None = None,
    overrides: Mapping[str, object] | None = None,
) -> TaskPlan:
    """Build a paper task; ``scale`` multiplies every size (the pool check is then dropped, since
    the paper's pools are absolute), ``overrides`` set individual size fields."""
    sizes = sized(task_id, default_sizes(task_id), scale, overrides)
    if isinstance(sizes, DGSizes):
        return dg_plan(task_id, source, sizes=sizes, seed=seed)
    return subpop_plan(task_id, source, sizes=sizes, seed=seed, use_pool=scale is None)
