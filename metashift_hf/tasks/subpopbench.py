"""``subpopbench-cat-dog``: SubpopBench's MetaShift (Yang et al., "Change is Hard: A Closer Look at Subpopulation
Shift", ICML 2023), as a task.

The four groups are MetaShift's unmixed indoor/outdoor folders, made by MetaShift's
``dataset/subpopulation_shift_cat_dog_indoor_outdoor.py`` (github.com/Weixin-Liang/MetaShift, commit 7e5e2974)::

    trainsg_dupes = node_name_to_img_id['cat(dog)'] # can also use 'dog(cat)'
    ...
    test_community_name_to_img_id, test_all_img_id = parse_dataset_scheme(test_set_scheme, node_name_to_img_id,
        exclude_img_id=trainsg_dupes, split='test')
    train_community_name_to_img_id, train_all_img_id = parse_dataset_scheme(train_set_scheme, node_name_to_img_id,
        exclude_img_id=test_all_img_id.union(trainsg_dupes), split='train')

that is, the test groups ``cat(outdoor)``, ``dog(indoor)`` first, then the train groups ``cat(indoor)``,
``dog(outdoor)`` without the test groups' images, cat-dog images removed everywhere (here
:func:`shifts.ambiguous_images`: ``cat(dog)``, ``dog(cat)`` and any image in subsets of both classes, the same
images: an image in a subset of each class shows both). The contexts of each group are the paper task's
(:data:`paper_tasks.SUBPOP_GROUPS`, transcribed from that script's schemes).

SubpopBench pools the four folders and splits them at random, in ``subpopbench/scripts/download.py``
(github.com/YyzHarry/SubpopBench, commit 4d3dbbe2)::

    def generate_metadata_metashift(data_path, test_pct=0.25, val_pct=0.1):
        dirs = {
            'train/cat/cat(indoor)': [1, 1],
            'train/dog/dog(outdoor)': [0, 0],
            'test/cat/cat(outdoor)': [1, 0],
            'test/dog/dog(indoor)': [0, 1]
        }
        ...
        for dir in dirs:
            ...
            for img_path in Path(folder_path).glob('*.jpg'):
                all_data.append({'filename': img_path, 'y': y, 'a': g})
        df = pd.DataFrame(all_data)
        rng = np.random.RandomState(42)
        test_idxs = rng.choice(np.arange(len(df)), size=int(len(df) * test_pct), replace=False)
        val_idxs = rng.choice(np.setdiff1d(np.arange(len(df)), test_idxs), size=int(len(df) * val_pct), replace=False)
        split_array = np.zeros((len(df), 1))
        split_array[val_idxs] = 1
        split_array[test_idxs] = 2

Differences, stated: ``Path.glob`` lists a folder in the file system's directory order, so SubpopBench's own split
depends on the machine that ran it; this task lists each folder sorted by file name (``<image_id>.jpg``), in the
folders' order above, so the same build always gives the same split. ``metadata=PATH`` takes a SubpopBench
``metadata_metashift.csv`` and uses its ``split`` column as it is (0 train, 1 validation, 2 test; image ids from
the file names), for the exact split a published run used. The split is random over the pool, so train and test
hold the groups in the same proportions (declared ``none``: no shift between the splits by design); the
subpopulation shift SubpopBench measures is within each split: cats are mostly indoor and dogs mostly outdoor, and
its headline is worst-group accuracy on test.
"""

from __future__ import annotations

import csv
import os
import stat
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from metashift_hf.core.errors import EmptyGroupError, InputFormatError

from .paper_tasks import SUBPOP_GROUPS
from .plan import GroupDef, GroupSource, TaskPlan
from .shifts import _carve, _group_spec, _RowMaker, ambiguous_images, finish_plan


