"""Shared pieces every layer may use: errors, atomic writes and hashing, names, paths, pinned sources.

This is the bottom layer: it imports nothing else of the project (checked by import-linter).
"""

from __future__ import annotations

from importlib import metadata


try:
    __version__ = metadata.version("metashift-hf")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
