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

    scan = _Scanner(path)
    try:
        for n, (op, arg, _) in enumerate(pickletools.genops(f)):
            if n > MAX_OPCODES:
                scan.refuse(f"more than {MAX_OPCODES:,} opcodes")
            if op.name == "STOP":
                return
            scan.step(op.name, arg)
    except IndexError:
        scan.refuse("a malformed opcode stream")
    except ValueError as exc:  # pickletools: truncated stream or unknown opcode
        raise InputFormatError(
            f"{path}: not a readable pickle ({str(exc)[:200]})",
            "re-download the file; it may be truncated or not a pickle",
        ) from None
    raise InputFormatError(
        f"{path}: not a readable pickle (no STOP opcode)", "re-download the file; it may be truncated or not a pickle"
    )


class _Scanner:
    """The unpickling stack and memo of :func:`_scan`, as what each object is (:class:`_Obj`), one opcode at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stack: list[_Obj] = []
        self.memo: dict = {}
        on = {"PROTO": self._skip, "FRAME": self._skip, "MARK": self._mark, "POP": self._pop}
        on |= {"POP_MARK": self._pop_mark, "REDUCE": self._reduce, "ADDITEMS": self._add_items}
        on |= dict.fromkeys(_ATOMS, self._atom) | dict.fromkeys(_EMPTY, self._empty)
        on |= dict.fromkeys(_FROM_MARK, self._from_mark) | dict.fromkeys(("TUPLE1", "TUPLE2", "TUPLE3"), self._tuple)
        on |= dict.fromkeys(("APPEND", "APPENDS"), self._append) | dict.fromkeys(
            ("SETITEM", "SETITEMS"), self._set_items
        )
        on |= dict.fromkeys(("GLOBAL", "STACK_GLOBAL"), self._global)
        on |= dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"), self._put)
        on |= dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), self._get)
        self._on = on

    def refuse(self, why: str) -> NoReturn:
        raise UnsafePickleError(
            f"{self.path}: {why}; loading it is refused",
            "use the published candidate-subset pickle, or a pickle of a dict of name -> set of image-id strings",
        )

    def step(self, name: str, arg) -> None:
        handler = self._on.get(name)
        if handler is None:
            self.refuse(f"the opcode {name}, which the candidate-subset format does not use")
        handler(name, arg)

    # -- the stack ----------------------------------------------------------------------------------
    def pop_mark(self) -> list[_Obj]:
        stack, items = self.stack, []
        while stack and stack[-1] is not _MARK:
            items.append(stack.pop())
        if not stack:
            self.refuse("a malformed opcode stream (no MARK)")
        stack.pop()
        return items[::-1]

    def make(self, kind: str, items: list[_Obj], hashed: list[_Obj], base: _Obj | None = None) -> _Obj:
        if any(i.kind != "atom" for i in hashed):
            self.refuse("a key or set member that is not a string or number")
        depth = max([1 + i.depth for i in items] + [base.depth if base else 1])
        if depth > MAX_DEPTH:
            self.refuse(f"nesting deeper than {MAX_DEPTH} levels")
        atoms = (base.atoms_only if base else True) and all(i.kind == "atom" for i in items)
        return _Obj(kind, depth, atoms, tuple(items) if kind == "tuple" and len(items) <= 3 else ())

    def add_to(self, kind: str, items: list[_Obj], hashed: list[_Obj]) -> None:
        if not self.stack or self.stack[-1].kind != kind:
            self.refuse(f"items added to something that is not a {kind}")
        self.stack.append(self.make(kind, items, hashed, self.stack.pop()))

    # -- one handler per opcode family (name, argument) ----------------------------------------------
    def _skip(self, name: str, arg) -> None:
        pass

    def _atom(self, name: str, arg) -> None:
        self.stack.append(_Obj("atom"))

    def _mark(self, name: str, arg) -> None:
        self.stack.append(_MARK)

    def _empty(self, name: str, arg) -> None:
        self.stack.append(_Obj(_EMPTY[name], 1))

    def _from_mark(self, name: str, arg) -> None:
        items = self.pop_mark()
        hashed = items[0::2] if name == "DICT" else items if name == "FROZENSET" else []
        self.stack.append(self.make(_FROM_MARK[name], items, hashed))

    def _tuple(self, name: str, arg) -> None:
        k, stack = int(name[-1]), self.stack
        if len(stack) < k or _MARK in stack[-k:]:
            self.refuse("a malformed opcode stream")
        items = stack[-k:]
        del stack[-k:]
        stack.append(self.make("tuple", items, []))

    def _append(self, name: str, arg) -> None:
        self.add_to("list", [self.stack.pop()] if name == "APPEND" else self.pop_mark(), [])

    def _set_items(self, name: str, arg) -> None:
        items = self.stack[-2:] if name == "SETITEM" else self.pop_mark()
        if name == "SETITEM":
            del self.stack[-2:]
        self.add_to("dict", items, items[0::2])

    def _add_items(self, name: str, arg) -> None:
        items = self.pop_mark()
        self.add_to("set", items, items)

    def _global(self, name: str, arg) -> None:
        if name == "STACK_GLOBAL":
            del self.stack[-2:]  # the two names: find_class checks them when loading
        else:
            module, _, attr = str(arg).partition(" ")
            if (module, attr) not in ALLOWED_GLOBALS:
                self.refuse(
                    f"the global {module[:80]}.{attr[:80]} is not allowed "
                    "(only builtins.set and collections.defaultdict)"
                )
        self.stack.append(_Obj("global"))

    def _reduce(self, name: str, arg) -> None:
        args, fn = self.stack.pop(), self.stack.pop()
        if fn.kind != "global" or args.kind != "tuple" or len(args.items) > 1:
            self.refuse("a call that is not set(...) or defaultdict(...)")
        inner = args.items[0] if args.items else None
        if inner is None or inner.kind == "global":  # defaultdict() / defaultdict(set)
            self.stack.append(_Obj("dict", 1))
        elif inner.kind in ("list", "tuple", "set") and inner.atoms_only:  # set([...]) of strings
            self.stack.append(_Obj("set", inner.depth))
        else:
            self.refuse("set(...) of something other than strings or numbers")

    def _put(self, name: str, arg) -> None:
        self.memo[len(self.memo) if name == "MEMOIZE" else arg] = self.stack[-1]

    def _get(self, name: str, arg) -> None:
        got = self.memo.get(arg)
        if got is None:
            self.refuse("a memo fetch of nothing")
        if got.kind not in ("atom", "global"):
            self.refuse("a shared reference to a container (a structure that grows exponentially when walked)")
        self.stack.append(got)

    def _pop(self, name: str, arg) -> None:
        self.stack.pop()

    def _pop_mark(self, name: str, arg) -> None:
        self.pop_mark()


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