TASK_ID = "subpopbench-cat-dog"
CLASSES = ("cat", "dog")
# generate_metadata_metashift's folders, in its order: (group, y, a) with y = 1 cat, a = 1 indoor
FOLDERS: tuple[tuple[str, int, int], ...] = (
    ("cat(indoor)", 1, 1),
    ("dog(outdoor)", 0, 0),
    ("cat(outdoor)", 1, 0),
    ("dog(indoor)", 0, 1),
)
TEST_GROUPS = ("cat(outdoor)", "dog(indoor)")  # MetaShift's script carves these first
TRAIN_GROUPS = ("cat(indoor)", "dog(outdoor)")
SPLIT_SEED = 42  # np.random.RandomState(42)
TEST_PCT, VAL_PCT = 0.25, 0.1
SPLIT_CODES = {0: "train", 1: "validation", 2: "test"}  # SubpopDataset.SPLITS: tr 0, va 1, te 2
LISTING_RULE = (
    "the four folders in generate_metadata_metashift's order (cat(indoor), dog(outdoor), cat(outdoor), dog(indoor)), "
    "each sorted by file name (<image_id>.jpg); SubpopBench's own listing is Path.glob's, the file system's order"
)
AMBIGUOUS_RULE = "images of cat(dog)/dog(cat) and images in subsets of both classes (MetaShift's trainsg_dupes)"
MAX_METADATA_BYTES = 64 * 2**20
# What the card, `tasks show` and the Space say the task is (declared `none` with a test split)
DESIGN_WORDS = (
    "SubpopBench's MetaShift: the four indoor/outdoor groups pooled and split at random, so train and test hold "
    "them in the same proportions; the subpopulation shift is within each split (cats mostly indoor, dogs mostly "
    "outdoor), and SubpopBench reports worst-group accuracy on test"
)


def _groups() -> dict[str, GroupDef]:
    return {
        name: GroupDef(name[: name.index("(")], name[name.index("(") + 1 : -1], SUBPOP_GROUPS[name])
        for name, _, _ in FOLDERS
    }


def carve_groups(source: GroupSource) -> tuple[dict[str, list[str]], Counter]:
    """Group -> its images in SubpopBench's listing order (:data:`LISTING_RULE`), carved as MetaShift's script does
    (test groups first, then the train groups without the test images; cat-dog images removed)."""
    groups, removed = _groups(), Counter()
    amb = ambiguous_images(source, CLASSES)
    test = _carve(source, [groups[n] for n in TEST_GROUPS], ambiguous=amb, exclude=set(), removed=removed)
    taken = set().union(*test.values())
    train = _carve(source, [groups[n] for n in TRAIN_GROUPS], ambiguous=amb, exclude=taken, removed=removed)
    carved = {**test, **train}
    for name, ids in carved.items():
        if not ids:
            raise EmptyGroupError(
                f"task {TASK_ID}: group {name} has no images after removing cat-dog images",
                "build the artifact from GQA scene graphs (or the demo world), whose cats and dogs have these contexts",
            )
    return {name: sorted(carved[name], key=lambda i: f"{i}.jpg") for name, _, _ in FOLDERS}, removed


def subpopbench_split(
    n: int, test_pct: float = TEST_PCT, val_pct: float = VAL_PCT, seed: int = SPLIT_SEED
) -> np.ndarray:
    """generate_metadata_metashift's split codes (0 train, 1 validation, 2 test) of ``n`` listed images, its lines
    as they are (module docstring)."""
    rng = np.random.RandomState(seed)
    test_idxs = rng.choice(np.arange(n), size=int(n * test_pct), replace=False)
    val_idxs = rng.choice(np.setdiff1d(np.arange(n), test_idxs), size=int(n * val_pct), replace=False)
    split_array = np.zeros(n, dtype=np.int64)
    split_array[val_idxs] = 1
    split_array[test_idxs] = 2
    return split_array


