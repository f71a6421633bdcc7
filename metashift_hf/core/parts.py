"""Verified cache parts: rows of float32 values keyed by strings, in ``.npz`` files that are checked, never trusted.

Both on-disk caches (the zoo's logits and the research loop's features, ``models/outputs.py``,
``research/features.py``) store rows through :class:`PartStore`. A part is ``<prefix>-<sha256 of its
keys, 16 hex>.npz`` holding ``keys`` (str), the values (float32, (rows, width)) and ``meta``: a JSON
record of the format, the owner (the model fingerprint or backbone key the rows belong to), width,
dtype, row count and a sha256 over the keys and values. A part is written atomically and never changed.

On read every part is checked: a regular file (a FIFO, link or device named like a part is never
opened), readable, the current format, the expected owner, width (the one asked for, else the same as
the other parts), dtype, rows == keys, finite values and the checksum. A part that fails is skipped
with a WARNING naming it and why, and removed when its name is of our own making, so its rows are
computed again by the caller's normal path and the bad file is never read again.

The checks catch damage, not intent: whoever can write the cache folder can write a part with other
values and a recomputed checksum, so **a cache is trusted input** (docs/evaluate.md). What a reader can
still see is two valid parts that disagree on a key (one forged, or two models under one owner): that is
refused (:class:`CacheConflictError`, naming both parts), never settled silently by file-name order. And the
zoo recomputes a seeded sample of the rows it reads (``models/outputs.py`` :func:`check_cached`): a part whose
values the model does not give is refused (:class:`PartMismatchError`, naming it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .errors import InputFormatError, MetashiftError
from .fsutil import atomic_file, write_error
from .names import terminal_safe


logger = logging.getLogger(__name__)

PART_FORMAT = "metashift-hf-cache-part"
PART_VERSION = 1
PART_DTYPE = np.dtype("<f4")
# what a damaged or hostile .npz can raise while being read (never a traceback: the part is skipped)
_READ_ERRORS = (
    OSError,
    ValueError,
    KeyError,
    EOFError,
    TypeError,
    zipfile.BadZipFile,
    zlib.error,
    json.JSONDecodeError,
)


class BadPart(Exception):
    """Why a part is not used (internal: turned into a warning)."""


class CacheConflictError(InputFormatError):
    """Two valid parts of one owner hold different values for one key."""


class PartMismatchError(CacheConflictError):
    """A valid part holds values its owner does not give when recomputed (a forged part, or another model's)."""


# Two honest runs may compute a row in batches of different composition, which can move the last bits of a
# float32 (batch-dependent kernels); anything beyond this is another value, not rounding.
AGREE_RTOL, AGREE_ATOL = 1e-3, 1e-4


def part_checksum(keys: Sequence[str], values: np.ndarray) -> str:
    """sha256 over the keys (as a JSON list) and the values' little-endian float32 bytes, C order."""
    h = hashlib.sha256(json.dumps([str(k) for k in keys]).encode())
    h.update(np.ascontiguousarray(values, dtype=PART_DTYPE).tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class PartStore:
    """The parts of one owner in ``folder``: ``<prefix>-*.npz`` holding ``array`` (e.g. ``logits``)."""

    folder: Path
    prefix: str  # "part" (logits) or "shard" (features)
    array: str  # the values' name inside the part
    owner: str  # the fingerprint / key every part must record
    what: str  # for messages, e.g. "logits cache"

    def _ours(self, name: str) -> bool:
        return re.fullmatch(rf"{re.escape(self.prefix)}-[0-9a-f]{{16}}\.npz", name) is not None

    def part_path(self, keys: Sequence[str]) -> Path:
        return self.folder / f"{self.prefix}-{hashlib.sha256(chr(10).join(keys).encode()).hexdigest()[:16]}.npz"

    def write(self, keys: Sequence[str], values: np.ndarray) -> Path:
        """Store ``values[i]`` under ``keys[i]`` as one new part; returns its path."""
        keys = [str(k) for k in keys]
        block = np.asarray(values)
        if block.ndim != 2 or len(block) != len(keys) or not len(keys):
            raise InputFormatError(
                f"{self.what}: {len(keys)} key(s) for values of shape {block.shape}",
                "store one row of values per key (a bug in the caller)",
            )
        block = np.ascontiguousarray(block, dtype=PART_DTYPE)
        if not np.isfinite(block).all():
            bad = int((~np.isfinite(block)).any(axis=1).sum())
            raise InputFormatError(
                f"{self.what}: {bad} of {len(keys)} row(s) hold NaN or infinite values",
                "non-finite values are never cached: check the model's outputs",
            )
        meta = {
            "format": PART_FORMAT,
            "version": PART_VERSION,
            "owner": self.owner,
            "width": int(block.shape[1]),
            "dtype": PART_DTYPE.name,
            "rows": len(keys),
            "sha256": part_checksum(keys, block),
        }
        path = self.part_path(keys)
        try:
            with atomic_file(path) as f:
                np.savez(
                    f,
                    keys=np.array(keys, dtype=str),
                    **{self.array: block},
                    meta=np.array(json.dumps(meta, sort_keys=True)),
                )
        except OSError as exc:  # a full or read-only cache disk is the cache's problem, never --out's
            known = write_error(exc, path)
            if known is None:
                raise
            raise MetashiftError(
                f"{self.what}: {known.what}",
                f"free space in {self.folder}, or pass --cache-dir on a disk with room (or --no-cache)",
            ) from None
        return path

    def read(
        self, width: int | None = None, wanted: Iterable[str] | None = None, origin: dict[str, Path] | None = None
    ) -> tuple[dict[str, np.ndarray], int | None]:
        """Rows of every good part (only the ``wanted`` keys when given) and their width.

        ``width``: the width every part must have; None: the first good part's (sorted by name) sets it.
        ``origin``: filled with key -> the part its row came from (to name the part a check refuses).
        """
        rows: dict[str, np.ndarray] = {}
        origin = {} if origin is None else origin  # key -> its part (to name both sides of a conflict)
        if not self.folder.is_dir():
            return rows, width
        keep = None if wanted is None else set(wanted)
        for path in sorted(self.folder.glob(f"{self.prefix}-*.npz")):
            try:
                st = os.lstat(path)
            except OSError:  # gone meanwhile (another run removed it)
                continue
            try:
                keys, block = self._read_one(path, st, width)
            except BadPart as why:
                self._reject(path, st, str(why))
                continue
            width = block.shape[1]
            for k, row in zip(keys, block):
                if keep is None or k in keep:
                    if k in rows and not np.allclose(rows[k], row, rtol=AGREE_RTOL, atol=AGREE_ATOL):
                        self._conflict(k, origin[k], path)
                    rows.setdefault(k, row)
                    origin.setdefault(k, path)
        return rows, width

    def _conflict(self, key: str, first: Path, second: Path) -> None:
        raise CacheConflictError(
            f"{self.what}: the parts {terminal_safe(first.name)} and {terminal_safe(second.name)} in "
            f"{terminal_safe(self.folder)} both pass their checks but hold different values for {terminal_safe(key)[:16]}… "
            "(a part written by someone else, or two models under one key)",
            "a cache is trusted input: remove the part you do not trust (or the whole folder; its rows are "
            "computed again), or use a cache folder only you write (--cache-dir)",
        )

    def _read_one(self, path: Path, st: os.stat_result, width: int | None) -> tuple[list[str], np.ndarray]:
        if not stat.S_ISREG(st.st_mode):
            raise BadPart("not a regular file (never opened)")
        try:
            # O_NOFOLLOW/O_NONBLOCK: a link or FIFO swapped in after the lstat is refused, never waited on
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise BadPart(f"cannot open it ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            fst = os.fstat(f.fileno())
            if not stat.S_ISREG(fst.st_mode):
                raise BadPart("not a regular file (never read)")
            try:
                with np.load(f, allow_pickle=False) as z:
                    names = set(z.files)
                    if "meta" not in names:
                        raise BadPart("written by an older version without a checksum (unverified)")
                    meta = json.loads(str(z["meta"][()]))
                    keys_arr, block = z["keys"], z[self.array]
            except BadPart:
                raise
            except _READ_ERRORS as exc:
                raise BadPart(f"unreadable ({type(exc).__name__}: {exc})") from None
        self._check(meta, keys_arr, block, width)
        return [str(k) for k in keys_arr.tolist()], block

    def _check(self, meta: object, keys: np.ndarray, block: np.ndarray, width: int | None) -> None:
        if not isinstance(meta, dict) or meta.get("format") != PART_FORMAT or meta.get("version") != PART_VERSION:
            raise BadPart("not a part of this format version")
        if meta.get("owner") != self.owner:
            raise BadPart(
                f"it belongs to another model ({terminal_safe(str(meta.get('owner'))[:16])}…, "
                f"expected {self.owner[:16]}…)"
            )
        if keys.ndim != 1 or keys.dtype.kind != "U":
            raise BadPart(f"its keys are not a list of strings (dtype {keys.dtype}, shape {keys.shape})")
        if block.dtype != PART_DTYPE or meta.get("dtype") != PART_DTYPE.name:
            raise BadPart(f"its values are {block.dtype} (recorded {terminal_safe(meta.get('dtype'))}), not float32")
        if block.ndim != 2:
            raise BadPart(f"its values have shape {block.shape}, not (rows, width)")
        if not (len(keys) == len(block) == meta.get("rows")):
            raise BadPart(
                f"{len(block)} row(s) of values for {len(keys)} key(s) (recorded {terminal_safe(meta.get('rows'))})"
            )
        if block.shape[1] != meta.get("width"):
            raise BadPart(f"width {block.shape[1]}, recorded {terminal_safe(meta.get('width'))}")
        if width is not None and block.shape[1] != width:
            raise BadPart(f"width {block.shape[1]}, expected {width} (the model's outputs, or the other parts')")
        if not np.isfinite(block).all():
            raise BadPart(f"{int((~np.isfinite(block)).any(axis=1).sum())} row(s) hold NaN or infinite values")
        if part_checksum(keys.tolist(), block) != meta.get("sha256"):
            raise BadPart("its checksum does not match its content")

    def _reject(self, path: Path, st: os.stat_result, why: str) -> None:
        fate = "left in place (not a name this cache writes)"
        if self._ours(path.name):
            try:
                now = os.lstat(path)
                # the entry we judged, not a good part another run wrote under the same name meanwhile
                if (now.st_dev, now.st_ino, now.st_mtime_ns) == (st.st_dev, st.st_ino, st.st_mtime_ns):
                    path.unlink()  # unlink never follows a link: only our own entry goes
                    fate = "removed"
                else:
                    fate = "replaced meanwhile by another run"
            except OSError as exc:
                fate = f"left in place (cannot remove it: {exc.strerror})"
        logger.warning(
            "%s: ignoring %s: %s; %s, its rows are computed again", self.what, terminal_safe(path), why, fate
        )


__all__ = ["CacheConflictError", "PartMismatchError", "PartStore", "PART_FORMAT", "PART_VERSION", "part_checksum"]
