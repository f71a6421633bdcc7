"""Build options: every choice that changes an artifact's tables (stored in its manifest.json)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from metashift_hf.core.errors import InputFormatError

from . import metagraph
from .subsets import KINDS


PAIRINGS = ("relation", "cooccurrence")
GENERAL_CONTEXT_AS = ("subject", "context")


@dataclass(frozen=True)
class BuildOptions:
    """Every choice that changes the artifact's tables (stored in manifest.json)."""

    min_images_per_subset: int = field(
        default=25, metadata={"help": "a subset is kept when it has at least this many images (paper and code: 25)"}
    )
    min_subsets_per_class: int = field(
        default=5,
        metadata={"help": "a subject is a class when it has MORE than this many kept subsets (the code's '> 5')"},
    )
    max_subsets_per_class: int = field(
        default=2000,
        metadata={
            "help": "keep at most this many subsets (contexts) per class, its largest by image count, ties by name; "
            "bounds each dense meta-graph (web-scale tag sets); 0: no cap"
        },
    )
    edge_threshold: float = field(
        default=0.2,
        metadata={
            "help": "drop meta-graph edges whose overlap coefficient is below this (original code 0.2; paper text 0.1)"
        },
    )
    community_method: str = field(
        default="cnm",
        metadata={
            "choices": ("cnm", "louvain"),
            "help": "cnm: unweighted greedy modularity (what the original code ran); louvain: weighted, seeded (the paper's name)",
        },
    )
    spectral_dim: int = field(
        default=5, metadata={"help": "K: eigenvectors 2..K+1 of the Laplacian L = D - A embed each subset"}
    )
    seed: int = field(default=0, metadata={"help": "seed of every random choice (Louvain)"})
    pairing: str = field(
        default="relation",
        metadata={
            "choices": ("relation", "cooccurrence"),
            "help": "scene graphs: relation = the subject has a scene-graph relation to the context object (fits the "
            "published one-directional keys); cooccurrence = both objects are in the image (the paper's wording)",
        },
    )
    general_context_as: str = field(
        default="subject",
        metadata={
            "choices": ("subject", "context"),
            "help": "scene graphs: subject writes general contexts as published, 'ocean(dog)'; context writes 'dog(ocean)'",
        },
    )
    include_objects: bool = field(default=True, metadata={"help": "keep object-context subsets ('dog(frisbee)')"})
    include_general: bool = field(
        default=True, metadata={"help": "keep general-context subsets (location/weather fields, place/room words)"}
    )
    include_attributes: bool = field(
        default=False,
        metadata={
            "help": "keep attribute subsets ('horse(white)'); off by default: the published full MetaShift has object "
            "and general contexts only, MetaShift-Attributes is a separate set"
        },
    )
    subject_tags: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "multi-label inputs (COCO, --tags, --hf-dataset): only these tags may be subjects, comma-separated "
            "(empty: every tag)"
        },
    )
    subject_categories: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "multi-label inputs: tags of these categories (COCO super-categories, e.g. animal) may be subjects too"
        },
    )

    def validate(self) -> "BuildOptions":
        def bad(name: str, value: Any, fix: str) -> InputFormatError:
            return InputFormatError(f"build option {name}={value!r} is invalid", fix)

        for f in ("min_images_per_subset", "min_subsets_per_class", "max_subsets_per_class", "spectral_dim", "seed"):
            v = getattr(self, f)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise bad(f, v, "use a non-negative integer")
        if self.min_images_per_subset < 1:
            raise bad("min_images_per_subset", self.min_images_per_subset, "use at least 1")
        if self.max_subsets_per_class and self.max_subsets_per_class <= self.min_subsets_per_class:
            raise bad(
                "max_subsets_per_class",
                self.max_subsets_per_class,
                f"use 0 (no cap) or more than min_subsets_per_class ({self.min_subsets_per_class})",
            )
        if self.spectral_dim < 1:
            raise bad("spectral_dim", self.spectral_dim, "use at least 1 (default 5)")
        if not isinstance(self.edge_threshold, (int, float)) or not 0.0 <= float(self.edge_threshold) <= 1.0:
            raise bad(
                "edge_threshold", self.edge_threshold, "use a number in [0, 1] (default 0.2; the paper says 0.1)"
            )
        for f, allowed in (
            ("community_method", metagraph.COMMUNITY_METHODS),
            ("pairing", PAIRINGS),
            ("general_context_as", GENERAL_CONTEXT_AS),
        ):
            if getattr(self, f) not in allowed:
                raise bad(f, getattr(self, f), f"use one of {', '.join(allowed)}")
        if not (self.include_objects or self.include_general or self.include_attributes):
            raise bad("include_*", False, "include at least one of object, general, attribute contexts")
        for f in ("subject_tags", "subject_categories"):
            v = getattr(self, f)
            if not isinstance(v, tuple) or not all(isinstance(x, str) and x.strip() == x and x for x in v):
                raise bad(f, v, "give a tuple of non-empty names (CLI: comma-separated, e.g. cat,dog)")
        return self

    def kinds(self) -> tuple[str, ...]:
        on = {"object": self.include_objects, "general": self.include_general, "attribute": self.include_attributes}
        return tuple(k for k in KINDS if on[k])

    def to_dict(self) -> dict:
        """JSON-ready (tuples as lists, as manifest.json stores them)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BuildOptions":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InputFormatError(f"unknown build options {unknown}", f"known options: {', '.join(sorted(names))}")
        # JSON (manifest.json) gives lists where the options hold tuples
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}).validate()
