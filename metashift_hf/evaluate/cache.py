"""Logits computed once per (model, image): on disk, keyed by the model's fingerprint and the image's sha256.

``<cache>/logits/<fingerprint[:16]>/part-<sha256 of its keys>.npz`` (``keys``: image sha256 hex,
``logits``: float32 (n, outputs)) plus ``model.json`` (the model's card). A part is written atomically
and never changed; a run adds one part with what it computed, so runs never rewrite each other.
"""
from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..core.errors import InputFormatError
from ..core.fsutil import atomic_file
from ..core.paths import cache_root

logger = logging.getLogger(__name__)


class LogitsCache:
    """Logits of one model (one fingerprint) by image sha256."""

    def __init__(self, fingerprint: str, cache_dir: str | Path | None = None, *, card: Mapping[str, Any] | None = None,
                 wanted: Iterable[str] | None = None):
        if len(fingerprint) != 64:
            raise InputFormatError("a logits cache needs a model fingerprint (sha256 hex)",
                                   "models without a weights checksum (plain callables) are not cached")
        self.fingerprint = fingerprint
        self.folder = cache_root(cache_dir) / "logits" / fingerprint[:16]
        self._rows: dict[str, np.ndarray] = {}
        self._card = dict(card or {})
        # only the rows a run needs are held in memory: the cache of a model grows with every zoo
        self._wanted = None if wanted is None else set(wanted)
        self._load()

    def _load(self) -> None:
        if not self.folder.is_dir():
            return
        for part in sorted(self.folder.glob("part-*.npz")):
            try:
                with np.load(part, allow_pickle=False) as z:
                    keys, logits = z["keys"], z["logits"]
            except (OSError, ValueError, KeyError) as exc:  # a damaged part is recomputed, never trusted
                logger.warning("ignoring unreadable logits cache part %s (%s)", part, exc)
                continue
            if self._wanted is None:
                self._rows.update(zip((str(k) for k in keys), logits))
            else:
                keep = [i for i, k in enumerate(keys) if str(k) in self._wanted]
                self._rows.update(zip((str(keys[i]) for i in keep), logits[keep]))

    def __contains__(self, sha: str) -> bool:
        return sha in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, shas: Iterable[str]) -> np.ndarray:
        rows = [self._rows[s] for s in shas]
        return np.stack(rows).astype(np.float32, copy=False) if rows else np.zeros((0, 0), np.float32)

    def add(self, shas: list[str], logits: np.ndarray) -> Path | None:
        """Store new rows as one part file; returns it (None when nothing was new)."""
        new = [(s, row) for s, row in zip(shas, logits) if s not in self._rows]
        if not new:
            return None
        keys = np.array(sorted(s for s, _ in new))
        order = {s: row for s, row in new}
        block = np.stack([order[k] for k in keys]).astype(np.float32)
        name = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
        buf = io.BytesIO()
        np.savez(buf, keys=keys, logits=block)
        path = self.folder / f"part-{name}.npz"
        with atomic_file(path) as f:
            f.write(buf.getvalue())
        if self._card and not (self.folder / "model.json").is_file():
            with atomic_file(self.folder / "model.json", "w") as f:
                f.write(json.dumps({"fingerprint": self.fingerprint, "model": self._card}, indent=2, sort_keys=True, default=str) + "\n")
        self._rows.update(zip(keys.tolist(), block))
        return path
