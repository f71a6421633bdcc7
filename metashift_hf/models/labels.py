"""What each output of a classifier's head means: an ImageNet-1k class or any WordNet noun (ImageNet-21k).

A head is described by a :class:`LabelMap`: one WordNet id (``n`` + 8-digit WordNet 3.0 noun offset) per
output, or ``None`` with a reason when the label cannot be mapped. Unmappable labels are reported,
never guessed: an image whose top-1 output is one of them counts as wrong for every class.
Mapping needs no WordNet (wnids are checked against WordNet when a task is scored).
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Mapping

from metashift_hf.wordnet_match.imagenet import imagenet_classes

from ..core.errors import InputFormatError, short_repr


_WNID = re.compile(r"^(n\d{8})\b")
_DEFAULT_LABEL = re.compile(r"^LABEL_(\d+)$")  # transformers' id2label when a config names no labels
Rule = Literal["imagenet-1k order", "wnid", "imagenet-1k name", "imagenet-1k index", "unmapped"]


@dataclass(frozen=True)
class LabelMap:
    """Per head output: its label text, its wnid (or None) and the rule that mapped it."""

    names: tuple[str, ...]
    wnids: tuple[str | None, ...]
    rules: tuple[Rule, ...]

    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def is_imagenet_1k(self) -> bool:
        """The head is ImageNet-1k in class-index order (the case every scoring table is written for)."""
        return self.wnids == tuple(c.wnid for c in imagenet_classes())

    def imagenet_indices(self) -> tuple[int | None, ...]:
        """ImageNet-1k class index of each output (None when the output is not an ImageNet-1k class)."""
        index = _imagenet_index()
        return tuple(index.get(w) if w else None for w in self.wnids)

    def unmapped(self) -> list[dict]:
        return [{"index": i, "label": n} for i, (n, w) in enumerate(zip(self.names, self.wnids)) if w is None]

    def card(self) -> dict:
        counts: dict[str, int] = {}
        for r in self.rules:
            counts[r] = counts.get(r, 0) + 1
        unmapped = self.unmapped()
        return {
            "outputs": self.size,
            "imagenet_1k_order": self.is_imagenet_1k,
            "rules": dict(sorted(counts.items())),
            "unmapped": len(unmapped),
            "unmapped_labels": unmapped[:50],
        }


@lru_cache(maxsize=1)
def _imagenet_index() -> dict[str, int]:
    return {c.wnid: c.index for c in imagenet_classes()}


@lru_cache(maxsize=1)
def _imagenet_names() -> dict[str, str | None]:
    """Label text -> wnid for the full ImageNet-1k label and for each synonym that names one class only."""
    out: dict[str, str | None] = {}
    for c in imagenet_classes():
        full = c.name.strip().lower()
        out[full] = None if full in out else c.wnid  # 'crane' is the full label of two classes
    synonyms: dict[str, set[str]] = {}
    for c in imagenet_classes():
        for part in c.name.split(","):
            synonyms.setdefault(part.strip().lower(), set()).add(c.wnid)
    for name, wnids in synonyms.items():
        if name not in out:
            out[name] = next(iter(wnids)) if len(wnids) == 1 else None  # ambiguous ('crane', 'maillot'): unmapped
    return out


@lru_cache(maxsize=1)
def imagenet_1k_labels() -> LabelMap:
    classes = imagenet_classes()
    return LabelMap(
        tuple(c.name for c in classes), tuple(c.wnid for c in classes), ("imagenet-1k order",) * len(classes)
    )


def _mapping(id2label) -> Mapping:
    if not isinstance(id2label, Mapping):
        raise InputFormatError(
            f"id2label is a {type(id2label).__name__}, not a mapping of output index to label",
            "pass a dict such as {0: 'tabby, tabby cat', 1: 'n02084071'}",
        )
    return id2label


def _output_index(key) -> int:
    """An id2label key: an int, or its decimal text as JSON configs write it."""
    if isinstance(key, str) and re.fullmatch(r"[0-9]{1,9}", key.strip()):
        return int(key)
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return int(key)
    raise InputFormatError(
        f"the head's id2label has the key {short_repr(key)}, not an output index",
        "id2label keys are the output indices 0..n-1",
    )


def _names_index(label: str, name: str) -> bool:
    label = label.strip().lower()
    return label == name.strip().lower() or label == name.split(",")[0].strip().lower()


def map_labels(id2label: Mapping[int, str] | Mapping[str, str]) -> LabelMap:
    """Map a head's ``id2label`` to wnids: a wnid label (``n02084071`` or ``n02084071 dog``) as given,
    an ImageNet-1k label or unambiguous synonym by name, and a 1,000-output head with transformers'
    default ``LABEL_i`` names by ImageNet-1k index; anything else is unmapped (reported)."""
    items = sorted((_output_index(k), str(v)) for k, v in _mapping(id2label).items())
    keys = [k for k, _ in items]
    if not items or keys != list(range(len(items))):
        raise InputFormatError(
            f"the head's id2label has the keys {short_repr(keys)}, not 0..{len(keys) - 1}"
            if items
            else "the head's id2label is empty",
            f"id2label must name each output once, with keys 0..n-1 (here 0..{max(len(items) - 1, 0)}) in output order",
        )
    labels = [v for _, v in items]
    if len(labels) == 1000 and all(_names_index(v, c.name) for v, c in zip(labels, imagenet_classes())):
        # the usual ImageNet-1k head (e.g. the Hub's imagenet-1k-id2label.json): names confirm each index,
        # duplicates such as the two 'crane' classes included
        base = imagenet_1k_labels()
        return LabelMap(tuple(labels), base.wnids, ("imagenet-1k order",) * 1000)
    if len(labels) == 1000 and all(
        _DEFAULT_LABEL.match(v) and int(_DEFAULT_LABEL.match(v).group(1)) == i for i, v in enumerate(labels)
    ):
        base = imagenet_1k_labels()
        return LabelMap(base.names, base.wnids, ("imagenet-1k index",) * 1000)
    names = _imagenet_names()
    wnids: list[str | None] = []
    rules: list[Rule] = []
    for v in labels:
        m = _WNID.match(v.strip())
        if m:
            wnids.append(m.group(1))
            rules.append("wnid")
        elif names.get(v.strip().lower()):
            wnids.append(names[v.strip().lower()])
            rules.append("imagenet-1k name")
        else:
            wnids.append(None)
            rules.append("unmapped")
    return LabelMap(tuple(labels), tuple(wnids), tuple(rules))