def _image_id(filename: str) -> str:
    """``.../cat(indoor)/2400000.jpg`` -> ``2400000`` (either path separator)."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return name[: -len(".jpg")] if name.lower().endswith(".jpg") else name


def read_metadata(path: "str | os.PathLike") -> dict[str, tuple[int, int, int]]:
    """A SubpopBench ``metadata_metashift.csv``: image id -> (y, a, split code); every problem an error naming the
    file and the row."""
    p = Path(path).expanduser()
    fix = "pass the metadata_metashift.csv that SubpopBench's `python -m subpopbench.scripts.download` wrote"
    try:
        st = os.stat(p)
    except OSError:
        raise InputFormatError(f"{TASK_ID}: metadata file {p} does not exist", fix) from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
        raise InputFormatError(f"{TASK_ID}: metadata {p} is not a regular file", fix)
    if st.st_size > MAX_METADATA_BYTES:
        raise InputFormatError(f"{TASK_ID}: metadata {p} is {st.st_size:,} bytes, not a MetaShift metadata file", fix)
    out: dict[str, tuple[int, int, int]] = {}
    with open(p, newline="", encoding="utf-8", errors="strict") as fh:
        try:
            reader = csv.DictReader(fh)
            missing = [c for c in ("filename", "y", "a", "split") if c not in (reader.fieldnames or [])]
            if missing:
                raise InputFormatError(f"{TASK_ID}: metadata {p} lacks the column(s) {', '.join(missing)}", fix)
            for line, row in enumerate(reader, start=2):
                try:
                    y, a, split = int(float(row["y"])), int(float(row["a"])), int(float(row["split"]))
                except (TypeError, ValueError):
                    raise InputFormatError(
                        f"{TASK_ID}: metadata {p} line {line}: y, a, split must be integers", fix
                    ) from None
                if split not in SPLIT_CODES or y not in (0, 1) or a not in (0, 1):
                    raise InputFormatError(
                        f"{TASK_ID}: metadata {p} line {line}: y={y}, a={a}, split={split} (y and a are 0/1, split 0/1/2)",
                        fix,
                    )
                image = _image_id(row["filename"] or "")
                if not image:
                    raise InputFormatError(f"{TASK_ID}: metadata {p} line {line}: no file name", fix)
                if image in out:
                    raise InputFormatError(f"{TASK_ID}: metadata {p} line {line}: image {image} is listed twice", fix)
                out[image] = (y, a, split)
        except UnicodeDecodeError:
            raise InputFormatError(f"{TASK_ID}: metadata {p} is not UTF-8 text", fix) from None
        except csv.Error as exc:
            raise InputFormatError(f"{TASK_ID}: metadata {p} is not a CSV file ({exc})", fix) from None
    if not out:
        raise InputFormatError(f"{TASK_ID}: metadata {p} has no rows", fix)
    return out


def _splits_from_metadata(
    metadata: Mapping[str, tuple[int, int, int]], carved: Mapping[str, Sequence[str]], path: str
) -> tuple[dict[str, str], list[str]]:
    """image id -> split from the file (as it is), and the notes; ids not in the build, or in another group there,
    are refused by name."""
    group_of = {i: name for name, ids in carved.items() for i in ids}
    by_code = {(y, a): name for name, y, a in FOLDERS}
    absent = sorted(i for i in metadata if i not in group_of)
    moved = sorted(i for i, (y, a, _) in metadata.items() if i in group_of and by_code[(y, a)] != group_of[i])
    for bad, what in ((absent, "not in this build's four groups"), (moved, "in another group in this build")):
        if bad:
            raise InputFormatError(
                f"{TASK_ID}: {len(bad)} image(s) of metadata {path} are {what}: {', '.join(bad[:20])}"
                + (f" and {len(bad) - 20} more" if len(bad) > 20 else ""),
                "build the artifact from the same GQA release (MetaShift's scene graphs), or drop metadata= to split "
                "this build's images by SubpopBench's rule",
            )
    left = len(group_of) - len(metadata)
    notes = [
        f"split from SubpopBench metadata {Path(path).name}: its split column as it is ({len(metadata):,} images)"
    ]
    if left:
        notes.append(f"{left:,} image(s) of this build's groups are not in the metadata and are left out")
    return {i: SPLIT_CODES[s] for i, (_, _, s) in metadata.items()}, notes


def plan(source: GroupSource, *, metadata: "str | os.PathLike | None" = None, seed: int = 0) -> TaskPlan:
    """The task's plan: the four groups, split by SubpopBench's rule over the sorted listing, or by ``metadata``."""
    carved, removed = carve_groups(source)
    listing = [(name, i) for name, _, _ in FOLDERS for i in carved[name]]
    if metadata is None:
        codes = subpopbench_split(len(listing))
        split_of = {i: SPLIT_CODES[int(c)] for (_, i), c in zip(listing, codes)}
        notes = [
            f"split by generate_metadata_metashift (RandomState({SPLIT_SEED}), {TEST_PCT:g} test, then "
            f"{VAL_PCT:g} of the pool as validation) over {LISTING_RULE}"
        ]
    else:
        split_of, notes = _splits_from_metadata(read_metadata(metadata), carved, str(metadata))
    groups = _groups()
    rm = _RowMaker(source)
    splits: dict[str, list] = {s: [] for s in ("train", "validation", "test")}
    for name, i in listing:
        if i in split_of:
            splits[split_of[i]] += rm.rows(groups[name], [i])
    entries = {s: [_group_spec(groups[n]) for n, _, _ in FOLDERS] for s in splits}
    return finish_plan(
        TASK_ID,
        "none",
        CLASSES,
        seed,
        splits,
        entries,
        removed,
        notes=[*notes, f"removed: {AMBIGUOUS_RULE}"],
    )


__all__ = [
    "CLASSES",
    "DESIGN_WORDS",
    "FOLDERS",
    "LISTING_RULE",
    "TASK_ID",
    "carve_groups",
    "plan",
    "read_metadata",
    "subpopbench_split",
]
