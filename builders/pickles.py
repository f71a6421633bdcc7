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
from typing import NamedTuple, NoReturn

from metashift_hf.core.errors import ChecksumError, InputFormatError, UnsafePickleError, short_repr
from metashift_hf.core.fsutil import sha256_file
from metashift_hf.core.names import usable_image_id
from metashift_hf.core.sources import known_file

from .subsets import CandidateSubsets, attribute_kind, published_kind


ALLOWED_GLOBALS = {
    ("builtins", "set"): builtins.set,
    ("collections", "defaultdict"): collections.defaultdict,
    ("__builtin__", "set"): builtins.set,  # the same global as Python 2 (and protocol 0-2 from Python 3) names it
}
# Bounds for a pickle that is not a pinned published file (checked before anything is built):
MAX_DEPTH = 8  # dict -> set -> str is depth 2; REDUCE arguments add a level or two
MAX_OPCODES = 50_000_000

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


_ATOMS = {
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
    "SHORT_BINBYTES",
    "BINBYTES",
    "BINBYTES8",
    "BININT",
    "BININT1",
    "BININT2",
    "INT",
    "LONG",
    "LONG1",
    "LONG4",
    "BINFLOAT",
    "FLOAT",
    "NONE",
    "NEWTRUE",
    "NEWFALSE",
}
_EMPTY = {"EMPTY_LIST": "list", "EMPTY_DICT": "dict", "EMPTY_SET": "set", "EMPTY_TUPLE": "tuple"}
_FROM_MARK = {"LIST": "list", "TUPLE": "tuple", "DICT": "dict", "FROZENSET": "set"}


class _Obj(NamedTuple):
    """What the scan knows of one object on the unpickling stack."""

    kind: str  # atom | list | tuple | dict | set | global | mark
    depth: int = 0
    atoms_only: bool = True  # every element is a str/number (safe to hash)
    items: tuple = ()  # the elements of a small tuple (REDUCE arguments)


_MARK = _Obj("mark")


def _scan(f, path: Path) -> None:
    """Walk the opcodes without building anything; refuse what could make loading unbounded.

    Refused: nesting deeper than MAX_DEPTH, a memo fetch of a container (shared references build
    2^n-leaf structures in n steps, which a hash or repr then walks whole), keys or set members
    that are not str/number (hashing a tuple walks it), calls other than set(<atoms>) and
    defaultdict(set), globals outside the allow-list, and every opcode the format does not need.
    """
    import pickletools

    def refuse(why: str) -> NoReturn:
        raise UnsafePickleError(
            f"{path}: {why}; loading it is refused",
            "use the published candidate-subset pickle, or a pickle of a dict of name -> set of image-id strings",
        )

    stack: list[_Obj] = []
    memo: dict = {}

    def pop_mark() -> list[_Obj]:
        items = []
        while stack and stack[-1] is not _MARK:
            items.append(stack.pop())
        if not stack:
            refuse("a malformed opcode stream (no MARK)")
        stack.pop()
        return items[::-1]

    def make(kind: str, items: list[_Obj], hashed: list[_Obj], base: _Obj | None = None) -> _Obj:
        if any(i.kind != "atom" for i in hashed):
            refuse("a key or set member that is not a string or number")
        depth = max([1 + i.depth for i in items] + [base.depth if base else 1])
        if depth > MAX_DEPTH:
            refuse(f"nesting deeper than {MAX_DEPTH} levels")
        atoms = (base.atoms_only if base else True) and all(i.kind == "atom" for i in items)
        return _Obj(kind, depth, atoms, tuple(items) if kind == "tuple" and len(items) <= 3 else ())

    def add_to(kind: str, items: list[_Obj], hashed: list[_Obj]) -> None:
        if not stack or stack[-1].kind != kind:
            refuse(f"items added to something that is not a {kind}")
        stack.append(make(kind, items, hashed, stack.pop()))

    try:
        for n, (op, arg, _) in enumerate(pickletools.genops(f)):
            name = op.name
            if n > MAX_OPCODES:
                refuse(f"more than {MAX_OPCODES:,} opcodes")
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                return
            if name in _ATOMS:
                stack.append(_Obj("atom"))
            elif name == "MARK":
                stack.append(_MARK)
            elif name in _EMPTY:
                stack.append(_Obj(_EMPTY[name], 1))
            elif name in _FROM_MARK:
                items = pop_mark()
                hashed = items[0::2] if name == "DICT" else items if name == "FROZENSET" else []
                stack.append(make(_FROM_MARK[name], items, hashed))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                k = int(name[-1])
                if len(stack) < k or _MARK in stack[-k:]:
                    refuse("a malformed opcode stream")
                items = stack[-k:]
                del stack[-k:]
                stack.append(make("tuple", items, []))
            elif name in ("APPEND", "APPENDS"):
                add_to("list", [stack.pop()] if name == "APPEND" else pop_mark(), [])
            elif name in ("SETITEM", "SETITEMS"):
                items = stack[-2:] if name == "SETITEM" else pop_mark()
                if name == "SETITEM":
                    del stack[-2:]
                add_to("dict", items, items[0::2])
            elif name == "ADDITEMS":
                items = pop_mark()
                add_to("set", items, items)
            elif name in ("GLOBAL", "STACK_GLOBAL"):
                if name == "STACK_GLOBAL":
                    del stack[-2:]  # the two names: find_class checks them when loading
                else:
                    module, _, attr = str(arg).partition(" ")
                    if (module, attr) not in ALLOWED_GLOBALS:
                        refuse(
                            f"the global {module[:80]}.{attr[:80]} is not allowed "
                            "(only builtins.set and collections.defaultdict)"
                        )
                stack.append(_Obj("global"))
            elif name == "REDUCE":
                args, fn = stack.pop(), stack.pop()
                if fn.kind != "global" or args.kind != "tuple" or len(args.items) > 1:
                    refuse("a call that is not set(...) or defaultdict(...)")
                inner = args.items[0] if args.items else None
                if inner is None or inner.kind == "global":  # defaultdict() / defaultdict(set)
                    stack.append(_Obj("dict", 1))
                elif inner.kind in ("list", "tuple", "set") and inner.atoms_only:  # set([...]) of strings
                    stack.append(_Obj("set", inner.depth))
                else:
                    refuse("set(...) of something other than strings or numbers")
            elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                got = memo.get(arg)
                if got is None:
                    refuse("a memo fetch of nothing")
                if got.kind not in ("atom", "global"):
                    refuse("a shared reference to a container (a structure that grows exponentially when walked)")
                stack.append(got)
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            else:
                refuse(f"the opcode {name}, which the candidate-subset format does not use")
    except IndexError:
        refuse("a malformed opcode stream")
    except ValueError as exc:  # pickletools: truncated stream or unknown opcode
        raise InputFormatError(
            f"{path}: not a readable pickle ({str(exc)[:200]})",
            "re-download the file; it may be truncated or not a pickle",
        ) from None
    raise InputFormatError(
        f"{path}: not a readable pickle (no STOP opcode)", "re-download the file; it may be truncated or not a pickle"
    )


