"""Streaming reader of COCO ``instances_*.json`` (or of ``annotations_trainval2017.zip`` itself).

Only what MetaShift needs is kept: each image's id, size and file name, each annotation's
(image id, category id) and the categories (name, super-category). The file (448 MB for train2017)
is never loaded whole: the top-level object is walked key by key and each element of its
``images`` / ``annotations`` / ``categories`` arrays is decoded alone (the scene-graph reader's
rolling buffer). Image ids are COCO's integers written as strings (``"397133"``); COCO's files
are named by the zero-padded id (``000000397133.jpg``), which image sources resolve too.
"""

from __future__ import annotations

import array
import hashlib
import os
import zipfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from metashift_hf.core.errors import InputFormatError, short_repr

from .scene_graphs import _Buffer as JsonBuffer
from .tags import TagTable


# COCO 2017's 80 object categories: (id, name, super-category), as in its instances files
COCO_CATEGORIES: tuple[tuple[int, str, str], ...] = tuple(
    (int(i), n, sup)
    for sup, items in (
        ("person", "1 person"),
        ("vehicle", "2 bicycle|3 car|4 motorcycle|5 airplane|6 bus|7 train|8 truck|9 boat"),
        ("outdoor", "10 traffic light|11 fire hydrant|13 stop sign|14 parking meter|15 bench"),
        ("animal", "16 bird|17 cat|18 dog|19 horse|20 sheep|21 cow|22 elephant|23 bear|24 zebra|25 giraffe"),
        ("accessory", "27 backpack|28 umbrella|31 handbag|32 tie|33 suitcase"),
        (
            "sports",
            "34 frisbee|35 skis|36 snowboard|37 sports ball|38 kite|39 baseball bat|40 baseball glove|"
            "41 skateboard|42 surfboard|43 tennis racket",
        ),
        ("kitchen", "44 bottle|46 wine glass|47 cup|48 fork|49 knife|50 spoon|51 bowl"),
        (
            "food",
            "52 banana|53 apple|54 sandwich|55 orange|56 broccoli|57 carrot|58 hot dog|59 pizza|60 donut|61 cake",
        ),
        ("furniture", "62 chair|63 couch|64 potted plant|65 bed|67 dining table|70 toilet"),
        ("electronic", "72 tv|73 laptop|74 mouse|75 remote|76 keyboard|77 cell phone"),
        ("appliance", "78 microwave|79 oven|80 toaster|81 sink|82 refrigerator"),
        ("indoor", "84 book|85 clock|86 vase|87 scissors|88 teddy bear|89 hair drier|90 toothbrush"),
    )
    for i, n in (x.split(" ", 1) for x in items.split("|"))
)

# the members of annotations_trainval2017.zip the build reads
COCO_INSTANCE_MEMBERS = ("annotations/instances_train2017.json", "annotations/instances_val2017.json")
_FIX = (
    "pass COCO's instances_train2017.json / instances_val2017.json (from annotations_trainval2017.zip, "
    "`metashift-hf download --what coco-annotations`) or the zip itself"
)
_FIX_JSON = (
    "the file is damaged or truncated: download annotations_trainval2017.zip again "
    "(`metashift-hf download --what coco-annotations`), or check the program that wrote it"
)
ID_MAX = 2**63 - 1  # ids are kept in int64 arrays; COCO's own are below 10**12
SIZE_MAX = 2**31 - 1  # a width or height in pixels


@dataclass
class CocoAnnotations:
    """What the build keeps of one or more COCO instance files."""

    tags: TagTable  # image id -> category names; categories = super-categories
    images: pa.Table  # image_id, width, height, file_name (sorted by image_id)
    sha256: list[str]  # per input file
    n_annotations: int


def _not_coco(where: str, why: str) -> InputFormatError:
    return InputFormatError(f"{where} is not COCO instances JSON: {why}", _FIX)


def _array_items(buf: JsonBuffer, what: str, where: str) -> Iterator[object]:
    """Decode the JSON array at the cursor one element at a time."""
    if buf.next_char() != "[":
        raise _not_coco(where, f"its {what!r} is not a list")
    buf.pos += 1
    first = True
    while buf.next_member("]", first, what):
        first = False
        yield buf.decode()


def _entry(rec: object, what: str, where: str) -> dict:
    if not isinstance(rec, dict):
        raise _not_coco(where, f"an entry of {what!r} is a {type(rec).__name__}, not an object ({short_repr(rec)})")
    return rec


def _field(rec: dict, key: str, kind: type, what: str, where: str):
    if not isinstance(rec.get(key), kind) or isinstance(rec.get(key), bool):
        raise InputFormatError(
            f"{where}: an entry of {what} has no {kind.__name__} {key!r} ({short_repr(rec, 120)})", _FIX
        )
    return rec[key]


def _number(rec: dict, key: str, what: str, where: str, high: int, *, required: bool) -> int:
    """A non-negative integer field in [0, high] (ids, sizes): never wrapped, truncated or rounded."""
    value = rec.get(key)
    if value is None and not required:
        return 0  # width/height left out: unknown
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        kind = "non-negative integer" + (f" up to {high}" if high < ID_MAX else " (64-bit)")
        raise InputFormatError(
            f"{where}: an entry of {what} has {key} {short_repr(value)}, not a {kind} ({short_repr(rec, 120)})",
            f"write {key} as a {kind} in every entry of {what}, as COCO's own instances files do",
        )
    return value


def _optional_text(rec: dict, key: str, what: str, where: str) -> str | None:
    value = rec.get(key)
    if value is not None and not isinstance(value, str):
        raise InputFormatError(
            f"{where}: an entry of {what} has {key} {short_repr(value)}, not a string ({short_repr(rec, 120)})",
            f"write {key} as a string (or leave it out)",
        )
    return value


