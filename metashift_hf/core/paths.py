"""The package's one cache folder (downloads, the data manifest, the derived WordNet copy)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


CACHE_ENV = "METASHIFT_HF_CACHE"


def default_cache_dir() -> Path:
    """``$METASHIFT_HF_CACHE`` if set (``~`` expanded), else the per-user cache folder (platformdirs)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_cache_dir("metashift-hf"))


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir`` if given, else :func:`default_cache_dir`."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()
