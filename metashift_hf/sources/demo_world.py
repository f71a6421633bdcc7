"""A seeded, embedded demo world: GQA-style scene graphs plus small real JPEGs that show them.

Nothing is shipped as data: ``generate_demo_world(out, seed=0)`` writes, in a few seconds,

    out/train_sceneGraphs.json, out/val_sceneGraphs.json   GQA format (ontology.json)
    out/images/<id>.jpg                                    one small JPEG per image
    out/demo_world.json                                    summary (counts, sizes, hashes)

The world is built from *scene templates*: groups of context objects that occur together
(``bed, blanket, pillow, ...``). Every image picks one template of its main class and a few of
its objects; the main object gets a relation to each of them. Templates share an object here and
there and, for cat and dog, frequent "hub" objects per zone (home / street / beach), so each
class's meta-graph is connected but clustered (indoor and outdoor communities apart). The cat/dog
templates are the paper's groups (paper-tasks.json). Figures and reasons: docs/demo-world.md.
"""

from __future__ import annotations

import hashlib
import io
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import InputFormatError, MetashiftError
from ..core.fsutil import atomic_dir
from ..core.provenance import DEMO_WORLD_FORMAT, DEMO_WORLD_SUMMARY


GENERATOR_VERSION = 1
DEFAULT_N_IMAGES = 5000
SUMMARY_FILE = DEMO_WORLD_SUMMARY  # build detects the demo world by this file (core.provenance)
VAL_FRACTION = 0.15
JPEG_QUALITY = 85
IMAGE_SIZES = ((96, 96), (128, 96), (96, 128))  # (width, height); GQA images vary in shape too
ID_BASE = 3_000_000  # above every real Visual Genome id (max 2,417,997), so demo ids never collide

# ---------------------------------------------------------------------------------------------
# The world. Per class: share of the images, colour/pose attribute weights, and scene templates
# (name, location, weight, context objects). Cat/dog templates are the paper's groups, chained by
# one shared object each (noted after the list) so the meta-graph is connected in that order.
# ---------------------------------------------------------------------------------------------
_IN, _OUT = "indoors", "outdoors"

