"""Task options: the typed options dataclasses of the task families and their coercion.

A family's options arrive as a flat mapping (Python keywords, ``--set KEY=VALUE``, builder config
fields); :func:`option_value` converts one value to its field's type or raises an
:class:`InputFormatError` naming the option and the fix. Name checks against the registered families
(did-you-mean, "applies to another family") are in :func:`tasks.families.parse_options`.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Union

from metashift_hf.core.errors import InputFormatError


class Default(enum.Enum):
    """An option left at the task's default (for sizes where None is a value: 'whole groups')."""

    DEFAULT = "default"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = Default.DEFAULT


def _doc(text: str) -> dict:
    return {"doc": text}


@dataclass(frozen=True)
class PaperDGOptions:
    """Options of ``paper-dg-cat-dog-<k>`` (sizes default to the paper's)."""

    scale: float | None = field(default=None, metadata=_doc("multiply every size by this fraction in (0, 1]"))
    train_per_group: int | Default = field(default=DEFAULT, metadata=_doc("training images per group (100)"))
    validation_per_group: int | Default = field(
        default=DEFAULT, metadata=_doc("validation images per training group (25)")
    )
    id_test_per_group: int | Default = field(
        default=DEFAULT, metadata=_doc("id_test images per training group, at most (50)")
    )
    test_per_group: int | None | Default = field(
        default=DEFAULT, metadata=_doc("test images per test group; None = whole groups (default)")
    )
    additional_test_per_group: int | None | Default = field(
        default=DEFAULT, metadata=_doc("images per additional test group; 0 = left out (default), None = whole groups")
    )


@dataclass(frozen=True)
class PaperSubpopOptions:
    """Options of ``paper-subpop-cat-dog-p12|p6|p1`` (sizes default to the paper's)."""

    scale: float | None = field(
        default=None, metadata=_doc("multiply every size by this fraction in (0, 1]; drops the paper's pool check")
    )
    minority_fraction: float | Default = field(
        default=DEFAULT,
        metadata=_doc("minority share of each class's training images, in [0, 0.5] (sets minority_per_class)"),
    )
    train_per_class: int | Default = field(default=DEFAULT, metadata=_doc("training images per class (850)"))
    minority_per_class: int | Default = field(
        default=DEFAULT, metadata=_doc("minority training images per class (100 / 50 / 10 for p12 / p6 / p1)")
    )
    test_per_group: int | Default = field(default=DEFAULT, metadata=_doc("balanced test images per group (144)"))
    validation_per_class: int | Default = field(default=DEFAULT, metadata=_doc("validation images per class (85)"))


@dataclass(frozen=True)
class ClassOptions:
    """Options of ``class-<name>`` (every image of one class, once)."""

    image_subset_size_threshold: int | None = field(
        default=None,
        metadata=_doc("keep only subsets with at least this many images (>= the artifact's min_images_per_subset)"),
    )
    min_local_groups: int | None = field(
        default=None, metadata=_doc("keep the class only when it has more than this many such subsets")
    )


@dataclass(frozen=True)
class CollectionOptions(ClassOptions):
    """Options of ``classes`` / ``attributes`` (the old Hugging Face loader's collections)."""

    selected_classes: tuple[str, ...] | None = field(
        default=None, metadata=_doc("classes to include (default: every class of the artifact)")
    )
    attributes: tuple[str, ...] | None = field(
        default=None, metadata=_doc("'attributes' only: restrict to these subsets, e.g. ['cat(orange)']")
    )


@dataclass(frozen=True)
class SubpopBenchOptions:
    """Options of ``subpopbench-cat-dog`` (SubpopBench's MetaShift: metashift_hf/tasks/subpopbench.py)."""

    metadata: str | None = field(
        default=None,
        metadata=_doc(
            "a SubpopBench metadata_metashift.csv: its split column as it is (image ids from the file names); "
            "None = SubpopBench's rule over this build's folders sorted by file name"
        ),
    )


def option_docs(options_type: type) -> dict[str, str]:
    """Option name -> its documentation (for CLI help and docs)."""
    return {f.name: f.metadata.get("doc", "") for f in fields(options_type)}


def _type_name(hint: Any) -> str:
    parts = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    names = []
    for p in parts:
        if p is Default:
            continue
        if p is type(None):
            names.append("null")
        elif typing.get_origin(p) is tuple:
            names.append("a list of names")
        else:
            names.append("a number" if p is float else "an integer" if p is int else getattr(p, "__name__", str(p)))
    return " or ".join(names)


def _coerce(value: Any, hint: Any) -> tuple[bool, Any]:
    """(accepted, value converted to the field's type) for one union member."""
    if hint is Default:
        return value is DEFAULT, value
    if hint is type(None):
        return value is None, None
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            return False, value
        return True, int(value)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        return True, float(value)
    if typing.get_origin(hint) is tuple:
        if (
            isinstance(value, str)
            or not isinstance(value, (list, tuple))
            or not all(isinstance(v, str) for v in value)
        ):
            return False, value
        return True, tuple(value)
    return isinstance(value, hint), value


def option_value(task_id: str, name: str, value: Any, hint: Any) -> Any:
    members = typing.get_args(hint) if typing.get_origin(hint) in (Union, types.UnionType) else (hint,)
    for m in members:
        ok, out = _coerce(value, m)
        if ok:
            return out
    raise InputFormatError(
        f"task {task_id}: option {name}={value!r} is not {_type_name(hint)}",
        f"pass {name} as {_type_name(hint)} (Python keyword, or --set {name}=VALUE as JSON)",
    )


@dataclass(frozen=True)
class CocoSubpopOptions(PaperSubpopOptions):
    """Options of ``paper-coco-subpop-cat-dog-p13|p7|p1``; sizes default to the paper's COCO experiment:
    1,500 training images per class (3,000), 131 balanced test images per group (524), 150 validation
    images per class, minority 195 / 105 / 15 per class."""


def given_options(options: Any) -> dict[str, Any]:
    """The options that differ from their field defaults (what a shift spec records)."""
    out = {}
    for f in fields(options):
        v = getattr(options, f.name)
        default = f.default if f.default is not MISSING else None
        if v is not default and v != default:
            out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def given_sizes(options: Any) -> dict[str, Any]:
    return {
        f.name: getattr(options, f.name)
        for f in fields(options)
        if f.name != "scale" and getattr(options, f.name) is not DEFAULT
    }