def restricted_load(path: str | os.PathLike, *, trusted: bool = False):
    """Unpickle ``path`` allowing only ``set`` and ``defaultdict``; UnsafePickleError otherwise.

    Unless ``trusted`` (a published pickle whose sha256 was verified), the opcodes are first
    scanned with bounds (:func:`_scan`), so a small hostile file cannot make loading, hashing or
    an error message run for ever or exhaust memory.
    """
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"pickle {path} does not exist", "pass the path of a candidate-subset pickle")
    with open(path, "rb") as f:
        if not trusted:
            _scan(f, path)
            f.seek(0)
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
    known = verify_known(path) if path.is_file() else None
    data = restricted_load(path, trusted=known is not None)
    if not isinstance(data, dict):
        raise InputFormatError(
            f"{path}: top-level object is {type(data).__name__}, expected a dict of name -> set of image ids",
            "pass the MetaShift candidate-subset pickle",
        )
    mapping: dict[str, list[str]] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not isinstance(value, (set, frozenset, list, tuple)):
            raise InputFormatError(
                f"{path}: key {short_repr(key)} maps to {type(value).__name__}, expected a set of image-id strings",
                "pass the MetaShift candidate-subset pickle",
            )
        bad = next((v for v in value if not isinstance(v, str)), None)
        if bad is not None:
            raise InputFormatError(
                f"{path}: key {short_repr(key)} holds image id {short_repr(bad)}, expected a string",
                "image ids must be GQA id strings such as '2375429'",
            )
        mapping[key] = value  # type: ignore[assignment]
    # ids name files (<id>.jpg): as for scene graphs, no empty, padded or path-like id (checked once per distinct id)
    bad = next((v for v in set().union(*mapping.values()) if not usable_image_id(v)), None)
    if bad is not None:
        key = next(k for k, v in mapping.items() if bad in v)
        raise InputFormatError(
            f"{path}: key {short_repr(key)} holds image id {short_repr(bad)}, which is empty, "
            "padded with spaces or holds a path character",
            "image ids name files (<id>.jpg): use GQA id strings such as '2375429'",
        )
    classify = attribute_kind if attributes else published_kind
    kinds, cats = {}, {}
    for name in mapping:
        try:
            kinds[name], cats[name] = classify(name)
        except InputFormatError as exc:
            raise InputFormatError(f"{path}: {exc.what}", exc.fix) from None
    return CandidateSubsets.from_dict(mapping, kind=kinds, category=cats)