CLASSES: dict[str, dict] = {
    "cat": {
        "share": 1000,
        "colours": {"black": 5, "white": 4, "gray": 4, "orange": 3, "brown": 4},
        "poses": {"sitting": 4, "lying": 4, "standing": 2},
        "templates": [
            # computer -desk- book -books- shelf -container- box ; book -television- sofa -cup- sink
            # sofa -couch- bed ; shelf -bowl- kitchen ; sofa -window- yard (the indoor/outdoor bridge)
            (
                "computer",
                _IN,
                14,
                ["speaker", "computer", "screen", "laptop", "computer mouse", "keyboard", "monitor", "desk"],
            ),
            ("book", _IN, 10, ["books", "book", "television", "bookshelf", "blinds", "picture", "desk"]),
            ("shelf", _IN, 10, ["container", "shelf", "vase", "bowl", "books"]),
            ("box", _IN, 11, ["box", "paper", "papers", "suitcase", "bag", "toy", "container"]),
            ("kitchen", _IN, 9, ["counter", "pot", "plate", "food", "table", "bowl"]),
            ("sofa", _IN, 12, ["cup", "sofa", "chair", "carpet", "window", "television", "couch"]),
            ("bed", _IN, 14, ["bed", "comforter", "sheet", "blanket", "remote control", "pillow", "lamp", "couch"]),
            ("sink", _IN, 10, ["sink", "bottle", "faucet", "towel", "toilet", "cup"]),
            ("yard", _OUT, 19, ["car", "fence", "grass", "roof", "bench", "bird", "house", "window"]),
        ],
        "zones": {"yard": ["yard"]},  # every other template: "home"
        "hubs": {"home": ["floor", "rug", "curtain"], "yard": ["tree", "grass"]},
    },
    "dog": {
        "share": 1500,
        "colours": {"brown": 5, "black": 4, "white": 4, "tan": 3},
        "poses": {"standing": 4, "sitting": 3, "lying": 2, "running": 2, "walking": 2},
        "templates": [
            # shelf -chair- sofa -television- bed ; sofa -carpet- cabinet -floor- box -box- bag
            # -backpack- cap -jacket- bike -bike/bicycle/basket- vehicle -car- bench -bench- grass
            # -grass- boat -boat- surfboard ; snow -trees- boat
            ("shelf", _IN, 7, ["desk", "screen", "laptop", "shelf", "picture", "chair"]),
            ("sofa", _IN, 7, ["sofa", "television", "carpet", "phone", "book", "chair"]),
            ("bed", _IN, 11, ["blanket", "bed", "sheet", "remote control", "pillow", "lamp", "couch", "books"]),
            ("cabinet", _IN, 8, ["floor", "clothes", "towel", "door", "rug", "cabinet", "carpet"]),
            ("box", _IN, 10, ["box", "container", "food", "table", "plate", "cup", "bowl", "floor"]),
            ("bag", _IN, 7, ["bag", "backpack", "purse"]),
            ("cap", _OUT, 9, ["cap", "scarf", "jacket", "toy", "collar", "tie", "backpack"]),
            ("bike", _OUT, 6, ["basket", "woman", "bike", "bicycle", "jacket"]),
            ("vehicle", _OUT, 8, ["car", "motorcycle", "truck", "bike", "basket", "bicycle", "skateboard"]),
            ("bench", _OUT, 6, ["bench", "trash can", "bush", "car"]),
            ("grass", _OUT, 9, ["house", "grass", "horse", "cow", "sheep", "animal", "fence", "dirt", "bench"]),
            ("boat", _OUT, 7, ["frisbee", "rope", "flag", "trees", "boat", "grass"]),
            ("surfboard", _OUT, 9, ["water", "surfboard", "sand"]),
            ("snow", _OUT, 5, ["snow", "helmet", "trees", "jacket"]),
        ],
        # Zones are the indoor / street / beach clusters; bag and boat scenes sit in two zones,
        # so the zones form a chain home - street - beach (the paper's growing distances).
        "zones": {
            "bag": ["home", "street"],
            "cap": ["street"],
            "bike": ["street"],
            "vehicle": ["street"],
            "bench": ["street"],
            "grass": ["street"],
            "boat": ["street", "beach"],
            "surfboard": ["beach"],
            "snow": ["beach"],
        },
        "hubs": {
            "home": ["chair", "floor", "curtain"],
            "street": ["pole", "fire hydrant"],
            "beach": ["umbrella", "kite"],
        },
        # Occasional objects of the next group: enough overlap for a meta-graph edge, while the two
        # training groups of one experiment keep most of their images to themselves.
        "bridges": {"bag": ["box"], "surfboard": ["boat"]},
    },
    "horse": {
        "share": 320,
        "colours": {"brown": 9, "white": 6, "black": 5},
        "poses": {"standing": 4, "walking": 3, "running": 2, "grazing": 2},
        "templates": [
            ("pasture", _OUT, 4, ["grass", "fence", "dirt", "barn", "tree", "cow"]),
            ("riding", _OUT, 3, ["man", "woman", "saddle", "helmet", "fence"]),
            ("town", _OUT, 2, ["carriage", "car", "building", "pole", "man"]),
            ("shore", _OUT, 1, ["sand", "water", "woman"]),
        ],
    },
    "elephant": {
        "share": 260,
        "colours": {"gray": 8, "brown": 2},
        "poses": {"standing": 5, "walking": 3},
        "templates": [
            ("savanna", _OUT, 4, ["grass", "tree", "dirt", "rock", "bush"]),
            ("river", _OUT, 3, ["water", "rock", "trunk", "mud"]),
            ("zoo", _OUT, 3, ["fence", "wall", "building", "man", "tree"]),
        ],
    },
    "airplane": {
        "share": 260,
        "colours": {"white": 6, "silver": 2, "blue": 1, "red": 1},
        "poses": {},
        "templates": [
            ("runway", _OUT, 5, ["runway", "truck", "building", "tower", "car", "man"]),
            ("sky", _OUT, 4, ["sky", "cloud", "tree", "mountain", "building"]),
        ],
    },
    "bus": {
        "share": 180,
        "colours": {"white": 3, "red": 3, "blue": 2, "yellow": 2},
        "poses": {},
        "templates": [
            ("city", _OUT, 1, ["building", "sign", "pole", "man", "window"]),
            ("traffic", _OUT, 1, ["car", "truck", "tree", "traffic light", "pole"]),
        ],
    },
    "truck": {
        "share": 180,
        "colours": {"white": 3, "red": 2, "blue": 2, "black": 2},
        "poses": {},
        "templates": [
            ("city", _OUT, 1, ["building", "sign", "car", "man", "window"]),
            ("road", _OUT, 1, ["tree", "car", "bus", "fence", "grass"]),
        ],
    },
    "zebra": {
        "share": 125,
        "colours": {"white": 1, "black": 1},
        "poses": {"standing": 3, "grazing": 2, "walking": 1},
        "templates": [
            ("savanna", _OUT, 1, ["grass", "tree", "dirt", "bush", "rock"]),
            ("enclosure", _OUT, 1, ["giraffe", "fence", "water", "tree"]),
        ],
    },
    "giraffe": {
        "share": 125,
        "colours": {"brown": 2, "tan": 1},
        "poses": {"standing": 3, "walking": 1},
        "templates": [
            ("savanna", _OUT, 1, ["tree", "grass", "bush", "dirt", "rock"]),
            ("enclosure", _OUT, 1, ["fence", "building", "zebra", "tree"]),
        ],
    },
    "sheep": {
        "share": 120,
        "colours": {"white": 4, "black": 1, "gray": 1},
        "poses": {"standing": 2, "grazing": 2, "lying": 1},
        "templates": [
            ("pasture", _OUT, 1, ["grass", "fence", "dirt", "hill", "tree"]),
            ("farm", _OUT, 1, ["man", "dog", "barn", "fence"]),
        ],
    },
    "cow": {
        "share": 125,
        "colours": {"black": 2, "brown": 2, "white": 1},
        "poses": {"standing": 2, "grazing": 2, "lying": 1},
        "templates": [
            ("pasture", _OUT, 1, ["grass", "fence", "dirt", "hill", "tree"]),
            ("farm", _OUT, 1, ["barn", "man", "road sign", "fence"]),
        ],
    },
    "bear": {
        "share": 120,
        "colours": {"brown": 3, "black": 2},
        "poses": {"standing": 2, "sitting": 1, "walking": 1},
        "templates": [
            ("wild", _OUT, 1, ["rock", "water", "tree", "grass", "log"]),
            ("zoo", _OUT, 1, ["fence", "wall", "log", "toy"]),
        ],
    },
    "bird": {
        "share": 130,
        "colours": {"black": 2, "white": 2, "brown": 2, "gray": 1, "blue": 1},
        "poses": {"standing": 2, "flying": 1},
        "templates": [
            ("tree", _OUT, 1, ["branch", "tree", "sky", "leaves", "pole"]),
            ("water", _OUT, 1, ["water", "rock", "sand", "pole"]),
        ],
    },
}
HUB_PROBABILITY = 0.7
BRIDGE_PROBABILITY = 0.45
AMBIGUOUS_SHARE = 70  # images showing both a cat and a dog (cat(dog) / dog(cat): removed by tasks)
AMBIGUOUS_TEMPLATES = ("sofa", "bed", "grass")  # where the two meet; a fixed few keep cat(dog) in a community

