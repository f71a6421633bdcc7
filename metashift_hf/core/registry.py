"""The one registry idiom: a named, ordered table of entries filled by ``@REGISTRY.register``.

Every table of pluggable things (model forms, task families, algorithms, experiments, build inputs)
is a :class:`Registry`. An entry is a class (or an instance) with a ``name`` attribute; registration
order is kept because some registries resolve in order (the first task family that owns an id).
Lookups of unknown names raise :class:`UnknownNameError` with a did-you-mean, naming the registry.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from .errors import MetashiftError, UnknownNameError, did_you_mean


T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name, in registration order.

    ``what`` names an entry in messages ("model form", "algorithm"); ``fix`` says where the list of
    valid names is (a command or a flag).
    """

    def __init__(self, what: str, fix: str = "") -> None:
        self.what = what
        self.fix = fix
        self._entries: dict[str, T] = {}

    def register(self, entry: T) -> T:
        """Add ``entry`` under its ``name``; usable as a class decorator. A name given twice is an error."""
        name = getattr(entry, "name", None)
        if not isinstance(name, str) or not name:
            raise MetashiftError(f"{self.what} {entry!r} has no name", "give it a non-empty `name` attribute")
        if name in self._entries:
            raise MetashiftError(f"{self.what} {name!r} is registered twice", "give the new entry another name")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        """The entry called ``name``; UnknownNameError (with the valid names) otherwise."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            valid = ", ".join(self._entries)
            raise UnknownNameError(
                f"unknown {self.what} {name!r}{did_you_mean(str(name), self._entries)}",
                self.fix or f"use one of: {valid}",
            ) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def values(self) -> tuple[T, ...]:
        return tuple(self._entries.values())

    def items(self) -> tuple[tuple[str, T], ...]:
        return tuple(self._entries.items())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._entries)})"
