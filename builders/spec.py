"""The shift spec: what a task's splits are and how they differ, as a frozen, versioned value.

Every task plan carries one (:class:`ShiftSpec`); it is written as ``shift_spec.json`` beside the
shards of an exported config and into the ``datasets`` info, and read back strictly:
:meth:`ShiftSpec.from_json` refuses unknown keys, missing keys, values of the wrong type and a
``spec_version`` it cannot read (:data:`READABLE_VERSIONS`) with an :class:`InputFormatError`.

JSON keys are the field names, except ``GroupSpec.cls`` which is ``"class"``. Tuples are JSON
lists, mappings JSON objects; every field is always written (``null`` when absent), so a spec
read back is equal to the one written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from metashift_hf.core.errors import InputFormatError

from .jsontypes import decode, encode


SPEC_VERSION = 4
# 2: ``measured`` (the shift measured from the rows, builders/measured.py) added; paper-dg tasks are
# declared ``joint``. A version-1 spec still reads (``measured`` None: not measured).
# 3: ``measured.by_construction`` (the construction that fixes the declared type where the rows may not
# show it); a version-2 spec reads with it "" (its note was not checked against that rule).
# 4: ``measured``: S is the class-qualified community where contexts are per-class community labels,
# ``dependence`` is a share of its largest value for the split's P(Y), label shift is its own part
# (``p_y_threshold``, ``label_shift``); a version 2-3 spec reads with those two None (not measured).
READABLE_VERSIONS = (1, 2, 3, 4)
# marginal: DG / community / shift-marginal; conditional: subpopulation / shift-conditional;
# joint: both at once (shift-joint); none: collections
# clustered: OOD sets from image clusters when contexts are unknown (metashift_hf.research.ood_experiments)
ShiftType = Literal["marginal", "conditional", "joint", "clustered", "none"]
DistanceRule = Literal["code", "paper", "subset", "custom"]  # custom: a caller-supplied distance function
LevelType = Literal["marginal", "conditional", "joint"]
TestMode = Literal["ood", "balanced", "reversed"]


@dataclass(frozen=True)
class GroupSpec:
    """One group of one split: the union of ``<class>(<context>)`` subsets, ``n`` rows in the split."""

    group: str
    cls: str = field(metadata={"json": "class"})
    contexts: tuple[str, ...]
    n: int
    contexts_found: tuple[str, ...] | None = None  # the contexts this artifact has (paper groups)
    additional: bool | None = None  # DG test groups: an additional (not the paper's) test group


@dataclass(frozen=True)
class ShiftDistance:
    """Meta-graph distance between training and test groups (docs/metagraph.md for the rules)."""

    value: float | None
    rule: DistanceRule
    note: str
    per_class: Mapping[str, float | None] | None = None  # matched tasks: one value per class
    metric: str | None = None  # which distance gave the number: spectral / resistance (builders.distances)
    per_class_metric: Mapping[str, str] | None = None  # matched tasks: per class, or 'disconnected'
    paper_value: float | None = None  # paper DG tasks: the published figure
    original_code_value: float | None = None  # paper DG tasks: what the released code prints


@dataclass(frozen=True)
class MinorityFraction:
    """Share of minority-group images in the training split: asked for and obtained."""

    target: float | None
    achieved: float | None


@dataclass(frozen=True)
class Removed:
    """Images removed while carving groups (ambiguous: show two classes; leakage: in another
    split; duplicate: already in an earlier group of the same split)."""

    ambiguous: int = 0
    leakage: int = 0
    duplicate: int = 0


@dataclass(frozen=True)
class SkippedImages:
    """Images dropped by ``on_missing='skip'`` (lists capped at 100 ids each)."""

    n: int
    missing: tuple[str, ...]
    corrupt: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Rules:
    """The artifact's build rules that shaped the subsets (from its manifest)."""

    min_images_per_subset: int
    min_subsets_per_class: int
    edge_threshold: float
    community_method: str
    spectral_dim: int
    pairing: str


@dataclass(frozen=True)
class RegistryFacts:
    """Matched tasks: the match-registry entry the task came from."""

    kind: str  # binary | multiclass
    lca: str
    lca_name: str
    lca_depth: int
    path_similarity: float | None  # None when undefined
    subset_rule: str  # selected | kept


@dataclass(frozen=True)
class CollectionFilters:
    """Collections: the old loader's filters as given (None = not used)."""

    selected_classes: tuple[str, ...] | None = None
    attributes: tuple[str, ...] | None = None
    image_subset_size_threshold: int | None = None
    min_local_groups: int | None = None


