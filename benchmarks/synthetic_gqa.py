"""Seeded generator of a full-scale synthetic GQA scene-graph file (for the build benchmark).

Shape follows GQA ``train_sceneGraphs.json``: 113,018 images, ~1,700 object names with a Zipf-like
frequency, 15-35 objects per image, relations between objects of the same image, attributes
(ontology words and others), ``location``/``weather`` on part of the images.

    python benchmarks/synthetic_gqa.py --out /tmp/synthetic_sceneGraphs.json [--images 113018] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metashift_hf.builders.subsets import ATTRIBUTE_CATEGORY, GENERAL_CONTEXT_ONTOLOGY  # noqa: E402
from metashift_hf.core.fsutil import atomic_file  # noqa: E402


N_IMAGES = 113_018
N_NAMES = 1_700
# Real object words first so the head of the distribution holds familiar classes and place words.
REAL_NAMES = [
    "man",
    "window",
    "tree",
    "building",
    "shirt",
    "wall",
    "person",
    "woman",
    "sign",
    "sky",
    "ground",
    "grass",
    "table",
    "pole",
    "head",
    "light",
    "car",
    "water",
    "hand",
    "hair",
    "leg",
    "plate",
    "leaves",
    "people",
    "fence",
    "floor",
    "door",
    "chair",
    "shadow",
    "line",
    "jacket",
    "pants",
    "street",
    "road",
    "sidewalk",
    "field",
    "cat",
    "dog",
    "horse",
    "elephant",
    "giraffe",
    "zebra",
    "bus",
    "truck",
    "train",
    "airplane",
    "boat",
    "bird",
    "sheep",
    "cow",
    "bear",
    "sofa",
    "bed",
    "shelf",
    "cabinet",
    "bag",
    "box",
    "cup",
    "pillow",
    "blanket",
    "desk",
    "laptop",
    "screen",
    "book",
    "television",
    "sink",
    "towel",
    "bench",
    "bike",
    "surfboard",
    "frisbee",
    "house",
    "sand",
    "snow",
    "beach",
    "ocean",
    "kitchen",
    "bathroom",
    "bedroom",
    "living room",
    "park",
    "lake",
    "river",
    "forest",
    "airport",
    "parking lot",
    "store",
    "restaurant",
    "yard",
    "farm",
    "path",
    "pavement",
]
RELATIONS = [
    "on",
    "near",
    "next to",
    "in",
    "holding",
    "wearing",
    "behind",
    "under",
    "above",
    "in front of",
    "on top of",
    "beside",
    "sitting on",
    "standing on",
    "walking on",
    "looking at",
    "carrying",
    "has",
    "hanging on",
    "lying on",
] + [f"rel{i}" for i in range(280)]
WEATHER = list(GENERAL_CONTEXT_ONTOLOGY["weather"])
LOCATION = list(GENERAL_CONTEXT_ONTOLOGY["location"])


def zipf_probs(n: int, exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    return p / p.sum()


def _scene_objects(rng: np.random.Generator, n_objects: np.ndarray, name_p: np.ndarray, n_topics: int) -> np.ndarray:
    """Object names per image from a topic mixture, so that co-occurrence is structured like real
    scenes (a kitchen has plates and ovens): each image draws from one or two 'scene types' (topics
    of ~60 names picked by global frequency), plus a share of names from the global Zipf tail."""
    n = len(name_p)
    topics = [np.sort(rng.choice(n, size=min(40, n), replace=False, p=name_p)) for _ in range(n_topics)]
    cum = [np.cumsum(name_p[t] / name_p[t].sum()) for t in topics]
    global_cum = np.cumsum(name_p)
    out = np.empty(int(n_objects.sum()), dtype=np.int64)
    main = rng.integers(0, n_topics, size=len(n_objects))
    second = np.where(rng.random(len(n_objects)) < 0.3, rng.integers(0, n_topics, size=len(n_objects)), main)
    o = 0
    for i, k in enumerate(n_objects.tolist()):
        u = rng.random(k)
        src = rng.random(k)
        names = np.searchsorted(global_cum, u * global_cum[-1])  # global tail (noise)
        for t, share in ((main[i], (src < 0.55)), (second[i], (src >= 0.55) & (src < 0.8))):
            names[share] = topics[t][np.minimum(np.searchsorted(cum[t], u[share] * cum[t][-1]), len(topics[t]) - 1)]
        out[o : o + k] = np.minimum(names, n - 1)
        o += k
    return out


def generate(
    out: str | Path,
    *,
    n_images: int = N_IMAGES,
    seed: int = 0,
    n_names: int = N_NAMES,
    exponent: float = 0.9,
    n_topics: int = 300,
) -> dict:
    """Write the file atomically; return a summary (images, objects, relations, bytes, seconds)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    names = (REAL_NAMES + [f"thing {i}" for i in range(n_names)])[:n_names]
    attrs = sorted(ATTRIBUTE_CATEGORY) + [f"attr {i}" for i in range(500)]
    name_p = zipf_probs(len(names), exponent)
    attr_p = zipf_probs(len(attrs), 0.9)
    attr_p = attr_p[rng.permutation(len(attrs))]  # ontology words are spread over the frequency range
    rel_p = zipf_probs(len(RELATIONS), 1.1)
    n_objects = rng.integers(15, 36, size=n_images)
    total = int(n_objects.sum())
    obj_name = _scene_objects(rng, n_objects, name_p, n_topics)
    n_attr = rng.integers(0, 3, size=total)
    attr_word = rng.choice(len(attrs), size=int(n_attr.sum()), p=attr_p)
    n_rel = rng.integers(0, 3, size=total)
    rel_name = rng.choice(len(RELATIONS), size=int(n_rel.sum()), p=rel_p)
    rel_target = rng.random(int(n_rel.sum()))  # position among the image's objects, scaled below
    boxes = rng.integers(0, 500, size=(total, 4))
    location = rng.integers(-3, len(LOCATION), size=n_images)  # negative = no location field (~60 %)
    weather = rng.integers(-12, len(WEATHER), size=n_images)
    sizes = rng.integers(200, 1025, size=(n_images, 2))
    id_style = rng.random(n_images) < 0.1
    encode = json.JSONEncoder(separators=(",", ":")).encode
    o = a = r = 0
    n_bytes = 0
    with atomic_file(out, "w") as f:
        f.write("{")
        for i in range(n_images):
            k = int(n_objects[i])
            first_obj = 10_000_000 + o
            objects = {}
            for j in range(k):
                na, nr = int(n_attr[o]), int(n_rel[o])
                rels = []
                for t in range(nr):
                    target = int(rel_target[r + t] * (k - 1))
                    target += target >= j  # never the object itself
                    rels.append({"name": RELATIONS[rel_name[r + t]], "object": str(first_obj + target)})
                x, y, w, h = boxes[o].tolist()
                objects[str(first_obj + j)] = {
                    "name": names[obj_name[o]],
                    "x": x,
                    "y": y,
                    "w": w + 1,
                    "h": h + 1,
                    "attributes": [attrs[q] for q in attr_word[a : a + na].tolist()],
                    "relations": rels,
                }
                o += 1
                a += na
                r += nr
            record = {"width": int(sizes[i, 0]), "height": int(sizes[i, 1]), "objects": objects}
            if location[i] >= 0:
                record["location"] = LOCATION[location[i]]
            if weather[i] >= 0:
                record["weather"] = WEATHER[weather[i]]
            image_id = f"n{i}" if id_style[i] else str(2_000_000 + i)
            chunk = ("," if i else "") + encode(image_id) + ":" + encode(record)
            n_bytes += len(chunk)
            f.write(chunk)
        f.write("}")
    return {
        "path": str(out),
        "images": n_images,
        "objects": total,
        "relations": int(n_rel.sum()),
        "attributes": int(n_attr.sum()),
        "names": len(names),
        "bytes": n_bytes + 2,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--images", type=int, default=N_IMAGES)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--names", type=int, default=N_NAMES)
    args = ap.parse_args(argv)
    print(json.dumps(generate(args.out, n_images=args.images, seed=args.seed, n_names=args.names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
