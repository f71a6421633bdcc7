"""A task's train/test group distances, read from the artifact's meta-graphs (what a card shows).

Cards format and do not compute: :func:`train_test_distances` is called when the card facts are
gathered and hands the card ready :class:`TrainTestDistance` rows.
"""

from __future__ import annotations

from typing import NamedTuple

from metashift_hf.builders.distances import Distance
from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.names import SubsetName

from .spec import GroupSpec, ShiftSpec


class TrainTestDistance(NamedTuple):
    """One class's train group vs one of its test groups, by both group rules (None: not resolvable)."""

    cls: str
    train: str
    test: str
    code: Distance | None
    paper: Distance | None


def group_subsets(group: GroupSpec, kept: set[str]) -> list[str]:
    """The kept subsets ``cls(context)`` a group is made of (the contexts the artifact has, when recorded)."""
    contexts = group.contexts_found or group.contexts
    names = (str(SubsetName(group.cls, c)) for c in contexts)
    return [n for n in names if n in kept]


def train_test_distances(spec: ShiftSpec, art) -> list[TrainTestDistance]:
    """Group-to-group distances (code and paper rule) between each class's train and test groups.

    Computed over this task's groups of the class, so the code-rule value can differ from the
    spec's ``distance`` when the task defines it over a wider family of groups (the card says so).
    ``art``: a loaded ``builders.artifact.Artifact``.
    """
    groups = spec.groups()
    rows = []
    for cls in spec.classes:
        try:
            kept = set(art.subsets_of(cls))
        except MetashiftError:
            continue
        members: dict[str, list[str]] = {}
        for key in ("train", "validation", "test", "id_test"):
            for g in groups.get(key, ()):
                if g.cls == cls and (subsets := group_subsets(g, kept)):
                    members.setdefault(g.group, subsets)
        train = sorted({g.group for g in groups.get("train", ()) if g.group in members})
        test = sorted({g.group for g in groups.get("test", ()) if g.group in members} - set(train))
        for a in train:
            for b in test:
                values = []
                for rule in ("code", "paper"):
                    try:
                        values.append(art.group_distance(cls, members, a, b, rule=rule))
                    except (MetashiftError, ValueError, KeyError):
                        values.append(None)  # e.g. a group the artifact cannot resolve
                rows.append(TrainTestDistance(cls, a, b, values[0], values[1]))
    return rows
