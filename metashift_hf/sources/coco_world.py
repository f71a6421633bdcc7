"""A seeded COCO-format demo world: instances JSON files and tiny real JPEGs, for tests and demos.

Layout (like COCO 2017)::

    OUT/annotations/instances_train2017.json   OUT/annotations/instances_val2017.json
    OUT/train2017/000000xxxxxx.jpg             OUT/val2017/000000xxxxxx.jpg

Scenes: cats mostly with indoor objects (COCO super-categories indoor, kitchen, electronic,
appliance, furniture), dogs mostly with outdoor ones (outdoor, vehicle, sports), some of each the
other way round and some with both, a few images with a cat and a dog, and other scenes (people,
food, vehicles). Every category of an image gets 1-3 instance annotations with boxes and polygons,
so readers meet COCO's real structure. Sizes are large enough for the COCO subpopulation tasks
at the paper's sizes (3,000 training, 524 test images). Same seed -> byte-identical files.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

from metashift_hf.builders.coco import COCO_CATEGORIES
from metashift_hf.core.fsutil import atomic_dir
from metashift_hf.tasks.coco_tasks import INDOOR, OUTDOOR


# (subject, where, images): where = indoor | outdoor | both
SCENES = (
    ("cat", "indoor", 1800),
    ("cat", "outdoor", 320),
    ("cat", "both", 60),
    ("dog", "outdoor", 1800),
    ("dog", "indoor", 320),
    ("dog", "both", 60),
    ("cat+dog", "indoor", 30),
    ("cat+dog", "outdoor", 30),
    ("other", "any", 500),
)
VAL_FRACTION = 0.1


def _jpeg(rng: np.random.Generator) -> bytes:
    img = Image.new("RGB", (16, 12), tuple(int(x) for x in rng.integers(0, 256, 3)))
    img.paste(tuple(int(x) for x in rng.integers(0, 256, 3)), (4, 3, 12, 9))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=80)
    return buf.getvalue()


def _annotation(ann_id: int, image_id: int, cat_id: int, rng: np.random.Generator) -> dict:
    x, y, w, h = (round(float(v), 2) for v in rng.uniform(1, 60, 4))
    return {
        "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]],
        "area": round(w * h, 2),
        "iscrowd": 0,
        "image_id": image_id,
        "bbox": [x, y, w, h],
        "category_id": cat_id,
        "id": ann_id,
    }


def write_coco_world(out: str | os.PathLike, *, seed: int = 0, images: bool = True) -> Path:
    """Write the world into ``out`` (replaced atomically); returns ``out``."""
    rng = np.random.default_rng(seed)
    ids = {name: cid for cid, name, _ in COCO_CATEGORIES}
    by_sup: dict[str, list[str]] = {}
    for _, name, sup in COCO_CATEGORIES:
        by_sup.setdefault(sup, []).append(name)
    indoor = [n for s in INDOOR for n in by_sup[s]]
    outdoor = [n for s in OUTDOOR for n in by_sup[s]]
    neutral = by_sup["person"] + by_sup["food"] + by_sup["accessory"]
    n_images = sum(n for *_, n in SCENES)
    image_ids = np.sort(rng.choice(np.arange(1, 600_000), size=n_images, replace=False))
    order = rng.permutation(n_images)
    split_of = np.where(rng.random(n_images) < VAL_FRACTION, "val2017", "train2017")
    files = {"train2017": {"images": [], "annotations": []}, "val2017": {"images": [], "annotations": []}}
    ann_id = 1
    k = 0
    for subject, where, count in SCENES:
        for _ in range(count):
            i = int(order[k])
            k += 1
            names: set[str] = set(subject.split("+")) if subject != "other" else {str(rng.choice(neutral))}
            pools = {
                "indoor": [indoor],
                "outdoor": [outdoor],
                "both": [indoor, outdoor],
                "any": [indoor + outdoor + neutral],
            }[where]
            for pool in pools:
                names |= {str(x) for x in rng.choice(pool, size=int(rng.integers(1, 4)), replace=False)}
            if rng.random() < 0.3:
                names.add("person")
            image_id, split = int(image_ids[i]), str(split_of[i])
            files[split]["images"].append(
                {"license": 1, "file_name": f"{image_id:012d}.jpg", "height": 12, "width": 16, "id": image_id}
            )
            for name in sorted(names):
                for _ in range(int(rng.integers(1, 4))):
                    files[split]["annotations"].append(_annotation(ann_id, image_id, ids[name], rng))
                    ann_id += 1
    categories = [{"supercategory": sup, "id": cid, "name": name} for cid, name, sup in COCO_CATEGORIES]
    with atomic_dir(out) as tmp:
        (tmp / "annotations").mkdir()
        for split, content in files.items():
            content["images"].sort(key=lambda r: r["id"])
            doc = {
                "info": {"description": f"metashift-hf COCO-format demo world (seed {seed})"},
                "licenses": [{"id": 1, "name": "MIT (synthetic)"}],
                "images": content["images"],
                "annotations": content["annotations"],
                "categories": categories,
            }
            (tmp / "annotations" / f"instances_{split}.json").write_text(json.dumps(doc), encoding="utf-8")
            if images:
                (tmp / split).mkdir()
                img_rng = np.random.default_rng([seed, 1 if split == "val2017" else 0])
                for rec in content["images"]:
                    (tmp / split / rec["file_name"]).write_bytes(_jpeg(img_rng))
    return Path(out)
