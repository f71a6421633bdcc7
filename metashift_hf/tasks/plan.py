"""The split-plan data model: what a task is before any image is read.

:class:`TaskPlan` (rows per split + the shift spec), :class:`Row` (one dataset row), :class:`GroupDef`
(a group of context subsets) and :class:`GroupSource` (what a generator reads about the data:
:class:`ArtifactSource` over an artifact, :class:`SetSource` over plain sets). The generators that
make plans live in :mod:`.shifts`, :mod:`.paper_tasks`, :mod:`.levels` and :mod:`.coco_tasks`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Protocol, Sequence

from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.names import parse_subset_name

from .design_check import with_verdict
from .measured import measure
from .spec import ShiftSpec, SkippedImages, split_members


SPLITS = ("train", "validation", "test", "id_test")


# --------------------------------------------------------------------------------------------
# data types
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupDef:
    """A group = union of ``<cls>(<context>)`` subsets, named ``<cls>(<label>)``.

    Rows of the group get ``label`` as their ``context`` feature, so ``group == f"{cls}({context})"``
    on every row. ``context`` records whether the group is named after one of its own contexts
    (``dog(shelf)`` holds ``dog(shelf)``; merged groups such as ``dog(cabinet)`` too), "" when not
    (a community or an indoor/outdoor group). ``community`` is fixed for community groups;
    otherwise rows get the community all of the group's subsets share, or their own
    (:meth:`_RowMaker.rows`).
    """

    cls: str
    label: str
    contexts: tuple[str, ...]
    context: str = ""
    community: int | None = None

    @property
    def name(self) -> str:
        return f"{self.cls}({self.label})"

    def subsets(self) -> list[str]:
        return [f"{self.cls}({c})" for c in self.contexts]


@dataclass(frozen=True)
class Row:
    """One dataset row (the features, DEVELOPERS.md "Task layer"); ``group == f"{label}({context})"``."""

    image_id: str
    label: str  # class name; the builder maps it to a ClassLabel index
    group: str
    context: str  # the context part of ``group`` (its label: a context, indoor, community-0, ...)
    contexts: tuple[str, ...]  # the image's own kept contexts of its class
    community: int  # the group's community if one, else the row's majority community; -1: none


@dataclass
class TaskPlan:
    """Rows per split (only non-empty splits, in :data:`SPLITS` order) and the shift spec."""

    task_id: str
    classes: list[str]
    splits: dict[str, list[Row]]
    spec: ShiftSpec

    def __post_init__(self) -> None:
        self.assert_disjoint()

    def assert_disjoint(self) -> None:
        """Raise when an image sits in two rows of a task plan (two splits or twice in one split).

        Collections (``ShiftSpec.collection``) may list an image once per class it shows.
        """
        seen: dict[tuple[str, str], str] = {}
        per_class = self.spec.collection
        for split, rows in self.splits.items():
            for r in rows:
                key = (r.image_id, r.label if per_class else "")
                if key in seen:
                    raise MetashiftError(
                        f"task {self.task_id}: image {r.image_id} is in split {seen[key]!r} and again in "
                        f"{split!r} (group {r.group}); a split plan must never leak images",
                        "this is a bug in the split generator; please report it with the task id and seed",
                    )
                seen[key] = split

    def split_names(self) -> list[str]:
        return [s for s in SPLITS if s in self.splits] + sorted(s for s in self.splits if s not in SPLITS)

    def image_ids(self) -> list[str]:
        return sorted({r.image_id for rows in self.splits.values() for r in rows})

    def group_names(self) -> list[str]:
        """Every group of the plan's rows, over all splits, sorted: the ``group_id`` names."""
        return sorted({r.group for rows in self.splits.values() for r in rows})

    def table(self):
        """All rows as a pandas DataFrame with a ``split`` column (rows in plan order)."""
        import pandas as pd

        gid = {g: i for i, g in enumerate(self.group_names())}
        recs = [
            {
                "split": s,
                "image_id": r.image_id,
                "label": r.label,
                "group": r.group,
                "group_id": gid[r.group],
                "context": r.context,
                "contexts": list(r.contexts),
                "community": r.community,
            }
            for s in self.split_names()
            for r in self.splits[s]
        ]
        return pd.DataFrame(
            recs, columns=["split", "image_id", "label", "group", "group_id", "context", "contexts", "community"]
        )

    def without_images(
        self, drop: Iterable[str], *, missing: Sequence[str] = (), corrupt: Sequence[str] = (), summary: str = ""
    ) -> "TaskPlan":
        """The same plan minus some images (``on_missing='skip'``); sizes in the spec are updated and
        the spec records what was skipped (``missing``/``corrupt`` ids, capped at 100 each)."""
        drop = set(drop)
        if not drop:
            return self
        splits = {s: [r for r in rows if r.image_id not in drop] for s, rows in self.splits.items()}
        splits = {s: rows for s, rows in splits.items() if rows}
        skipped = SkippedImages(
            n=len(drop & set(self.image_ids())),
            missing=tuple(missing[:100]),
            corrupt=tuple(sorted(corrupt)[:100]),
            summary=summary,
        )
        spec = replace(with_sizes(self.spec, splits), skipped_images=skipped)
        return TaskPlan(self.task_id, self.classes, splits, spec)


