"""Atomic writes and hashing: nothing half-written is ever left under a final name.

Every folder a command writes carries a marker file (:data:`MARKER`) naming the kind of output. A
command replaces only a folder that holds its own kind's marker, and only when told to (``force``);
it never replaces a folder that holds one of its inputs, the current folder, or anything else that
is not empty. Temporary folders carry the marker too, so a run killed half-way leaves a folder the
next run of the same kind recognises as ours and removes.

A single file named by the user (``distance --matrix --out FILE``, ``download --manifest FILE``) goes
through :func:`atomic_out_file`: it is written only where nothing exists yet, or over a regular file
of the same :class:`FileKind` with ``force``. A file is recognised as ours by its content signature
(the bytes every file of that kind begins with, e.g. a CSV's exact header), so no marker file is left
beside the user's output and a copied or renamed output stays recognisable. Nothing is ever written
through or over a symbolic link, a device, a FIFO, a socket or a folder, for files and folders alike.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from .errors import InputFormatError, MetashiftError


MARKER = ".metashift-hf.json"
_TOOL = "metashift-hf"
# Write failures that are the machine's state, not a bug: reported as error/fix, never a traceback.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


class OutputExistsError(MetashiftError):
    """An output folder holds something this command must not replace."""


_CHUNK = 1 << 20


def hash_file(
    path: str | os.PathLike,
    hasher: "hashlib._Hash | None" = None,
    *,
    length: int | None = None,
    progress: bool = False,
) -> "hashlib._Hash":
    """Feed the file's bytes (the first ``length`` only, if given) to ``hasher`` (default: a new
    sha256) and return it; ``progress`` shows a bar (hashing the 21.8 GB images.zip takes minutes).
    The one hashing loop of the project: files, prefixes of partial downloads, table sets."""
    h = hasher if hasher is not None else hashlib.sha256()
    total = os.path.getsize(path) if length is None else length
    with (
        open(path, "rb") as f,
        tqdm(
            total=total,
            unit="B",
            unit_scale=True,
            unit_divisor=1000,
            desc=f"sha256 {Path(path).name}",
            disable=not progress,
        ) as bar,
    ):
        left = total
        while left > 0 and (block := f.read(min(_CHUNK, left))):
            h.update(block)
            left -= len(block)
            bar.update(len(block))
    return h


def sha256_file(path: str | os.PathLike, *, progress: bool = False) -> str:
    """sha256 hex digest of a file."""
    return hash_file(path, progress=progress).hexdigest()


PARQUET_ROW_GROUP = 1 << 20  # rows per row group of every table write_parquet writes
_PARQUET_SETTINGS = dict(
    compression="zstd", compression_level=3, use_dictionary=True, write_statistics=True, data_page_version="2.0"
)


def write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    """Every table the project writes (artifact, match folder, evaluation logits), with fixed
    settings so identical tables give identical bytes. (Image shards have their own, measured
    settings: metashift_hf.hub.shards.)"""
    pq.write_table(table, path, row_group_size=PARQUET_ROW_GROUP, **_PARQUET_SETTINGS)


class ParquetRowGroups:
    """A table written piece by piece (``add``), in row groups of ``PARQUET_ROW_GROUP`` rows with
    write_parquet's settings: the same bytes as write_parquet of all pieces concatenated (chunks as
    given, or combined per row group with ``combine``, as a table built from Python lists is)."""

    def __init__(self, path: str | os.PathLike, schema: pa.Schema, *, combine: bool = False) -> None:
        self._writer = pq.ParquetWriter(path, schema, **_PARQUET_SETTINGS)
        self._schema, self._combine = schema, combine
        self._buf: list[pa.Table] = []
        self._rows = 0
        self._written = False

    def _write(self, table: pa.Table) -> None:
        self._writer.write_table(
            table.combine_chunks() if self._combine else table, row_group_size=max(table.num_rows, 1)
        )
        self._written = True

    def add(self, piece: pa.Table) -> None:
        self._buf.append(piece)
        self._rows += piece.num_rows
        while self._rows >= PARQUET_ROW_GROUP:
            table = pa.concat_tables(self._buf)
            self._write(table.slice(0, PARQUET_ROW_GROUP))
            rest = table.slice(PARQUET_ROW_GROUP)
            self._buf, self._rows = [rest], rest.num_rows

    def close(self) -> None:
        if self._rows or not self._written:  # an empty table is written as one empty row group
            self._write(pa.concat_tables(self._buf) if self._buf else self._schema.empty_table())
        self._writer.close()

    def __enter__(self) -> "ParquetRowGroups":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_parquet_groups(groups: Iterable[pa.Table], schema: pa.Schema, path: str | os.PathLike) -> None:
    """A table too large to hold at once, written one row group per item of ``groups`` with
    write_parquet's settings: groups of ``PARQUET_ROW_GROUP`` rows (the last shorter) give the
    same bytes as write_parquet of the whole table."""
    with pq.ParquetWriter(path, schema, **_PARQUET_SETTINGS) as writer:
        for group in groups:
            writer.write_table(group, row_group_size=max(group.num_rows, 1))


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


@contextlib.contextmanager
def exclusive_lock(lock: Path, busy: MetashiftError, *, remove: bool = False) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file ``lock`` (made if missing) for the ``with`` block; ``busy`` is
    raised at once when another process holds it (one writer per download part, one training run per run key).
    The OS drops the lock if the process dies. ``remove``: unlink the file while still holding it (a lock file
    that must not outlive its job). Platforms without ``fcntl`` take no lock."""
    try:
        import fcntl  # POSIX only: absent on Windows, where no lock is taken
    except ImportError:
        yield
        return
    try:  # never through a symbolic link someone left at the lock's name
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, umask_mode("file"))
    except OSError as exc:
        raise (write_error(exc, lock) or exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise busy from None
        try:
            yield
        finally:
            if remove:
                Path(lock).unlink(missing_ok=True)
    finally:
        os.close(fd)


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


def check_out(
    final: str | os.PathLike,
    kind: str,
    *,
    force: bool = False,
    inputs: Iterable[str | os.PathLike | None] = (),
    flag: str = "--out",
) -> Path:
    """Refuse an output folder this command may not replace; return it resolved.

    Allowed: an absent or empty folder, or (with ``force``) a folder holding our ``kind`` marker.
    Refused always: a file, the current folder or one of its parents, a folder holding an input.
    """
    given = Path(final).expanduser()
    if given.is_symlink():  # resolving would write wherever the link points
        raise OutputExistsError(
            f"{flag} {given} is a symbolic link",
            f"name a real folder for {flag} (metashift-hf never writes through or over a link)",
        )
    final = given.resolve()
    where = f"{flag} {final}"
    if final.exists() and not final.is_dir():
        raise OutputExistsError(f"{where} is {_what(final)}, not a folder", f"name a new folder for {flag}")
    if _is_within(Path.cwd().resolve(), final):
        raise OutputExistsError(
            f"{where} is the current folder (or holds it)", f"name a new sub-folder for {flag}, e.g. {flag} out"
        )
    for inp in inputs:
        if not isinstance(inp, (str, os.PathLike)):  # None, or an object already loaded (an Artifact)
            continue
        path = Path(inp).expanduser().resolve()
        if _is_within(path, final):
            raise OutputExistsError(
                f"{where} holds this command's input {path}",
                f"write to another folder: {flag} would replace its own input",
            )
    if not final.is_dir() or not any(final.iterdir()):
        return final
    mark = read_marker(final)
    if mark is None:
        raise OutputExistsError(
            f"{where} is not empty and was not written by metashift-hf",
            f"name a new or empty folder for {flag} (nothing there is replaced)",
        )
    if mark["kind"] != kind:
        raise OutputExistsError(
            f"{where} holds a metashift-hf {mark['kind']}, not {_a(kind)}",
            f"name another folder for {flag} ({_a(mark['kind'])} is never replaced by {_a(kind)})",
        )
    if not force:
        raise OutputExistsError(
            f"{where} already holds {_a(kind)} from an earlier run", "pass --force to replace it, or name a new folder"
        )
    return final


def claim_dir(
    folder: str | os.PathLike, kind: str, *, inputs: Iterable[str | os.PathLike | None] = (), flag: str = "--out"
) -> Path:
    """Make ``folder`` a container of ours that holds several outputs (written each with atomic_dir).

    It must be new, empty, or already a ``kind`` container of ours; what is inside is replaced
    only by atomic_dir's own rules.
    """
    given = Path(folder).expanduser()
    path = check_out(given, kind, force=_is_ours(given, kind), inputs=inputs, flag=flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if read_marker(path) is None:
            write_marker(path, kind)
    except OSError as exc:
        raise (write_error(exc, path) or exc) from None
    return path


@contextlib.contextmanager
def claimed_dir(
    folder: str | os.PathLike, kind: str, *, inputs: Iterable[str | os.PathLike | None] = (), flag: str = "--out"
) -> Iterator[Path]:
    """:func:`claim_dir` for a run that may fail: when the run fails while the folder holds nothing
    but our marker, a folder this call created is removed and a marker it wrote into an empty
    folder is deleted again (no empty or marked-but-empty --out is left)."""
    given = Path(folder).expanduser()
    created = not given.exists() and not given.is_symlink()
    marked = _is_ours(given, kind)
    path = claim_dir(given, kind, inputs=inputs, flag=flag)
    try:
        yield path
    except BaseException:
        if not marked and _holds_only_marker(path, kind):
            if created:
                shutil.rmtree(path, ignore_errors=True)
            else:
                (path / MARKER).unlink(missing_ok=True)
        raise


def _is_ours(folder: Path, kind: str) -> bool:
    mark = read_marker(folder) if folder.is_dir() and not folder.is_symlink() else None
    return mark is not None and mark["kind"] == kind


def _holds_only_marker(folder: Path, kind: str) -> bool:
    try:
        return _is_ours(folder, kind) and [p.name for p in folder.iterdir()] == [MARKER]
    except OSError:
        return False


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


_TYPES = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISREG, "a file"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _what(path: str | os.PathLike, st: os.stat_result | None = None) -> str:
    """What is at ``path`` (the name itself, links not followed), for messages."""
    mode = (st or os.lstat(path)).st_mode
    return next((name for test, name in _TYPES if test(mode)), "a special file")


def _temp_file_prefix(final: Path) -> str:
    """How :func:`atomic_file` names its temporary file: the writer's pid in the name, so that a file a
    killed writer left is recognised as ours and stale (:func:`clean_stale`)."""
    return f".{final.name}.tmp-{os.getpid()}-"


def clean_stale(final: Path) -> list[Path]:
    """Remove temporaries a killed run left beside ``final``, ours only: a folder whose marker names a dead
    pid (:func:`atomic_dir`), or a regular file named ``.NAME.tmp-<dead pid>-*`` (:func:`atomic_file`)."""
    removed = []
    own_file = re.compile(re.escape(f".{final.name}.tmp-") + r"([0-9]{1,10})-[A-Za-z0-9_]+")
    for tmp in final.parent.glob(f".{final.name}.tmp-*"):
        if tmp.is_symlink():
            continue
        if tmp.is_dir():
            mark = read_marker(tmp)
            if mark is None or not isinstance(mark.get("pid"), int) or _alive(mark["pid"]):
                continue
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            m = own_file.fullmatch(tmp.name)
            if m is None or not tmp.is_file() or _alive(int(m.group(1))):
                continue
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
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
    return MetashiftError(
        f"cannot write {target}: {os.strerror(exc.errno)}",
        "free space or choose a writable location (nothing half-written was kept)",
    )


@contextlib.contextmanager
def atomic_dir(
    final: str | os.PathLike,
    *,
    kind: str = "output",
    force: bool = False,
    inputs: Iterable[str | os.PathLike | None] = (),
    flag: str = "--out",
) -> Iterator[Path]:
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
def atomic_file(
    final: str | os.PathLike, mode: str = "wb", *, verify: Callable[[Path], None] | None = None
) -> Iterator:
    """Open a temporary sibling file for writing; rename it over ``final`` only on success.

    The file gets the umask's permissions (mkstemp alone would leave it 0600). ``verify(temp path)``
    runs on the complete file just before the rename; raising there keeps ``final`` untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(final)  # what a killed write to the same target left
    fd, tmp = tempfile.mkstemp(prefix=_temp_file_prefix(final), dir=final.parent)
    try:
        os.fchmod(fd, umask_mode("file"))
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if verify is not None:
            verify(Path(tmp))
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------------------------------------
# single-file outputs named by the user
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileKind:
    """A kind of single-file output: ``name`` for messages, ``signature`` = the bytes every file of
    this kind begins with (how an earlier output of ours is recognised; :func:`atomic_out_file`
    checks that what it wrote begins with them)."""

    name: str
    signature: bytes


def _begins_with(path: Path, signature: bytes) -> bool:
    """Whether the regular file at ``path`` begins with ``signature`` (never follows a link nor blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        return stat.S_ISREG(os.fstat(f.fileno()).st_mode) and f.read(len(signature)) == signature


def check_out_file(
    path: str | os.PathLike,
    kind: FileKind,
    *,
    force: bool = False,
    inputs: Iterable[str | os.PathLike | None] = (),
    flag: str = "--out",
) -> Path:
    """Refuse a file output this command may not write; return its absolute path (links not resolved).

    Allowed: a path where nothing exists (its folder is made), or (with ``force``) a regular file
    that begins with ``kind``'s signature. Refused always: a symbolic link (even a dangling one), a
    folder, a device, a FIFO or a socket, a path inside or equal to one of ``inputs``. Nothing is
    opened but a regular file's first bytes, so a device or FIFO is refused before any I/O on it.
    Call it before long work; :func:`atomic_out_file` calls it again before writing.
    """
    final = Path(os.path.abspath(Path(path).expanduser()))
    where = f"{flag} {final}"
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # e.g. a parent that is a file (ENOTDIR) or unreadable
        raise OutputExistsError(
            f"cannot use {where}: {os.strerror(exc.errno)}", f"name a new file in a folder you can write for {flag}"
        ) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = _what(final, st)
        fix = {
            "a folder": f"name a file for {flag}, e.g. {flag} {final / 'out.csv'} (a folder is never replaced by a file)",
            "a symbolic link": f"name a regular file or a new path for {flag} (metashift-hf never writes through or over a link)",
        }
        raise OutputExistsError(
            f"{where} is {what}, not a regular file",
            fix.get(
                what, f"name a regular file or a new path for {flag} (devices, FIFOs and sockets are never written)"
            ),
        )
    real = final.parent.resolve() / final.name  # the folder's links resolved, the name itself not followed
    for inp in inputs:
        if not isinstance(inp, (str, os.PathLike)):  # None, or an object already loaded (an Artifact)
            continue
        if _is_within(real, Path(inp).expanduser().resolve()):
            raise OutputExistsError(
                f"{where} is (or is inside) this command's input {Path(inp)}",
                f"write {flag} somewhere else: an input is never written into",
            )
    if st is None:
        return final
    if not _begins_with(final, kind.signature):
        raise OutputExistsError(
            f"{where} exists and was not written by metashift-hf (it is not {_a(kind.name)})",
            f"name a new file for {flag} (nothing there is replaced)",
        )
    if not force:
        raise OutputExistsError(
            f"{where} already holds {_a(kind.name)} from an earlier run",
            "pass --force to replace it, or name a new file",
        )
    return final


@contextlib.contextmanager
def atomic_out_file(
    path: str | os.PathLike,
    kind: FileKind,
    *,
    force: bool = False,
    mode: str = "w",
    inputs: Iterable[str | os.PathLike | None] = (),
    flag: str = "--out",
) -> Iterator:
    """Open a temporary sibling of the user-named file ``path``; on success it replaces ``path`` in
    one rename. ``path`` is checked first and again just before the rename (:func:`check_out_file`);
    the content must begin with ``kind.signature``. On any exception nothing is left behind.
    """
    final = check_out_file(path, kind, force=force, inputs=inputs, flag=flag)

    def verify(tmp: Path) -> None:
        if not _begins_with(tmp, kind.signature):
            raise AssertionError(f"a {kind.name} must begin with {kind.signature!r} (core.fsutil.FileKind)")
        check_out_file(final, kind, force=force, inputs=inputs, flag=flag)  # nothing else appeared meanwhile

    try:
        with atomic_file(final, mode, verify=verify) as f:
            yield f
    except OSError as exc:
        if write_error(exc, final) is not None:
            raise write_error(exc, final) from None
        raise


# ------------------------------------------------------------------------------------------------
# input files: a regular file, or an error that says what is there
# ------------------------------------------------------------------------------------------------
def describe_path(path: str | os.PathLike) -> str:
    """What is at ``path``, for messages: ``nothing``, ``a folder``, ``a FIFO (named pipe)``, ... and for a link what
    it points to (``a dangling symbolic link (to X: nothing is there)``, ``a symbolic link (to X, a folder)``)."""
    return _described(path)[0]


def _described(path: str | os.PathLike) -> tuple[str, str]:
    """(:func:`describe_path`'s words, what a reader finds there: nothing, dangling, file, folder, special, other)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "nothing", "nothing"
    except OSError as exc:
        return f"unreadable ({os.strerror(exc.errno) if exc.errno else exc})", "other"
    if not stat.S_ISLNK(st.st_mode):
        return _what(path, st), _reader_kind(st)
    target = os.readlink(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"a dangling symbolic link (to {target}: nothing is there)", "dangling"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"a symbolic link (to {target}) that loops back on itself", "other"
        return f"a symbolic link (to {target}) that cannot be followed ({os.strerror(exc.errno)})", "other"
    return f"a symbolic link (to {target}, {_what(path, st)})", _reader_kind(st)


def _reader_kind(st: os.stat_result) -> str:
    return "file" if stat.S_ISREG(st.st_mode) else "folder" if stat.S_ISDIR(st.st_mode) else "special"


def input_file_error(
    path: str | os.PathLike, where: str, fix: str, *, follow_links: bool = True, exc: OSError | None = None
) -> InputFormatError:
    """The error for input ``where`` (naming ``path``) that is not a readable regular file, saying what is there
    (nothing, a folder, a FIFO, a device, a link and where it points) and the fix for that, then ``fix``."""
    what, kind = _described(path)
    if kind == "nothing":
        return InputFormatError(f"{where} does not exist", fix)
    if what.startswith(("a symbolic link", "a dangling symbolic link")) and not follow_links:
        return InputFormatError(
            f"{where} is {what}; metashift-hf follows no link here (it could point anywhere)",
            f"put the file itself in place of the link; {fix}",
        )
    if kind == "dangling":
        return InputFormatError(f"{where} is {what}", f"point the link at the file, or pass the file itself; {fix}")
    if kind == "folder":
        return InputFormatError(f"{where} is {what}, not a file", f"name the file itself, not a folder; {fix}")
    if kind == "special":
        return InputFormatError(
            f"{where} is {what}, not a regular file",
            f"name a regular file (FIFOs, devices and sockets are never read); {fix}",
        )
    why = os.strerror(exc.errno) if exc is not None and exc.errno else "it cannot be opened"
    return InputFormatError(f"cannot read {where}: it is {what} ({why})", f"make it a readable regular file; {fix}")


def open_input(path: str | os.PathLike, where: str, fix: str, *, follow_links: bool = True) -> BinaryIO:
    """Open input file ``path`` for reading in binary: a regular file only, never a wait on a FIFO nor a read of a
    device; ``follow_links=False`` (the files of a task folder) refuses a symbolic link too. Anything else is an
    :class:`InputFormatError` naming ``where``, what is there, and the fix (:func:`input_file_error`). The one
    check of every input file a user names or a task folder holds."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise input_file_error(path, where, fix, follow_links=follow_links, exc=exc) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise input_file_error(path, where, fix, follow_links=follow_links)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def check_input_file(path: str | os.PathLike, where: str, fix: str, *, follow_links: bool = True) -> Path:
    """``path`` when it is a readable regular file (:func:`open_input`'s rule), for readers that take a path."""
    open_input(path, where, fix, follow_links=follow_links).close()
    return Path(path)