# Place/room words appear as scenery objects (GQA has objects named 'ocean', 'street', ...):
# they give the builder general contexts like ocean(dog) without being related to the animal.
PLACE_WORDS = {
    "computer": "living room",
    "book": "living room",
    "sofa": "living room",
    "shelf": "living room",
    "bed": "bedroom",
    "sink": "bathroom",
    "box": "kitchen",
    "kitchen": "kitchen",
    "cabinet": "kitchen",
    "bag": "kitchen",
    "yard": "yard",
    "cap": "sidewalk",
    "bike": "street",
    "vehicle": "street",
    "bench": "park",
    "grass": "field",
    "boat": "beach",
    "surfboard": "ocean",
    "snow": "forest",
    "pasture": "field",
    "riding": "farm",
    "town": "road",
    "shore": "beach",
    "savanna": "field",
    "river": "river",
    "zoo": "park",
    "runway": "airport",
    "sky": "airport",
    "city": "street",
    "traffic": "road",
    "road": "road",
    "enclosure": "park",
    "farm": "farm",
    "wild": "forest",
    "tree": "park",
    "water": "lake",
}
PLACE_SET = frozenset(PLACE_WORDS.values())
WEATHER = {"clear": 4, "sunny": 3, "cloudy": 2, "overcast": 2, "cloudless": 1, "foggy": 1, "rainy": 1}

