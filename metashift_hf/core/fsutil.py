"""Atomic writes and hashing: nothing half-written is ever left under a final name.

Every folder a command writes carries a marker file (:data:`MARKER`) naming the kind of output. A
command replaces only a folder that holds its own kind's marker, and only when told to (``force``);
it never replaces a folder that holds one of its inputs, the current folder, or anything else that
is not empty. Temporary folders carry the marker too, so a run killed half-way leaves a folder the
next run of the same kind recognises as ours and removes.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from .errors import MetashiftError

MARKER = ".metashift-hf.json"
_TOOL = "metashift-hf"
# Write failures that are the machine's state, not a bug: reported as error/fix, never a traceback.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


class OutputExistsError(MetashiftError):
    """An output folder holds something this command must not replace."""

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm


_CHUNK = 1 << 20


def hash_file(path: str | os.PathLike, hasher: "hashlib._Hash | None" = None, *, length: int | None = None,
              progress: bool = False) -> "hashlib._Hash":
    """Feed the file's bytes (the first ``length`` only, if given) to ``hasher`` (default: a new
    sha256) and return it; ``progress`` shows a bar (hashing the 21.8 GB images.zip takes minutes).
    The one hashing loop of the project: files, prefixes of partial downloads, table sets."""
    h = hasher if hasher is not None else hashlib.sha256()
    total = os.path.getsize(path) if length is None else length
    with open(path, "rb") as f, tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1000,
                                     desc=f"sha256 {Path(path).name}", disable=not progress) as bar:
        left = total
        while left > 0 and (block := f.read(min(_CHUNK, left))):
            h.update(block)
            left -= len(block)
            bar.update(len(block))
    return h


def sha256_file(path: str | os.PathLike, *, progress: bool = False) -> str:
    """sha256 hex digest of a file."""
    return hash_file(path, progress=progress).hexdigest()


def write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    """Every table the project writes (artifact, match folder, evaluation logits), with fixed
    settings so identical tables give identical bytes. (Image shards have their own, measured
    settings: metashift_hf.shards.)"""
    pq.write_table(
        table, path, compression="zstd", compression_level=3, use_dictionary=True,
        write_statistics=True, row_group_size=1 << 20, data_page_version="2.0",
    )


def human_size(n: float) -> str:
    """Bytes as a short figure for messages, in SI units (1 GB = 10**9 bytes, as disks and the Hub count)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            break
        n /= 1000
    return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"


