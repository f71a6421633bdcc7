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

import base64
import binascii
import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from metashift_hf.builders.jsontypes import decode, encode
from metashift_hf.core.errors import InputFormatError


SPEC_VERSION = 6
# 2: ``measured`` (the shift measured from the rows, metashift_hf/tasks/measured.py) added; paper-dg tasks are
# declared ``joint``. A version-1 spec still reads (``measured`` None: not measured).
# 3: ``measured.by_construction`` (the construction that fixes the declared type where the rows may not
# show it); a version-2 spec reads with it "" (its note was not checked against that rule).
# 4: ``measured``: S is the class-qualified community where contexts are per-class community labels,
# ``dependence`` is a share of its largest value for the split's P(Y), label shift is its own part
# (``p_y_threshold``, ``label_shift``); a version 2-3 spec reads with those two None (not measured).
# 5: ``members`` (each split's rows, :class:`SplitMembers`: a digest of the whole split and a filter for a part of
# it); a version 1-4 spec reads with ``members`` None (not recorded: rows are not checked for membership).
# 6: ``facts_sha256`` (file name -> sha256 of each meta-graph facts file an export publishes beside the shards:
# ``meta_graph.parquet``, ``meta_graph_distances.parquet``), checked before the facts are used
# (metashift_hf.hub.task_data); a version 1-5 spec reads with it None (facts unverified: structural checks only).
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
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
    """One level of a shift family (tasks.levels), as in the task id: ``shift-marginal-cat-dog-d3``."""

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
    """One split against ``train``: total-variation figures over S = the row's context (metashift_hf/tasks/measured.py)."""

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


# Split membership (issue 37): each split's rows are recorded in the spec, so that rows of another split (a
# training part passed as "test"), or rows whose label, group, contexts or community were changed, are refused.
# A row is keyed by every column that scoring reads (row_key); a split keeps
#   digest: sha256 over its rows' sorted sha256 hashes -- the whole split, exactly;
#   filter: its rows' hashes reduced to [0, n * 2**P) and Elias-Fano coded (the high bits as unary gaps, the
#     low P bits packed: about P + 2 bits a row), so a part of the split (``ds["test"].select(...)``) is checked
#     row by row: a row that is not the split's passes with probability about 2**-P.
# P is MEMBERS_BITS_MAX (one foreign row in a million passes) until a split's filter would pass MEMBERS_BUDGET_BITS
# (47,000 rows); a larger split trades P for size (100,000 rows: P = 8, 1 in 256 passes, 122 KiB), never below
# MEMBERS_BITS_MIN: the spec is copied into every shard and the card, so its size matters for large collections.
MEMBERS_BITS_MAX = 20
MEMBERS_BITS_MIN = 8
MEMBERS_BUDGET_BITS = 2**20


