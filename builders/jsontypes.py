"""Frozen dataclasses <-> JSON, strictly: the one codec of the typed contracts (shift spec, artifact manifest/stats).

:func:`encode` turns a dataclass (nested dataclasses, tuples, mappings) into JSON values; field
metadata ``{"json": name}`` renames a key. :func:`decode` is its inverse, driven by the type
hints: unknown keys, missing keys (fields without a default; with ``defaults=True`` a missing
field takes its default) and values of the wrong type raise :class:`InputFormatError` naming the
key path.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from metashift_hf.core.errors import InputFormatError


def _json_name(f: dataclasses.Field) -> str:
    return f.metadata.get("json", f.name)


def encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {_json_name(f): encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; the fields that can hold one are optional
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def decode(cls: type, data: Any, where: str, fix: str, *, defaults: bool = False) -> Any:
    """``data`` (parsed JSON) as an instance of dataclass ``cls``; ``where`` names it in errors."""
    if not isinstance(data, Mapping):
        raise InputFormatError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}", fix)
    fs = {_json_name(f): f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fs))
    missing = sorted(k for k, f in fs.items() if k not in data and not (defaults and _has_default(f)))
    if unknown or missing:
        parts = ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else [])
        raise InputFormatError(f"{where}: {cls.__name__} has " + "; ".join(parts), fix)
    hints = _hints(cls)
    return cls(
        **{f.name: _value(data[k], hints[f.name], f"{where}.{k}", fix, defaults) for k, f in fs.items() if k in data}
    )


def _value(v: Any, hint: Any, where: str, fix: str, defaults: bool) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if v is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _value(v, a, where, fix, defaults)
            except InputFormatError as exc:
                errors.append(exc.what)
        raise InputFormatError(errors[0] if len(errors) == 1 else f"{where}: {v!r} fits none of {hint}", fix)
    if hint is Any:
        return v
    if origin is Literal:
        if v not in args:
            raise InputFormatError(f"{where}: {v!r} is not one of {list(args)}", fix)
        return v
    if dataclasses.is_dataclass(hint):
        return decode(hint, v, where, fix, defaults=defaults)
    if origin is tuple:
        if not isinstance(v, list):
            raise InputFormatError(f"{where}: expected a list, got {type(v).__name__}", fix)
        return tuple(_value(x, args[0], f"{where}[{i}]", fix, defaults) for i, x in enumerate(v))
    if origin in (Mapping, dict):
        if not isinstance(v, Mapping):
            raise InputFormatError(f"{where}: expected an object, got {type(v).__name__}", fix)
        return {str(k): _value(x, args[1], f"{where}.{k}", fix, defaults) for k, x in v.items()}
    if hint is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputFormatError(f"{where}: expected a number, got {v!r}", fix)
        return float(v)
    if hint in (int, str, bool):
        if not isinstance(v, hint) or (hint is int and isinstance(v, bool)):
            raise InputFormatError(f"{where}: expected {hint.__name__}, got {v!r}", fix)
        return v
    raise InputFormatError(f"{where}: no decoder for {hint}", "this is a bug in builders.jsontypes")


__all__ = ["encode", "decode"]