# Object kinds decide drawing, layout and relation names.
_KIND_WORDS = {
    "ground": "grass sand water snow dirt floor carpet rug mud runway",
    "furniture": "sofa couch bed chair desk table shelf bookshelf cabinet bench counter toilet sink",
    "vehicle": "car truck bus bike bicycle motorcycle boat skateboard surfboard carriage airplane",
    "person": "man woman",
    "plant": "tree trees bush branch leaves log",
    "building": "house building barn tower roof",
    "wall": "wall window door curtain blinds picture",
    "sky": "sky cloud mountain hill",
}
KIND = {w: kind for kind, words in _KIND_WORDS.items() for w in words.split(" ") if w}
KIND.update(
    {
        "remote control": "item",
        "computer mouse": "item",
        "trash can": "item",
        "fire hydrant": "item",
        "traffic light": "item",
        "road sign": "item",
    }
)
for _c in CLASSES:
    KIND[_c] = "vehicle" if _c in ("airplane", "bus", "truck") else "animal"

# Relation names from the main object to a context object, and back, by the context's kind.
REL_TO = {
    "ground": ["on", "standing on", "lying on"],
    "furniture": ["on", "lying on", "sitting on", "near"],
    "vehicle": ["near", "next to", "in front of"],
    "person": ["near", "next to", "looking at"],
    "animal": ["near", "next to", "looking at"],
    "plant": ["near", "under", "in front of"],
    "building": ["in front of", "near"],
    "wall": ["in front of", "near"],
    "sky": ["under", "below"],
    "item": ["near", "next to", "playing with", "holding"],
}
REL_BACK = {"ground": "under", "furniture": "under", "sky": "above", "wall": "behind"}
VEHICLE_REL = {"sky": ["in", "flying in"], "ground": ["on", "parked on"]}

# Attributes for context objects: a colour (half the time), a material for furniture and buildings.
CONTEXT_COLOURS = ["white", "black", "brown", "gray", "red", "blue", "green", "yellow", "beige", "silver"]
OBJECT_COLOUR = {
    "grass": "green",
    "trees": "green",
    "tree": "green",
    "bush": "green",
    "leaves": "green",
    "sky": "blue",
    "water": "blue",
    "sand": "tan",
    "snow": "white",
    "dirt": "brown",
    "mud": "brown",
    "cloud": "white",
    "runway": "gray",
    "floor": "brown",
    "wall": "beige",
    "log": "brown",
}
MATERIALS = {"furniture": ["wood", "metal", "plastic", "leather"], "building": ["brick", "stone", "wood", "concrete"]}
SIZES = {"large": 1, "small": 1}

RGB = {
    "white": (235, 235, 232),
    "red": (200, 40, 40),
    "black": (30, 30, 30),
    "green": (60, 150, 60),
    "silver": (190, 192, 200),
    "gold": (212, 175, 55),
    "khaki": (195, 176, 145),
    "gray": (128, 128, 128),
    "dark": (60, 60, 60),
    "pink": (240, 150, 170),
    "dark blue": (20, 30, 110),
    "dark brown": (80, 50, 30),
    "blue": (50, 90, 200),
    "yellow": (230, 210, 50),
    "tan": (210, 180, 140),
    "brown": (140, 90, 50),
    "orange": (235, 140, 40),
    "purple": (130, 60, 160),
    "beige": (225, 210, 180),
    "blond": (240, 220, 150),
    "brunette": (100, 60, 40),
    "maroon": (120, 20, 40),
    "light blue": (150, 190, 235),
    "light brown": (180, 140, 100),
}
# Backgrounds: indoor walls are warm, outdoor scenes have sky over a ground tinted by the place.
_BG_GROUND = {
    "beach": (220, 200, 150),
    "ocean": (70, 120, 190),
    "street": (120, 120, 125),
    "road": (110, 110, 115),
    "sidewalk": (160, 160, 160),
    "airport": (140, 140, 140),
    "forest": (40, 100, 50),
    "river": (80, 120, 170),
    "lake": (80, 120, 170),
}
_BG_INDOOR = {
    "bedroom": (225, 205, 200),
    "bathroom": (210, 225, 230),
    "kitchen": (235, 225, 195),
    "living room": (230, 215, 185),
}


