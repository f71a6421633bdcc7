"""Fetch the known input files: mirrors in order, resumable, sha256-verified before use.

A download goes to ``<dir>/<file name>.part`` and is renamed to its final name only after its
sha256 matches the pinned one (``metashift_hf.sources``), so a file under its final name is
always complete and correct. The ``.part`` file survives a crash or Ctrl-C and the next run
continues it with an HTTP Range request. The hash is computed while bytes arrive (after
re-reading the kept prefix once on resume), so a 21.8 GB file is not read twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..builders.images import open_zip
from ..core import __version__
from ..core.errors import ChecksumError, InputFormatError, MetashiftError
from ..core.fsutil import atomic_file, hash_file, human_size, sha256_file
from ..core.paths import default_cache_dir
from ..core.sources import SCENE_GRAPH_MEMBERS, KnownFile, known_file


MIRROR_ENV = "METASHIFT_HF_MIRROR"
_CHUNK = 1 << 20
# Failures that say "this mirror does not have the file": go straight to the next mirror.
_PERMANENT_HTTP = {400, 401, 403, 404, 405, 410, 451}

logger = logging.getLogger(__name__)


class DownloadError(MetashiftError):
    """Every mirror failed to deliver a file (network errors, missing file, wrong size)."""


class DiskSpaceError(MetashiftError):
    """Not enough free space for what is about to be written."""


class _MirrorFailed(Exception):
    """Internal: this mirror cannot deliver the file; try the next one."""


def mirror_urls(known: KnownFile, mirror: str | None = None) -> list[str]:
    """URLs to try, in order: ``mirror`` (else ``$METASHIFT_HF_MIRROR``) as ``BASE/<file name>``,
    then the published locations."""
    base = mirror if mirror is not None else os.environ.get(MIRROR_ENV, "")
    urls = [f"{base.rstrip('/')}/{known.file_name}"] if base else []
    return urls + [u for u in known.urls if u not in urls]


def check_disk_space(directory: str | os.PathLike, needed: int, what: str) -> None:
    """Raise ``DiskSpaceError`` unless ``directory`` (or its nearest existing parent) has ``needed`` bytes free."""
    d = Path(directory).absolute()
    while not d.exists() and d != d.parent:
        d = d.parent
    free = shutil.disk_usage(d).free
    if free < needed:
        raise DiskSpaceError(
            f"{what} needs {human_size(needed)} but {d} has only {human_size(free)} free",
            "free some space, or choose another folder with --dir (or $METASHIFT_HF_CACHE)",
        )


def part_path(final: Path) -> Path:
    return final.with_name(final.name + ".part")


def _user_agent() -> str:

    return f"metashift-hf/{__version__} (+urllib)"


# First bytes of each kind of known file: a partial file that starts otherwise is discarded.
_MAGIC = {
    ".zip": (b"PK\x03\x04", b"PK\x05\x06"),
    ".json": (b"{", b"[", b"\xef\xbb\xbf"),
    ".pkl": (b"\x80",),
    ".gz": (b"\x1f\x8b",),
}


class _Fetcher:
    """Fills one ``.part`` file from one URL, resuming over dropped connections."""

    def __init__(self, known: KnownFile, part: Path, *, timeout: float, retries: int, progress: bool) -> None:
        self.known, self.part = known, part
        self.timeout, self.retries, self.progress = timeout, retries, progress
        self.hasher = hashlib.sha256()
        self.hashed = 0  # bytes of the part file already fed to ``hasher``

    def _size(self) -> int:
        return self.part.stat().st_size if self.part.exists() else 0

    def _plausible_start(self, head: bytes | None = None) -> bool:
        """Whether the file's first bytes are what its type starts with (a .part never resumes from an
        error page that a mirror sent instead)."""
        starts = next((m for suffix, m in _MAGIC.items() if self.known.file_name.endswith(suffix)), None)
        if starts is None:
            return True
        if head is None:
            with open(self.part, "rb") as f:
                head = f.read(8)
        return not head or any(head[: len(m)] == m[: len(head)] for m in starts)

    def restart(self) -> None:
        self.part.unlink(missing_ok=True)
        self.hasher, self.hashed = hashlib.sha256(), 0

    def fetch(self, url: str) -> str:
        """Download until the part file has ``known.size`` bytes; return its sha256 hex digest."""
        failures = 0  # consecutive attempts that made no progress
        while True:
            offset = self._size()
            if offset > self.known.size or (offset and not self._plausible_start()):
                if offset <= self.known.size:
                    logger.warning(
                        f"{self.known.file_name}: the partial file {self.part} does not start like a "
                        f"{self.part.suffixes[0] if self.part.suffixes else ''} file; discarded, starting over"
                    )
                self.restart()
                offset = 0
            if self.hashed != offset:
                self.hasher, self.hashed = hash_file(self.part, length=offset), offset
            if offset == self.known.size:
                return self.hasher.hexdigest()
            try:
                self._attempt(url, offset)
            except (http.client.HTTPException, urllib.error.URLError, OSError) as exc:
                if isinstance(exc, urllib.error.HTTPError) and exc.code in _PERMANENT_HTTP:
                    raise _MirrorFailed(f"HTTP {exc.code} {exc.reason}") from None
                progressed = self._size() > offset
                failures = 0 if progressed else failures + 1
                if failures > self.retries:
                    raise _MirrorFailed(f"{type(exc).__name__}: {exc} (after {self.retries} retries)") from None
                logger.warning(
                    f"{self.known.file_name}: connection to {url} broke ({type(exc).__name__}: {exc}); "
                    f"resuming at byte {self._size():,}"
                )
                time.sleep(min(0.5 * 2**failures, 30.0) if failures else 0.0)

    def _attempt(self, url: str, offset: int) -> None:
        headers = {"User-Agent": _user_agent(), "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and offset:  # our partial file is not a prefix the server accepts
                logger.warning(f"{self.known.file_name}: {url} refused to resume (HTTP 416); starting over")
                self.restart()
                raise ConnectionError("range not satisfiable; restarting from byte 0") from None
            raise
        with resp:
            status = getattr(resp, "status", None) or resp.getcode() or 200  # file:// has no status
            total = self.known.size
            if status == 206 and offset:
                crange = resp.headers.get("Content-Range", "")
                if not crange.startswith(f"bytes {offset}-") or not crange.endswith(f"/{total}"):
                    raise _MirrorFailed(
                        f"answered a resume with Content-Range {crange!r}, expected bytes {offset}-…/{total}"
                    )
                mode = "ab"
            elif status == 200:
                if offset:
                    logger.warning(
                        f"{self.known.file_name}: {url} ignored the Range request (HTTP 200); starting over"
                    )
                    self.restart()
                    offset = 0
                mode = "wb"
            else:
                raise _MirrorFailed(f"unexpected HTTP {status}")
            ctype = (resp.headers.get("Content-Type") or "").lower()
            if ctype.startswith(("text/html", "application/xhtml")) and not self.known.file_name.endswith(
                (".html", ".htm")
            ):
                raise _MirrorFailed(f"answered with a web page ({ctype}), not {self.known.file_name}")
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit() and offset + int(length) != total:
                raise _MirrorFailed(
                    f"serves {offset + int(length):,} bytes for {self.known.file_name}, expected {total:,}"
                )
            self._stream(resp, mode, offset)

    def _stream(self, resp, mode: str, offset: int) -> None:
        from tqdm import tqdm

        total = self.known.size
        with (
            open(self.part, mode) as out,
            tqdm(
                total=total,
                initial=offset,
                unit="B",
                unit_scale=True,
                unit_divisor=1000,
                desc=self.known.file_name,
                disable=not self.progress,
                leave=True,
            ) as bar,
        ):
            done = offset
            read = getattr(resp, "read1", resp.read)
            while done < total:
                # read1 returns what has arrived, so bytes before a dropped connection are kept.
                block = read(min(_CHUNK, total - done))
                if not block:
                    raise ConnectionError(f"connection closed after {done:,} of {total:,} bytes")
                if done == 0 and not self._plausible_start(block[:8]):
                    self.restart()  # nothing of it is kept (the open handle just goes away)
                    raise _MirrorFailed(f"sends bytes that do not start like {self.known.file_name}")
                out.write(block)
                self.hasher.update(block)
                done += len(block)
                self.hashed = done
                bar.update(len(block))
        if resp.read(1):  # more than the known size: not the file we want (checked after closing it)
            self.restart()
            raise _MirrorFailed(f"sends more than the expected {total:,} bytes")


def download_file(
    key_or_known: str | KnownFile,
    dest_dir: str | os.PathLike | None = None,
    *,
    mirror: str | None = None,
    urls: Sequence[str] | None = None,
    progress: bool = True,
    timeout: float = 60.0,
    retries: int = 3,
    trusted_sha256: Callable[[Path], str | None] | None = None,
) -> tuple[Path, str | None]:
    """Download one known file into ``dest_dir`` (default: the cache) and return ``(path, url)``.

    ``urls`` (full URLs of the file) replace the mirror list (``mirror`` + the published URLs).
    ``url`` is the mirror that served it, or None when a verified file was already in place.
    ``trusted_sha256(path)`` may return a digest recorded earlier for an unchanged file, so an
    existing 21.8 GB file is not re-hashed on every run. Raises ``ChecksumError`` when no mirror
    delivered the right bytes (nothing is kept; the message names each mirror), ``DownloadError``
    when none delivered at all, ``DiskSpaceError`` before starting when space is short.
    """
    known = known_file(key_or_known) if isinstance(key_or_known, str) else key_or_known
    dest = Path(dest_dir) if dest_dir is not None else default_cache_dir()
    final = dest / known.file_name
    if final.exists():
        _verify_existing(final, known, trusted_sha256, progress)
        return final, None
    dest.mkdir(parents=True, exist_ok=True)
    part = part_path(final)
    have = part.stat().st_size if part.exists() else 0
    check_disk_space(dest, max(known.size - have, 0), f"downloading {known.file_name}")

    with _exclusive(part, final):
        return _from_mirrors(
            known,
            part,
            final,
            list(urls) if urls else mirror_urls(known, mirror),
            have > 0,
            _Fetcher(known, part, timeout=timeout, retries=retries, progress=progress),
        )


@contextlib.contextmanager
def _exclusive(part: Path, final: Path) -> Iterator[None]:
    """One writer per ``.part``: a second download of the same file into the same folder stops with
    a clear error instead of interleaving bytes. The OS drops the lock if the process dies."""
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform
        yield
        return
    lock = part.with_name(part.name + ".lock")
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise MetashiftError(
                f"another process is downloading {final} right now (lock {lock})",
                "wait for it to finish, or stop it and run the command again",
            ) from None
        try:
            yield
        finally:
            lock.unlink(missing_ok=True)  # while still holding it, so no one else got it meanwhile


def _from_mirrors(
    known: KnownFile, part: Path, final: Path, urls: list[str], resumed_from_earlier_run: bool, fetcher: "_Fetcher"
) -> tuple[Path, str]:
    failures: list[str] = []
    bad_checksum = False
    for url in urls:
        try:
            digest = fetcher.fetch(url)
        except _MirrorFailed as exc:
            failures.append(f"{url}: {exc}")
            logger.warning(f"{known.file_name}: {url}: {exc}; trying the next mirror")
            continue
        if digest == known.sha256:
            os.replace(part, final)
            return final, url
        # Keep nothing from a bad source; the next mirror starts from byte 0.
        fetcher.restart()
        bad_checksum = True
        extra = " (continuing a partial file from an earlier run)" if resumed_from_earlier_run else ""
        failures.append(f"{url}: served bytes with sha256 {digest}, expected {known.sha256}{extra}")
        logger.warning(f"{known.file_name}: checksum mismatch from {url}{extra}; deleted it, trying the next mirror")
        resumed_from_earlier_run = False
    detail = "; ".join(failures)
    fix = (
        f"try another mirror with --mirror BASE_URL (the file is looked up as BASE_URL/{known.file_name}), "
        f"or fetch {known.file_name} yourself and run `metashift-hf download --register {known.key} PATH`"
    )
    if bad_checksum:
        raise ChecksumError(f"no mirror delivered a correct {known.file_name}; nothing was kept: {detail}", fix)
    raise DownloadError(
        f"could not download {known.file_name}: {detail}",
        f"check the network or proxy settings (partial data is kept in {part} when any "
        f"arrived, and the next run resumes it), or {fix}",
    )


def _verify_existing(final: Path, known: KnownFile, trusted_sha256, progress: bool) -> str:
    digest = trusted_sha256(final) if trusted_sha256 else None
    if digest is None:
        digest = sha256_file(final, progress=progress)
    if digest != known.sha256:
        raise ChecksumError(
            f"{final} exists but its sha256 is {digest}, expected {known.sha256} for {known.file_name}",
            f"delete {final} and run the download again",
        )
    return digest


def extract_scene_graphs(zip_path: str | os.PathLike, out_dir: str | os.PathLike) -> list[Path]:
    """Extract ``train_sceneGraphs.json`` / ``val_sceneGraphs.json`` from ``zip_path`` into ``out_dir``.

    Each file is written atomically; a file already there with the member's size is kept (atomic
    writes mean a file under its final name is complete). Returns the extracted paths in
    ``SCENE_GRAPH_MEMBERS`` order.
    """
    zip_path, out = Path(zip_path), Path(out_dir)
    with open_zip(zip_path, "delete it and run `metashift-hf download --what scene-graphs` again") as zf:
        by_name = {Path(i.filename).name: i for i in zf.infolist() if not i.is_dir()}
        members = [by_name[n] for n in SCENE_GRAPH_MEMBERS if n in by_name]
        if not members:
            raise InputFormatError(
                f"{zip_path} holds none of {', '.join(SCENE_GRAPH_MEMBERS)} (it has: "
                f"{', '.join(sorted(by_name)[:10]) or 'nothing'})",
                "register GQA's sceneGraphs.zip, or a folder holding the scene-graph JSON files",
            )
        todo = [
            i
            for i in members
            if not (
                (out / Path(i.filename).name).is_file() and (out / Path(i.filename).name).stat().st_size == i.file_size
            )
        ]
        if todo:
            check_disk_space(out, sum(i.file_size for i in todo), f"extracting scene graphs from {zip_path.name}")
        for info in todo:
            target = out / Path(info.filename).name
            try:
                with zf.open(info) as src, atomic_file(target) as dst:
                    shutil.copyfileobj(src, dst, _CHUNK)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise InputFormatError(
                    f"member {info.filename} of {zip_path} is corrupt ({exc})",
                    "delete the zip and run `metashift-hf download --what scene-graphs` again",
                ) from exc
        return [out / Path(i.filename).name for i in members]


def extraction_dir(zip_path: str | os.PathLike) -> Path:
    """Where a scene-graph zip is extracted: ``sceneGraphs/`` beside it, or in the cache when
    that folder is not writable (e.g. a read-only shared copy registered by the user)."""
    zip_path = Path(zip_path).absolute()
    if os.access(zip_path.parent, os.W_OK):
        return zip_path.parent / "sceneGraphs"
    digest = hashlib.sha256(str(zip_path).encode()).hexdigest()[:12]
    return default_cache_dir() / f"sceneGraphs-{digest}"