def row_key(
    image_id: Any, label: Any, group: Any, context: Any, contexts: "Iterable[Any] | None", community: Any
) -> bytes:
    """A row as the bytes :class:`SplitMembers` hashes: its image id, class name, group, context, contexts and
    community (canonical JSON; a missing value keys as null, so it never equals a recorded row)."""
    return json.dumps(
        [
            image_id,
            label,
            group,
            context,
            [c for c in (contexts if contexts is not None else ())],
            None if community is None else int(community),
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


def _row_hashes(keys: Iterable[bytes]) -> list[bytes]:
    return [hashlib.sha256(k).digest() for k in keys]


def _digest(hashes: list[bytes]) -> str:
    return hashlib.sha256(b"".join(sorted(hashes))).hexdigest()


def _reduce(hashes: list[bytes], n: int, bits: int) -> np.ndarray:
    """Each hash's first 8 bytes mapped onto [0, n * 2**bits) (multiply-shift: no modulo bias), as uint64."""
    u = max(n, 1) << bits
    return np.array([(int.from_bytes(h[:8], "big") * u) >> 64 for h in hashes], dtype=np.uint64)


@dataclass(frozen=True)
class SplitMembers:
    """One split's rows: ``n`` rows, the ``digest`` of them all and the ``filter`` (base64, ``filter_bits`` = P) a
    part of the split is checked with (see the comment above :data:`MEMBERS_BITS_MAX`)."""

    split: str
    n: int
    digest: str
    filter_bits: int
    filter: str

    @classmethod
    def of(cls, split: str, keys: Iterable[bytes]) -> "SplitMembers":
        """The record of a split whose rows are ``keys`` (:func:`row_key` of each row)."""
        hashes = _row_hashes(keys)
        n = len(hashes)
        bits = min(MEMBERS_BITS_MAX, max(MEMBERS_BITS_MIN, MEMBERS_BUDGET_BITS // max(n, 1) - 2))
        values = np.sort(_reduce(hashes, n, bits))
        upper = np.zeros(2 * n, np.uint8)  # value i's high part h_i sets bit h_i + i (h_i < n: 2n bits)
        upper[(values >> np.uint64(bits)).astype(np.int64) + np.arange(n)] = 1
        shifts = np.arange(bits - 1, -1, -1, dtype=np.uint64)
        low = ((values[:, None] >> shifts) & np.uint64(1)).astype(np.uint8).ravel()
        packed = np.packbits(upper).tobytes() + np.packbits(low).tobytes()
        return cls(split, n, _digest(hashes), bits, base64.b64encode(packed).decode("ascii"))

    def problem(self) -> str | None:
        """Why this record cannot be a written one (None: it decodes)."""
        if self.n < 0 or not MEMBERS_BITS_MIN <= self.filter_bits <= MEMBERS_BITS_MAX:
            return f"n {self.n}, filter_bits {self.filter_bits} out of range"
        if len(self.digest) != 64 or any(c not in "0123456789abcdef" for c in self.digest):
            return "digest is not a sha256 hex digest"
        try:
            self._values
        except ValueError as exc:
            return str(exc)
        return None

    @functools.cached_property
    def _values(self) -> np.ndarray:
        """The filter decoded: the split's reduced row hashes, sorted (ValueError: not a filter of ``n`` rows)."""
        n, bits = self.n, self.filter_bits
        try:
            raw = base64.b64decode(self.filter.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise ValueError("filter is not base64") from None
        n_upper = (2 * n + 7) // 8
        if len(raw) != n_upper + (n * bits + 7) // 8:
            raise ValueError(f"filter has {len(raw)} bytes, not those of {n} rows at {bits} bits")
        pos = np.flatnonzero(np.unpackbits(np.frombuffer(raw[:n_upper], np.uint8))[: 2 * n])
        if pos.size != n:
            raise ValueError(f"filter codes {pos.size} rows, not {n}")
        low = np.unpackbits(np.frombuffer(raw[n_upper:], np.uint8))[: n * bits].reshape(n, bits).astype(np.uint64)
        high = (pos - np.arange(n)).astype(np.uint64)
        return (high << np.uint64(bits)) | (low @ (np.uint64(1) << np.arange(bits - 1, -1, -1, dtype=np.uint64)))

    def foreign(self, keys: Sequence[bytes]) -> np.ndarray:
        """One bool per key: True where the row is certainly not one of this split's rows."""
        values = _reduce(_row_hashes(keys), self.n, self.filter_bits)
        return ~np.isin(values, self._values)

    def same_rows(self, keys: Iterable[bytes]) -> bool:
        """Whether ``keys`` are exactly this split's rows (in any order)."""
        return _digest(_row_hashes(keys)) == self.digest


def split_members(splits: Mapping[str, Sequence[Any]]) -> tuple[SplitMembers, ...]:
    """The record of each split's rows (rows as :class:`tasks.plan.Row`: image_id, label, group, context,
    contexts, community), in the splits' order."""
    return tuple(
        SplitMembers.of(
            split, (row_key(r.image_id, r.label, r.group, r.context, r.contexts, r.community) for r in rows)
        )
        for split, rows in splits.items()
    )


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
    members: tuple[SplitMembers, ...] | None = None  # each split's rows (None: not recorded, a version 1-4 spec)
    # the published meta-graph facts files' sha256 by file name (None: not published yet, or a version 1-5 spec)
    facts_sha256: Mapping[str, str] | None = None
    spec_version: int = SPEC_VERSION

    @property
    def collection(self) -> bool:
        """A whole-class collection: no shift type and no test groups (every group in ``train``); it may list an
        image once per class it shows. A ``none`` task with a test split (the conditional family's delta = 0
        control, SubpopBench's random split) is not one."""
        return self.shift_type == "none" and not self.test_groups

    def groups(self) -> dict[str, tuple[GroupSpec, ...]]:
        """Split -> its groups, for the splits that have any (train, validation, test, id_test order)."""
        out = {
            "train": self.train_groups,
            "validation": self.validation_groups,
            "test": self.test_groups,
            "id_test": self.id_test_groups,
        }
        return {k: v for k, v in out.items() if v}

    def members_of(self, split: str) -> SplitMembers | None:
        """The record of ``split``'s rows (None: the spec records none, or no such split)."""
        return next((m for m in self.members or () if m.split == split), None)

    def unpublished(self) -> "ShiftSpec":
        """The task's spec without what export adds when it publishes it (the facts' digests): the same task,
        planned or exported, has one unpublished spec (a run's task hash, tests comparing forms)."""
        return dataclasses.replace(self, facts_sha256=None)

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
        if version in (1, 2, 3, 4, 5):  # written before `facts_sha256` existed: the facts are unverified
            if "facts_sha256" in data:
                raise InputFormatError(f"{where}: spec_version {version} has no 'facts_sha256' key", _FIX)
            data = {**data, "facts_sha256": None}
        if version in (1, 2, 3, 4):  # written before `members` existed: rows are not checked for membership
            if "members" in data:
                raise InputFormatError(f"{where}: spec_version {version} has no 'members' key", _FIX)
            data = {**data, "members": None}
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
        spec = decode(cls, data, where, _FIX)
        _check_members(spec, where)
        _check_facts_digests(spec, where)
        return spec

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


def _check_members(spec: ShiftSpec, where: str) -> None:
    """A spec's ``members`` record every split it sizes, once, with its size, and decode."""
    if spec.members is None:
        return
    sizes = {m.split: m.n for m in spec.members}
    if len(sizes) != len(spec.members) or sizes != dict(spec.split_sizes):
        raise InputFormatError(
            f"{where}: members record splits {sizes}, its split_sizes are {dict(spec.split_sizes)}", _FIX
        )
    for m in spec.members:
        why = m.problem()
        if why:
            raise InputFormatError(f"{where}: members of split {m.split!r}: {why}", _FIX)


_FACTS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\.parquet")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_facts_digests(spec: ShiftSpec, where: str) -> None:
    """``facts_sha256`` names plain parquet files of the config folder, each with a sha256 hex digest."""
    for name, digest in (spec.facts_sha256 or {}).items():
        if not (_FACTS_NAME.fullmatch(name) and _SHA256.fullmatch(digest)):
            raise InputFormatError(
                f"{where}: facts_sha256 entry {name[:100]!r}: {digest[:100]!r} is not a file name with its sha256",
                _FIX,
            )


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
    "SplitMembers",
    "split_members",
    "row_key",
    "DistanceRule",
    "LevelType",
    "TestMode",
]