@dataclass(frozen=True)
class PaperFacts:
    """Paper tasks: published sizes and the rules transcribed from the paper/code."""

    sizes: Mapping[str, int]  # published counts, e.g. train_total (compared in the card)
    ambiguous_rule: str
    leakage_order: tuple[str, ...] = ()
    pool: Mapping[str, int] | None = None  # subpopulation: the original code's per-group truncation
    minority_fractions: tuple[str, ...] = ()  # subpopulation: the published p values
    categories: Mapping[str, tuple[str, ...]] | None = None  # COCO: the super-categories of each context value


@dataclass(frozen=True)
class Level:
    """One level of a shift family (builders.levels), as in the task id: ``shift-marginal-cat-dog-d3``."""

    type: LevelType
    name: str
    rank: int | None = None  # distance rank (marginal, joint)
    delta: float | None = None  # conditional, joint: P(A|s1) = 1/2 + delta in training
    mixed_fraction: float = 0.0  # marginal mix levels
    test: TestMode = "ood"
    distance: float | None = None  # filled in by the generator


@dataclass(frozen=True)
class Factor:
    """Shift-level tasks: the context factor S whose values an image may hold."""

    name: str
    values: Mapping[str, tuple[str, ...]]  # value -> its contexts
    dropped_two_values: int  # images dropped because they hold contexts of two values
    rule: str
    labels: Mapping[str, str] | None = None  # conditional: value -> its group label
    within_train: Mapping[str, tuple[str, ...]] | None = None  # joint: s1/s2 inside the training contexts


@dataclass(frozen=True)
class FamilyDesign:
    """Marginal/joint shift families: every level's training contexts and distance to the test contexts."""

    test_contexts: tuple[str, ...]
    train_contexts: tuple[tuple[str, ...], ...]
    distances: tuple[float, ...]
    distance_rule: str


@dataclass(frozen=True)
class ConditionalFacts:
    """Conditional/joint shift levels: P(S = s1) and P(Y = class_a | S = s1) in train (and test)."""

    p_s1: float
    p_a_given_s1_train: float
    class_a: str
    p_a_given_s1_test: float | None = None
    note: str = ""


@dataclass(frozen=True)
class MixedFraction:
    """Marginal mix levels: share of test-context images mixed into training."""

    target: float
    images_per_class: int


@dataclass(frozen=True)
class SplitShift:
    """One split against ``train``: total-variation figures over S = the row's context (builders/measured.py)."""

    split: str
    n: int
    p_s_tv: float  # TV(P_train(S), P_split(S))
    p_y_given_s_tv: float | None  # on the contexts both splits have, weighted by the split's P(S); None: none shared
    shared_mass: float  # share of the split's rows whose context training has
    dependence: float  # sum_s P(s) TV(P(Y|s), P(Y)) / sum_y P(y)(1 - P(y)) inside this split (0..1)
    conditional: float  # max(p_y_given_s_tv, |dependence_train - dependence|): the P(Y|S) shift
    p_y_tv: float  # TV of the class proportions: label shift (its own part, not in the type)
    p_s_threshold: float  # a P(S) shift counts above this (floor or permutation 95th percentile)
    conditional_threshold: float  # a P(Y|S) shift counts above this
    type: ShiftType  # marginal | conditional | joint | none, by the rule
    p_y_threshold: float | None = None  # a label shift counts above this; None: not measured (spec_version < 4)
    label_shift: bool | None = None  # p_y_tv above p_y_threshold


@dataclass(frozen=True)
class MeasuredShift:
    """The shift measured between train and each other split; ``type`` is the test split's."""

    rule: str
    dependence_train: float
    splits: tuple[SplitShift, ...]
    type: ShiftType
    agrees: bool  # type == the declared shift_type
    note: str  # the construction and the measurement beside it, or why the declared type differs ("" when neither)
    # the construction that types the task where the rows may not show it ("held-out communities",
    # "delta = 0 control level", ...): "" when the declared type is simply the measured one
    by_construction: str

    def split(self, name: str) -> SplitShift | None:
        return next((s for s in self.splits if s.split == name), None)