class GroupSource(Protocol):
    """What a generator needs to know about the data (an artifact, or plain sets in tests)."""

    def subset_images(self, subset: str) -> frozenset[str]: ...  # every candidate subset; empty if absent
    def kept_contexts(self, cls: str) -> dict[str, frozenset[str]]: ...  # kept subsets of cls: context -> ids
    def community(self, subset: str) -> int: ...  # -1 when not kept
    def class_images(self, cls: str) -> frozenset[str]: ...  # images of every candidate subset of cls


class SetSource:
    """A :class:`GroupSource` over a plain ``{subset name: image ids}`` dict (tests, quick experiments).

    ``kept`` defaults to every subset; ``communities`` defaults to 0 for kept subsets.
    """

    def __init__(
        self,
        subsets: Mapping[str, Iterable[str]],
        kept: Iterable[str] | None = None,
        communities: Mapping[str, int] | None = None,
    ) -> None:
        self._sets = {k: frozenset(map(str, v)) for k, v in subsets.items()}
        self._kept = set(self._sets) if kept is None else set(kept)
        self._comm = dict(communities or {})

    def subset_images(self, subset: str) -> frozenset[str]:
        return self._sets.get(subset, frozenset())

    def kept_contexts(self, cls: str) -> dict[str, frozenset[str]]:
        out = {}
        for name in sorted(self._kept):
            subj, ctx = parse_subset_name(name)
            if subj == cls:
                out[ctx] = self._sets.get(name, frozenset())
        return out

    def community(self, subset: str) -> int:
        return self._comm.get(subset, 0) if subset in self._kept else -1

    def class_images(self, cls: str) -> frozenset[str]:
        out: set[str] = set()
        for name, ids in self._sets.items():
            if parse_subset_name(name)[0] == cls:
                out |= ids
        return frozenset(out)


class ArtifactSource:
    """A :class:`GroupSource` over a built artifact (``builders.artifact.Artifact``)."""

    def __init__(self, artifact) -> None:
        self.artifact = artifact
        table = artifact.subsets_table()
        self._rows = {str(r.subset): r for r in table.itertuples(index=False)}
        self._by_subject: dict[str, list[str]] = {}
        for name, r in self._rows.items():
            self._by_subject.setdefault(str(r.subject), []).append(name)
        self._images: dict[str, frozenset[str]] = {}  # generators ask for the same subsets repeatedly
        # asked once per row of a task: plain ints, not a namedtuple of numpy scalars per call
        self._community = {name: int(r.community) if bool(r.kept) else -1 for name, r in self._rows.items()}

    def subset_images(self, subset: str) -> frozenset[str]:
        if subset not in self._rows:
            return frozenset()
        if subset not in self._images:
            self._images[subset] = frozenset(self.artifact.images(subset))
        return self._images[subset]

    def kept_contexts(self, cls: str) -> dict[str, frozenset[str]]:
        out = {}
        for name in sorted(self._by_subject.get(cls, [])):
            r = self._rows[name]
            if bool(r.kept):
                out[str(r.context)] = self.subset_images(name)
        return out

    def kind(self, subset: str) -> str:
        r = self._rows.get(subset)
        return str(r.kind) if r is not None else ""

    def community(self, subset: str) -> int:
        return self._community.get(subset, -1)

    def class_images(self, cls: str) -> frozenset[str]:
        out: set[str] = set()
        for name in self._by_subject.get(cls, []):
            out |= self.subset_images(name)
        return frozenset(out)


def with_sizes(spec: ShiftSpec, splits: Mapping[str, list[Row]]) -> ShiftSpec:
    """``spec`` with split sizes, group sizes, the achieved minority fraction and the record of each split's rows
    (``members``: what a split's rows are checked against) counted from the rows."""
    sized = {}
    for s in SPLITS:
        counts = Counter(r.group for r in splits.get(s, []))
        groups = getattr(spec, f"{s}_groups") if s in splits else ()
        sized[f"{s}_groups"] = tuple(replace(g, n=int(counts.get(g.group, 0))) for g in groups)
    mf = spec.minority_fraction
    if mf is not None and "train" in splits:
        minority = set(spec.minority_groups)
        train = splits["train"]
        mf = replace(mf, achieved=round(sum(r.group in minority for r in train) / len(train), 6) if train else None)
    sized_spec = replace(
        spec,
        split_sizes={s: len(rows) for s, rows in splits.items()},
        minority_fraction=mf,
        measured=measure(splits, spec.shift_type),
        members=split_members(splits),
        **sized,
    )
    return with_verdict(sized_spec)