def _read_one(f, where: str, hasher, out: dict) -> None:
    buf = JsonBuffer(f, Path(where), hasher, 1 << 22, fix=_FIX_JSON)
    if buf.next_char() == "\ufeff":
        buf.pos += 1
    first = buf.next_char()
    if first != "{":  # a list, a number, another format: say what the file is not, not that it is damaged
        raise _not_coco(
            where, "its top level is not an object with images, annotations and categories" if first else "it is empty"
        )
    seen = set()
    for key in buf.keys(None, "the top-level COCO object"):
        if key == "images":
            for rec in _array_items(buf, "images", where):
                rec = _entry(rec, "images", where)
                out["img_id"].append(_number(rec, "id", "images", where, ID_MAX, required=True))
                out["width"].append(_number(rec, "width", "images", where, SIZE_MAX, required=False))
                out["height"].append(_number(rec, "height", "images", where, SIZE_MAX, required=False))
                out["file_name"].append(_optional_text(rec, "file_name", "images", where) or "")
        elif key == "annotations":
            for rec in _array_items(buf, "annotations", where):
                rec = _entry(rec, "annotations", where)
                out["ann_img"].append(_number(rec, "image_id", "annotations", where, ID_MAX, required=True))
                out["ann_cat"].append(_number(rec, "category_id", "annotations", where, ID_MAX, required=True))
        elif key == "categories":
            for rec in _array_items(buf, "categories", where):
                rec = _entry(rec, "categories", where)
                cid = _number(rec, "id", "categories", where, ID_MAX, required=True)
                name = _field(rec, "name", str, "categories", where)
                sup = _optional_text(rec, "supercategory", "categories", where)
                old = out["categories"].setdefault(cid, (name, sup))
                if old != (name, sup):
                    raise InputFormatError(
                        f"{where}: category {cid} is {(name, sup)} here but {old} in another file",
                        "build from instance files of one COCO release",
                    )
        else:
            buf.decode()  # info, licenses: small, not needed
        seen.add(key)
    if buf.next_char() != "":
        raise buf.error("extra data after the top-level object")
    missing = {"images", "annotations", "categories"} - seen
    if missing:
        raise _not_coco(where, f"no {sorted(missing)} in its top-level object")


def read_coco_annotations(paths: Sequence[str | os.PathLike]) -> CocoAnnotations:
    """Read COCO instance files (JSON, or a zip holding ``annotations/instances_*2017.json``)."""
    if not paths:
        raise InputFormatError("no COCO annotation file given", _FIX)
    out: dict = {
        "img_id": array.array("q"),
        "width": array.array("q"),
        "height": array.array("q"),
        "file_name": [],
        "ann_img": array.array("q"),
        "ann_cat": array.array("q"),
        "categories": {},
    }
    digests = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise InputFormatError(f"COCO annotation file {path} does not exist", _FIX)
        hasher = hashlib.sha256()
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                members = [m for m in COCO_INSTANCE_MEMBERS if m in zf.namelist()]
                if not members:
                    raise InputFormatError(f"{path} holds none of {list(COCO_INSTANCE_MEMBERS)}", _FIX)
                for m in members:
                    with zf.open(m) as f:
                        _read_one(f, f"{path}:{m}", None, out)
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    hasher.update(block)
        else:
            with ExitStack() as stack:
                f = stack.enter_context(open(path, "rb"))
                _read_one(f, str(path), hasher, out)
        digests.append(hasher.hexdigest())
    cats = out["categories"]
    ann_img = np.frombuffer(out["ann_img"], dtype=np.int64)
    ann_cat = np.frombuffer(out["ann_cat"], dtype=np.int64)
    unknown = sorted(set(np.unique(ann_cat).tolist()) - set(cats))
    if unknown:
        raise InputFormatError(f"annotations use category ids {unknown[:10]} that no categories entry defines", _FIX)
    img_ids = np.frombuffer(out["img_id"], dtype=np.int64)
    if np.unique(img_ids).size != img_ids.size:
        raise InputFormatError("an image id occurs twice across the COCO files", "pass each instances file once")
    stray = np.setdiff1d(ann_img, img_ids)
    if stray.size:
        raise InputFormatError(f"annotations refer to image ids {stray[:10].tolist()} not listed under images", _FIX)
    cat_ids = sorted(cats)
    # position of each annotation's category among the sorted ids (all known, checked above): no table
    # indexed by id, so an id of 10**15 costs nothing and no id can wrap around
    position = np.searchsorted(np.asarray(cat_ids, dtype=np.int64), ann_cat)
    names = pa.array([cats[c][0] for c in cat_ids], pa.string())
    tags = TagTable.from_columns(
        pa.array(ann_img.astype(str)),
        names.take(pa.array(position)),
        {cats[c][0]: cats[c][1] for c in cat_ids},
        what="COCO annotations",
    )
    images = pa.table(
        {
            "image_id": pa.array(img_ids.astype(str)),
            "width": pa.array(np.frombuffer(out["width"], dtype=np.int64)),
            "height": pa.array(np.frombuffer(out["height"], dtype=np.int64)),
            "file_name": pa.array(out["file_name"]),
        }
    ).sort_by("image_id")
    return CocoAnnotations(tags, images, digests, int(ann_img.size))


def coco_image_meta(coco: CocoAnnotations) -> pa.Table:
    """images.parquet rows: COCO's width and height (no location/weather/objects fields)."""
    n = len(coco.images)
    nulls = pa.nulls(n, pa.string())
    return pa.table(
        {
            "image_id": coco.images.column("image_id"),
            "width": coco.images.column("width"),
            "height": coco.images.column("height"),
            "location": nulls,
            "weather": nulls,
            "objects": nulls,
        }
    )