@dataclass
class DemoWorld:
    """Paths of a generated demo world and its summary (the content of ``demo_world.json``)."""

    root: Path
    summary: dict = field(default_factory=dict)

    @property
    def scene_graphs(self) -> list[Path]:
        return [self.root / "train_sceneGraphs.json", self.root / "val_sceneGraphs.json"]

    @property
    def images_dir(self) -> Path:
        return self.root / "images"

    @property
    def summary_path(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def seed(self) -> int:
        return int(self.summary["seed"])

    def describe(self) -> str:
        """Two lines for users: size, splits and where the files are."""
        sm = self.summary
        images = (
            f"{sm['image_bytes'] / 1e6:.1f} MB of JPEGs in {self.images_dir}"
            if sm.get("images_written")
            else "no images written"
        )
        return (
            f"demo world (seed {sm['seed']}): {sm['n_images']:,} images, {sm['splits']['train']:,} train / "
            f"{sm['splits']['val']:,} val; {images}\n"
            f"  scene graphs: {' '.join(str(p) for p in self.scene_graphs)}"
        )


def _pick(rng: np.random.Generator, weights: dict[str, float]) -> str:
    names = list(weights)
    p = np.array([weights[n] for n in names], dtype=float)
    return names[int(rng.choice(len(names), p=p / p.sum()))]


def _class_counts(n_images: int) -> dict[str, int]:
    """Images per main class (plus 'cat+dog'), scaled to ``n_images`` by largest remainders."""
    shares = {c: spec["share"] for c, spec in CLASSES.items()}
    shares["cat+dog"] = AMBIGUOUS_SHARE
    total = sum(shares.values())
    exact = {c: n_images * s / total for c, s in shares.items()}
    counts = {c: int(v) for c, v in exact.items()}
    rest = n_images - sum(counts.values())
    for c in sorted(exact, key=lambda c: (-(exact[c] - counts[c]), c))[:rest]:
        counts[c] += 1
    return counts


class _Scene:
    """One image's objects under construction (GQA object dicts keyed by object id)."""

    def __init__(self, image_number: int, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.objects: dict[str, dict] = {}
        self._next = image_number * 100  # object ids unique across the world, as in GQA

    def add(self, name: str, box: tuple[int, int, int, int], attributes: list[str]) -> str:
        oid = str(ID_BASE + self._next)
        self._next += 1
        x, y, w, h = box
        self.objects[oid] = {"name": name, "x": x, "y": y, "w": w, "h": h, "attributes": attributes, "relations": []}
        return oid

    def relate(self, a: str, name: str, b: str) -> None:
        self.objects[a]["relations"].append({"name": name, "object": b})


def _box(rng: np.random.Generator, kind: str, w: int, h: int, main: bool) -> tuple[int, int, int, int]:
    """A plausible box for an object of ``kind`` in a ``w`` x ``h`` image."""
    if kind == "ground":
        top = int(h * rng.uniform(0.55, 0.7))
        return 0, top, w, h - top
    if kind == "sky":
        return 0, 0, w, int(h * rng.uniform(0.25, 0.4))
    if main:
        bw, bh = int(w * rng.uniform(0.35, 0.55)), int(h * rng.uniform(0.3, 0.45))
        x = int(rng.uniform(0.1, 0.9) * (w - bw))
        y = int(rng.uniform(0.45, 0.95) * (h - bh))
        return x, y, bw, bh
    bw, bh = int(w * rng.uniform(0.15, 0.35)), int(h * rng.uniform(0.15, 0.35))
    return int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1)), bw, bh


def _main_attributes(rng: np.random.Generator, spec: dict) -> list[str]:
    attrs = [_pick(rng, spec["colours"])]
    if spec["poses"] and rng.random() < 0.6:
        attrs.append(_pick(rng, spec["poses"]))
    if rng.random() < 0.2:
        attrs.append(_pick(rng, SIZES))
    return attrs


def _context_attributes(rng: np.random.Generator, name: str) -> list[str]:
    kind = KIND.get(name, "item")
    attrs = []
    if name in OBJECT_COLOUR:
        if rng.random() < 0.7:
            attrs.append(OBJECT_COLOUR[name])
    elif rng.random() < 0.5:
        attrs.append(CONTEXT_COLOURS[int(rng.integers(len(CONTEXT_COLOURS)))])
    if kind in MATERIALS and rng.random() < 0.3:
        options = MATERIALS[kind]
        attrs.append(options[int(rng.integers(len(options)))])
    return attrs


