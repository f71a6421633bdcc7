"""Loading the published candidate-subset pickles safely.

The pickles are ``collections.defaultdict(set)`` of ``"subject(context)" -> {image id, ...}``.
Unpickling runs arbitrary callables, so only the two globals that format needs are allowed.
"""
from __future__ import annotations

import builtins
import collections
import os
import pickle
from pathlib import Path

from metashift_hf.core.errors import ChecksumError, InputFormatError, UnsafePickleError
from metashift_hf.core.fsutil import sha256_file
from metashift_hf.core.sources import known_file

from .subsets import CandidateSubsets, attribute_kind, published_kind

ALLOWED_GLOBALS = {
    ("builtins", "set"): builtins.set,
    ("collections", "defaultdict"): collections.defaultdict,
}

_FULL, _ATTRIBUTES = known_file("subsets"), known_file("attributes")  # the pins live in metashift_hf.sources
# file name -> (size that must also match, or None when the name alone identifies it; sha256)
KNOWN_PICKLES: dict[str, tuple[int | None, str]] = {
    _FULL.file_name: (None, _FULL.sha256),
    _ATTRIBUTES.file_name: (_ATTRIBUTES.size, _ATTRIBUTES.sha256),
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, path: Path) -> None:
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"{self._path}: pickle asks for the global {module}.{name}, which is not allowed "
                "(only builtins.set and collections.defaultdict)",
                "use the published candidate-subset pickle from the MetaShift repository, or a pickle of "
                "a dict of name -> set of image-id strings",
            ) from None


def restricted_load(path: str | os.PathLike):
    """Unpickle ``path`` allowing only ``set`` and ``defaultdict``; UnsafePickleError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"pickle {path} does not exist", "pass the path of a candidate-subset pickle")
    with open(path, "rb") as f:
        try:
            return _RestrictedUnpickler(f, path).load()
        except UnsafePickleError:
            raise
        except Exception as exc:  # truncated/garbage files raise many different exceptions
            raise InputFormatError(
                f"{path}: not a readable pickle ({type(exc).__name__}: {exc})",
                "re-download the file; it may be truncated or not a pickle",
            ) from None


def verify_known(path: str | os.PathLike) -> str | None:
    """If the file's name (and size, when pinned) identify a known published pickle, check its
    sha256 and return it; ChecksumError on mismatch. Returns None for unknown files."""
    path = Path(path)
    known = KNOWN_PICKLES.get(path.name)
    if known is None:
        return None
    size, expected = known
    if size is not None and path.stat().st_size != size:
        return None  # same name, different size: a user's own file, not the published one
    digest = sha256_file(path)
    if digest != expected:
        raise ChecksumError(
            f"{path}: sha256 {digest} differs from the published {path.name} ({expected})",
            "re-download the file from the MetaShift repository (dataset/meta_data/), or rename it if it "
            "is deliberately a different file",
        )
    return digest


def load_candidate_pickle(path: str | os.PathLike, *, attributes: bool = False) -> CandidateSubsets:
    """Load a published-format pickle into CandidateSubsets (kinds from the published conventions)."""
    path = Path(path)
    if path.is_file():
        verify_known(path)
    data = restricted_load(path)
    if not isinstance(data, dict):
        raise InputFormatError(
            f"{path}: top-level object is {type(data).__name__}, expected a dict of name -> set of image ids",
            "pass the MetaShift candidate-subset pickle",
        )
    mapping: dict[str, list[str]] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not isinstance(value, (set, frozenset, list, tuple)):
            raise InputFormatError(
                f"{path}: key {key!r} maps to {type(value).__name__}, expected a set of image-id strings",
                "pass the MetaShift candidate-subset pickle",
            )
        bad = next((v for v in value if not isinstance(v, str)), None)
        if bad is not None:
            raise InputFormatError(f"{path}: key {key!r} holds image id {bad!r}, expected a string",
                                   "image ids must be GQA id strings such as '2375429'")
        mapping[key] = value  # type: ignore[assignment]
    classify = attribute_kind if attributes else published_kind
    kinds, cats = {}, {}
    for name in mapping:
        try:
            kinds[name], cats[name] = classify(name)
        except InputFormatError as exc:
            raise InputFormatError(f"{path}: {exc.what}", exc.fix) from None
    return CandidateSubsets.from_dict(mapping, kind=kinds, category=cats)
