"""Public names of a package that load their module on first use (PEP 562), so ``import metashift_hf`` and
``metashift-hf --help`` stay fast: datasets, pyarrow, pandas and scipy load only when the API is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each public name to the module defining it;
    ``namespace`` is the package's ``globals()`` (what ``dir`` shows beside the lazy names)."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        # without it, dir()/tab completion shows only what is already imported, not the lazy API
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