def _make_scene(rng: np.random.Generator, number: int, cls: str) -> tuple[dict, str, str, str]:
    """One GQA image record, the template used (``class/template``), its location and place word."""
    width, height = IMAGE_SIZES[int(rng.choice(len(IMAGE_SIZES), p=[0.5, 0.25, 0.25]))]
    scene = _Scene(number, width, height)
    second = None
    if cls == "cat+dog":
        # Either animal is the main object; the scene is one of AMBIGUOUS_TEMPLATES of that class.
        cls, second = ("cat", "dog") if rng.random() < 0.5 else ("dog", "cat")
    spec = CLASSES[cls]
    templates = spec["templates"]
    if second is not None:
        templates = [t for t in templates if t[0] in AMBIGUOUS_TEMPLATES]
    weights = np.array([t[2] for t in templates], dtype=float)
    tname, location, _, objects = templates[int(rng.choice(len(templates), p=weights / weights.sum()))]

    main = scene.add(cls, _box(rng, KIND[cls], width, height, True), _main_attributes(rng, spec))
    mains = [main]
    if second is not None:
        other = scene.add(second, _box(rng, "animal", width, height, True), _main_attributes(rng, CLASSES[second]))
        mains.append(other)
        scene.relate(main, REL_TO["animal"][int(rng.integers(3))], other)
        scene.relate(other, REL_TO["animal"][int(rng.integers(3))], main)

    k = min(len(objects), int(rng.integers(2, 5)))
    chosen = [objects[i] for i in sorted(rng.choice(len(objects), size=k, replace=False))]
    for bridge in spec.get("bridges", {}).get(tname, []):
        if rng.random() < BRIDGE_PROBABILITY and bridge not in chosen:
            chosen.append(bridge)
    # Zone hubs: objects common to every scene of a zone, which tie its templates into one cluster.
    for zone in spec.get("zones", {}).get(tname, ["home"]) if "hubs" in spec else []:
        hubs = spec["hubs"][zone]
        hub = hubs[int(rng.integers(len(hubs)))] if hubs else None
        if hub and rng.random() < HUB_PROBABILITY and hub not in chosen:
            chosen.append(hub)
    contexts = []
    for name in chosen:
        kind = KIND.get(name, "item")
        oid = scene.add(name, _box(rng, kind, width, height, False), _context_attributes(rng, name))
        contexts.append((oid, kind))
        for m in mains:
            table = VEHICLE_REL if KIND[cls] == "vehicle" and kind in VEHICLE_REL else REL_TO
            options = table.get(kind, REL_TO["item"])
            scene.relate(m, options[int(rng.integers(len(options)))], oid)
    # Every object relates to something: back to the main object, or to another context object.
    for i, (oid, kind) in enumerate(contexts):
        if len(contexts) > 1 and rng.random() < 0.5:
            target = contexts[(i + 1) % len(contexts)][0]
            scene.relate(oid, "near", target)
        else:
            scene.relate(oid, REL_BACK.get(kind, "near"), main)
        # A context that is itself a class (a horse in a dog scene) also relates to the rest of
        # the scene, so 'horse(dog)' shares images with 'horse(grass)' instead of being an island.
        if scene.objects[oid]["name"] in CLASSES:
            for other, _ in contexts:
                if other != oid and not any(r["object"] == other for r in scene.objects[oid]["relations"]):
                    scene.relate(oid, "near", other)

    # Scenery: not related to the main object, so relation pairing ignores it (cooccurrence does not).
    anchor = contexts[0][0]
    if location == _IN and rng.random() < 0.4:
        wall = scene.add("wall", (0, 0, width, int(height * 0.5)), [])
        window = scene.add("window", _box(rng, "wall", width, height, False), [])
        scene.relate(window, "on", wall)
        scene.relate(wall, "behind", anchor)
    if location == _OUT and rng.random() < 0.5 and KIND[cls] != "vehicle" and "sky" not in chosen:
        sky = scene.add("sky", _box(rng, "sky", width, height, False), ["blue"] if rng.random() < 0.5 else [])
        scene.relate(sky, "above", anchor)
    place = PLACE_WORDS[tname]
    if rng.random() < 0.3:
        # Place words relate only as the source ('ocean behind boat'), as in GQA.
        pid = scene.add(place, (0, 0, width, height), [])
        scene.relate(pid, "behind", anchor)

    record: dict = {"width": width, "height": height}
    if rng.random() < 0.7:
        record["location"] = location
    if location == _OUT and rng.random() < 0.5:
        record["weather"] = _pick(rng, WEATHER)
    record["objects"] = scene.objects
    return record, f"{cls if second is None else 'cat+dog'}/{tname}", location, place


# ---------------------------------------------------------------------------------------------
# Pixels: each object drawn as a shape in its box, coloured by its colour attribute.
# ---------------------------------------------------------------------------------------------
def _object_rgb(obj: dict) -> tuple[int, int, int]:
    for a in obj["attributes"]:
        if a in RGB:
            return RGB[a]
    if obj["name"] in OBJECT_COLOUR:
        return RGB[OBJECT_COLOUR[obj["name"]]]
    # A stable per-name colour for objects without a colour attribute.
    h = hashlib.sha256(obj["name"].encode()).digest()
    return 60 + h[0] % 160, 60 + h[1] % 160, 60 + h[2] % 160


