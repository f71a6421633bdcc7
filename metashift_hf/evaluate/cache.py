"""Logits computed once per (model, image): on disk, keyed by the model's fingerprint and the image's sha256.

``<cache>/logits/<fingerprint[:16]>/part-<sha256 of its keys>.npz`` (``keys``: image sha256 hex,
``logits``: float32 (n, outputs), ``meta``: fingerprint, width, dtype, rows, checksum) plus ``model.json``
(the model's card). Parts are written and checked by :class:`metashift_hf.core.parts.PartStore` (the
features cache uses the same): a part is written atomically and never changed; a run adds one part with
what it computed, so runs never rewrite each other; a part that fails its checks (another fingerprint,
the wrong width, NaN, truncated, not a regular file, ...) is skipped with a warning, removed, and its
rows are computed again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..core.errors import InputFormatError
from ..core.fsutil import atomic_file
from ..core.parts import PartStore
from ..core.paths import cache_root


logger = logging.getLogger(__name__)


class LogitsCache:
    """Logits of one model (one fingerprint) by image sha256.

    ``width``: the model's number of outputs (default: the card's ``labels.outputs``); every part must
    have it. Without either, the parts must agree with each other (the first good part sets it).
    """

    def __init__(
        self,
        fingerprint: str,
        cache_dir: str | Path | None = None,
        *,
        card: Mapping[str, Any] | None = None,
        wanted: Iterable[str] | None = None,
        width: int | None = None,
    ):
        if len(fingerprint) != 64:
            raise InputFormatError(
                "a logits cache needs a model fingerprint (sha256 hex)",
                "models without a weights checksum (plain callables) are not cached",
            )
        self.fingerprint = fingerprint
        self.folder = cache_root(cache_dir) / "logits" / fingerprint[:16]
        self._card = dict(card or {})
        if width is None:
            labels = self._card.get("labels")
            outputs = labels.get("outputs") if isinstance(labels, Mapping) else None
            width = outputs if isinstance(outputs, int) and outputs > 0 else None
        self._store = PartStore(self.folder, "part", "logits", fingerprint, "logits cache")
        # only the rows a run needs are held in memory: the cache of a model grows with every zoo
        self._rows, self.width = self._store.read(width, wanted)

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
        keys = sorted(s for s, _ in new)
        order = {s: row for s, row in new}
        block = np.stack([order[k] for k in keys]).astype(np.float32)
        if self.width is not None and block.shape[1] != self.width:
            raise InputFormatError(
                f"logits cache {self.folder}: rows of width {block.shape[1]}, the model has {self.width} outputs",
                "a bug in the caller: store the model's own logits",
            )
        path = self._store.write(keys, block)
        if self._card and not (self.folder / "model.json").is_file():
            with atomic_file(self.folder / "model.json", "w") as f:
                f.write(
                    json.dumps(
                        {"fingerprint": self.fingerprint, "model": self._card}, indent=2, sort_keys=True, default=str
                    )
                    + "\n"
                )
        self._rows.update(zip(keys, block))
        self.width = block.shape[1]
        return path