def umask_mode(kind: str = "dir") -> int:
    """The mode the umask gives a new folder (``dir``) or file (``file``); mkdtemp/mkstemp give 0700/0600."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if kind == "dir" else 0o666) & ~mask


def read_marker(folder: str | os.PathLike) -> dict | None:
    """The marker of a folder we wrote, or None (absent, unreadable, or someone else's file)."""
    path = Path(folder) / MARKER
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 4096:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("tool") == _TOOL and isinstance(data.get("kind"), str) else None


def write_marker(folder: str | os.PathLike, kind: str, **extra) -> None:
    path = Path(folder) / MARKER
    path.write_text(json.dumps({"tool": _TOOL, "kind": kind, **extra}, sort_keys=True) + "\n", encoding="utf-8")
    path.chmod(umask_mode("file"))


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_out(final: str | os.PathLike, kind: str, *, force: bool = False,
              inputs: Iterable[str | os.PathLike | None] = (), flag: str = "--out") -> Path:
    """Refuse an output folder this command may not replace; return it resolved.

    Allowed: an absent or empty folder, or (with ``force``) a folder holding our ``kind`` marker.
    Refused always: a file, the current folder or one of its parents, a folder holding an input.
    """
    final = Path(final).expanduser().resolve()
    where = f"{flag} {final}"
    if final.exists() and not final.is_dir():
        raise OutputExistsError(f"{where} is a file, not a folder", f"name a new folder for {flag}")
    if _is_within(Path.cwd().resolve(), final):
        raise OutputExistsError(f"{where} is the current folder (or holds it)", f"name a new sub-folder for {flag}, e.g. {flag} out")
    for inp in inputs:
        if not isinstance(inp, (str, os.PathLike)):  # None, or an object already loaded (an Artifact)
            continue
        path = Path(inp).expanduser().resolve()
        if _is_within(path, final):
            raise OutputExistsError(f"{where} holds this command's input {path}",
                                    f"write to another folder: {flag} would replace its own input")
    if not final.is_dir() or not any(final.iterdir()):
        return final
    mark = read_marker(final)
    if mark is None:
        raise OutputExistsError(f"{where} is not empty and was not written by metashift-hf",
                                f"name a new or empty folder for {flag} (nothing there is replaced)")
    if mark["kind"] != kind:
        raise OutputExistsError(f"{where} holds a metashift-hf {mark['kind']}, not {_a(kind)}",
                                f"name another folder for {flag} ({_a(mark['kind'])} is never replaced by {_a(kind)})")
    if not force:
        raise OutputExistsError(f"{where} already holds {_a(kind)} from an earlier run",
                                "pass --force to replace it, or name a new folder")
    return final


def claim_dir(folder: str | os.PathLike, kind: str, *, inputs: Iterable[str | os.PathLike | None] = (),
              flag: str = "--out") -> Path:
    """Make ``folder`` a container of ours that holds several outputs (written each with atomic_dir).

    It must be new, empty, or already a ``kind`` container of ours; what is inside is replaced
    only by atomic_dir's own rules.
    """
    path = Path(folder).expanduser().resolve()
    if read_marker(path) is None or read_marker(path)["kind"] != kind:
        check_out(path, kind, inputs=inputs, flag=flag)
    else:
        check_out(path, kind, force=True, inputs=inputs, flag=flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if read_marker(path) is None:
            write_marker(path, kind)
    except OSError as exc:
        raise (write_error(exc, path) or exc) from None
    return path


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def clean_stale(final: Path) -> list[Path]:
    """Remove temporary folders a killed run left beside ``final`` (ours only: marker with a dead pid)."""
    removed = []
    for tmp in final.parent.glob(f".{final.name}.tmp-*"):
        mark = read_marker(tmp) if tmp.is_dir() and not tmp.is_symlink() else None
        if mark is None or not isinstance(mark.get("pid"), int) or _alive(mark["pid"]):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def write_error(exc: OSError, target: str | os.PathLike) -> MetashiftError | None:
    """A one-line error for a write that failed because of the disk (full, read-only, no permission)."""
    if exc.errno not in _WRITE_ERRNOS:
        return None
    return MetashiftError(f"cannot write {target}: {os.strerror(exc.errno)}",
                          "free space or choose a writable location (nothing half-written was kept)")


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike, *, kind: str = "output", force: bool = False,
               inputs: Iterable[str | os.PathLike | None] = (), flag: str = "--out") -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``final`` in one rename.

    ``final`` is checked first (:func:`check_out`): it must be absent, empty, or (with ``force``) a
    ``kind`` output of ours. The result carries the ``kind`` marker and the umask's permissions.
    On any exception the temporary folder is removed and ``final`` is untouched.
    """
    final = check_out(final, kind, force=force, inputs=inputs, flag=flag)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    except OSError as exc:
        raise (write_error(exc, final) or exc) from None
    try:
        tmp.chmod(umask_mode("dir"))
        write_marker(tmp, kind, pid=os.getpid())
        yield tmp
        write_marker(tmp, kind)
        if final.exists():
            check_out(final, kind, force=force, flag=flag)  # still ours (nothing appeared meanwhile)
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and write_error(exc, final) is not None:
            raise write_error(exc, final) from None
        raise


@contextlib.contextmanager
def atomic_file(final: str | os.PathLike, mode: str = "wb") -> Iterator:
    """Open a temporary sibling file for writing; rename it over ``final`` only on success.

    The file gets the umask's permissions (mkstemp alone would leave it 0600).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=final.parent)
    try:
        os.fchmod(fd, umask_mode("file"))
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