def _xy(x0: int, y0: int, x1: int, y1: int) -> list[int]:
    """Corner order PIL requires, whatever the arithmetic on tiny boxes gave."""
    return [min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)]


def _draw(record: dict, location: str, place: str, rng: np.random.Generator) -> bytes:
    """JPEG bytes of the scene; the background is tinted by location and place."""
    from PIL import Image, ImageDraw

    w, h = record["width"], record["height"]
    outdoor = location == _OUT
    img = Image.new("RGB", (w, h), (150, 195, 235) if outdoor else _BG_INDOOR.get(place, (225, 215, 195)))
    d = ImageDraw.Draw(img)
    horizon = int(h * 0.6)
    if outdoor:
        d.rectangle([0, horizon, w, h], fill=_BG_GROUND.get(place, (110, 160, 80)))
    else:
        d.rectangle([0, horizon, w, h], fill=(150, 115, 80))
    objs = [o for o in record["objects"].values() if o["name"] not in PLACE_SET]
    # Large things first, main objects (animals, vehicles of the class) last so they stay visible.
    objs.sort(key=lambda o: (o["name"] in CLASSES, -(o["w"] * o["h"])))
    for o in objs:
        x0, y0, x1, y1 = o["x"], o["y"], o["x"] + max(o["w"], 2) - 1, o["y"] + max(o["h"], 2) - 1
        rgb = _object_rgb(o)
        kind = KIND.get(o["name"], "item")
        if kind in ("ground", "sky", "wall", "furniture", "building"):
            d.rectangle(_xy(x0, y0, x1, y1), fill=rgb)
            if kind == "building":
                d.polygon([(x0, y0), ((x0 + x1) // 2, max(0, y0 - o["h"] // 3)), (x1, y0)], fill=rgb)
        elif kind == "animal":
            body_h = (y1 - y0) * 2 // 3
            d.ellipse(_xy(x0, y1 - body_h, x1 - (x1 - x0) // 4, y1), fill=rgb)
            r = max(2, (y1 - y0) // 4)
            d.ellipse(_xy(x1 - 2 * r, y0, x1, y0 + 2 * r), fill=rgb)  # head
        elif kind == "vehicle":
            d.rectangle(_xy(x0, y0, x1, y1 - (y1 - y0) // 4), fill=rgb)
            r = max(1, (y1 - y0) // 5)
            for cx in (x0 + r + 1, x1 - r - 1):
                d.ellipse(_xy(cx - r, y1 - 2 * r, cx + r, y1), fill=(20, 20, 20))
        elif kind == "person":
            r = max(2, (x1 - x0) // 4)
            cx = (x0 + x1) // 2
            d.ellipse(_xy(cx - r, y0, cx + r, y0 + 2 * r), fill=(230, 190, 160))
            d.rectangle(_xy(x0 + (x1 - x0) // 4, y0 + 2 * r, x1 - (x1 - x0) // 4, y1), fill=rgb)
        elif kind == "plant":
            trunk = max(1, (x1 - x0) // 8)
            cx = (x0 + x1) // 2
            d.rectangle(_xy(cx - trunk, (y0 + y1) // 2, cx + trunk, y1), fill=(100, 70, 40))
            d.polygon([(x0, (y0 + 2 * y1) // 3), (cx, y0), (x1, (y0 + 2 * y1) // 3)], fill=rgb)
        else:
            d.ellipse(_xy(x0, y0, x1, y1), fill=rgb)
    # Mild sensor-like noise: real JPEG sizes and non-flat inputs for models.
    pixels = np.asarray(img, dtype=np.int16) + rng.integers(-6, 7, size=(h, w, 3), dtype=np.int16)
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
def _check_existing(out: Path) -> None:
    """Refuse to replace a folder that is not a demo world (it may hold the user's data)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / SUMMARY_FILE).is_file())):
        raise MetashiftError(
            f"{out} exists and is not a demo world (no {SUMMARY_FILE}); refusing to overwrite it",
            "pass an empty or new folder as the demo output directory",
        )


def load_demo_world(out_dir: str | Path) -> DemoWorld:
    """Open a demo world written earlier by ``generate_demo_world``."""
    root = Path(out_dir)
    path = root / SUMMARY_FILE
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputFormatError(
            f"{path} is missing or not valid JSON ({exc})",
            "regenerate it with generate_demo_world(out_dir) / metashift-hf demo",
        ) from exc
    if summary.get("format") != DEMO_WORLD_FORMAT:
        raise InputFormatError(
            f"{path} is not a demo-world summary (format={summary.get('format')!r})",
            "regenerate it with generate_demo_world(out_dir)",
        )
    return DemoWorld(root=root, summary=summary)


def generate_demo_world(
    out_dir: str | Path,
    *,
    seed: int = 0,
    n_images: int = DEFAULT_N_IMAGES,
    write_images: bool = True,
    reuse: bool = True,
) -> DemoWorld:
    """Write the demo world for ``seed`` into ``out_dir`` (atomically) and return its paths.

    ``n_images`` scales every class proportionally; below ~3,000 images some classes fall under
    the default rules. ``write_images=False`` writes scene graphs only (for fast tests/benchmarks).
    With ``reuse`` an existing world with the same seed, size and generator version is returned
    as is.
    """
    if isinstance(n_images, bool) or not isinstance(n_images, (int, np.integer)) or n_images < 20:
        raise InputFormatError(
            f"n_images must be an integer >= 20, got {n_images!r}",
            f"use the default ({DEFAULT_N_IMAGES}) or a larger size",
        )
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputFormatError(f"seed must be a non-negative integer, got {seed!r}", "pass e.g. seed=0")
    n_images, seed = int(n_images), int(seed)
    out = Path(out_dir)
    if reuse and (out / SUMMARY_FILE).is_file():
        try:
            world = load_demo_world(out)
        except InputFormatError:
            world = None
        if (
            world is not None
            and (world.summary.get("generator_version"), world.summary.get("seed"), world.summary.get("n_images"))
            == (GENERATOR_VERSION, seed, n_images)
            and (world.summary.get("images_written") or not write_images)
        ):
            return world
    _check_existing(out)

    rng = np.random.default_rng(seed)
    counts = _class_counts(n_images)
    plan = [c for c in sorted(counts) for _ in range(counts[c])]
    order = rng.permutation(len(plan))  # classes interleaved, so ids carry no class information
    records: dict[str, dict] = {}
    templates: dict[str, int] = {}
    backgrounds: dict[str, tuple[str, str]] = {}
    for number, idx in enumerate(order):
        record, tname, location, place = _make_scene(rng, number, plan[idx])
        # ~10% 'n'-prefixed ids, as GQA has ('n166008'): ids are strings everywhere.
        image_id = f"n{ID_BASE + number}" if rng.random() < 0.1 else str(ID_BASE + number)
        records[image_id] = record
        templates[tname] = templates.get(tname, 0) + 1
        backgrounds[image_id] = (location, place)
    ids = sorted(records)
    is_val = rng.random(len(ids)) < VAL_FRACTION
    splits = {"train": [i for i, v in zip(ids, is_val) if not v], "val": [i for i, v in zip(ids, is_val) if v]}

    summary: dict = {
        "format": DEMO_WORLD_FORMAT,
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "n_images": n_images,
        "images_written": write_images,
        "splits": {k: len(v) for k, v in splits.items()},
        "images_per_main_class": counts,
        "images_per_template": dict(sorted(templates.items())),
        "jpeg_quality": JPEG_QUALITY,
        "image_sizes": [list(s) for s in IMAGE_SIZES],
    }
    # force: a world of another seed or size is ours to replace; a folder that is not a world never is
    with atomic_dir(out, kind="demo world", force=True) as tmp:
        files = {}
        for split, split_ids in splits.items():
            name = f"{split}_sceneGraphs.json"
            payload = json.dumps({i: records[i] for i in split_ids}, separators=(",", ":")).encode()
            (tmp / name).write_bytes(payload)
            files[name] = hashlib.sha256(payload).hexdigest()
        summary["sha256"] = files
        if write_images:
            (tmp / "images").mkdir()

            def write(k: int) -> int:
                # Own stream per image: pixels are independent of the JSON draws and of thread order.
                image_id = ids[k]
                data = _draw(records[image_id], *backgrounds[image_id], np.random.default_rng([seed, 1, k]))
                (tmp / "images" / f"{image_id}.jpg").write_bytes(data)
                return len(data)

            # Threads overlap JPEG encoding (PIL releases the GIL) with file creation.
            with ThreadPoolExecutor(max_workers=4) as pool:
                summary["image_bytes"] = sum(pool.map(write, range(len(ids))))
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return DemoWorld(root=out, summary=summary)