@dataclass(frozen=True)
class ShiftSpec:
    """The machine-readable description of one task (DEVELOPERS.md "Task layer")."""

    task_id: str
    shift_type: ShiftType
    classes: tuple[str, ...]
    seed: int
    split_sizes: Mapping[str, int]
    train_groups: tuple[GroupSpec, ...] = ()
    validation_groups: tuple[GroupSpec, ...] = ()
    test_groups: tuple[GroupSpec, ...] = ()
    id_test_groups: tuple[GroupSpec, ...] = ()
    distance: ShiftDistance | None = None
    minority_fraction: MinorityFraction | None = None
    minority_groups: tuple[str, ...] = ()
    removed: Removed = Removed()
    artifact_hash: str | None = None
    rules: Rules | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)  # the task options given (JSON values)
    notes: tuple[str, ...] = ()
    skipped_images: SkippedImages | None = None
    registry: RegistryFacts | None = None
    filters: CollectionFilters | None = None
    paper: PaperFacts | None = None
    level: Level | None = None
    factor: Factor | None = None
    family: FamilyDesign | None = None
    conditional: ConditionalFacts | None = None
    mixed_fraction: MixedFraction | None = None
    measured: MeasuredShift | None = None
    spec_version: int = SPEC_VERSION

    def groups(self) -> dict[str, tuple[GroupSpec, ...]]:
        """Split -> its groups, for the splits that have any (train, validation, test, id_test order)."""
        out = {
            "train": self.train_groups,
            "validation": self.validation_groups,
            "test": self.test_groups,
            "id_test": self.id_test_groups,
        }
        return {k: v for k, v in out.items() if v}

    def to_dict(self) -> dict:
        return encode(self)

    def to_json(self, *, compact: bool = False) -> str:
        """Sorted-key JSON: indented with a final newline (files), or on one line (``compact``)."""
        if compact:
            return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return json.dumps(self.to_dict(), sort_keys=True, indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: Any, where: str = "shift spec") -> "ShiftSpec":
        if not isinstance(data, Mapping):
            raise InputFormatError(f"{where}: not a JSON object", _FIX)
        version = data.get("spec_version")
        if version not in READABLE_VERSIONS:
            raise InputFormatError(
                f"{where}: spec_version {version!r}, this package reads {', '.join(map(str, READABLE_VERSIONS))}",
                "read it with the metashift-hf version that wrote it, or export/prepare the task again",
            )
        if version == 1:  # written before `measured` existed: read as not measured
            if "measured" in data:
                raise InputFormatError(f"{where}: spec_version 1 has no 'measured' key", _FIX)
            data = {**data, "measured": None}
        elif version == 2 and isinstance(data.get("measured"), Mapping):  # before `by_construction` existed
            if "by_construction" in data["measured"]:
                raise InputFormatError(f"{where}: spec_version 2 has no 'measured.by_construction' key", _FIX)
            data = {**data, "measured": {**data["measured"], "by_construction": ""}}
        if version in (2, 3) and isinstance(data.get("measured"), Mapping):  # before label shift was a part
            old = data["measured"].get("splits")
            if isinstance(old, list) and all(isinstance(x, Mapping) for x in old):
                if any(k in x for x in old for k in ("p_y_threshold", "label_shift")):
                    raise InputFormatError(f"{where}: spec_version {version} has no label-shift keys", _FIX)
                new = [{**x, "p_y_threshold": None, "label_shift": None} for x in old]
                data = {**data, "measured": {**data["measured"], "splits": new}}
        return decode(cls, data, where, _FIX)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "shift spec") -> "ShiftSpec":
        try:
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise InputFormatError(f"{where} is not valid JSON ({exc})", _FIX) from None
            return cls.from_dict(data, where)
        except RecursionError:  # a spec is a few levels deep; 100,000 nested brackets are not a spec
            raise InputFormatError(f"{where} is nested too deeply to be a shift spec", _FIX) from None


_FIX = "write it with ShiftSpec.to_json() (export the task again with `metashift-hf export`)"


__all__ = [
    "SPEC_VERSION",
    "ShiftType",
    "ShiftSpec",
    "GroupSpec",
    "ShiftDistance",
    "MinorityFraction",
    "Removed",
    "SkippedImages",
    "Rules",
    "RegistryFacts",
    "CollectionFilters",
    "PaperFacts",
    "Level",
    "Factor",
    "FamilyDesign",
    "ConditionalFacts",
    "MixedFraction",
    "MeasuredShift",
    "SplitShift",
    "READABLE_VERSIONS",
    "DistanceRule",
    "LevelType",
    "TestMode",
]
