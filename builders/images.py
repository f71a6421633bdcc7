"""Image sources: a folder of ``<id>.jpg`` or a zip such as GQA's ``images.zip`` or COCO's ``train2017.zip``.

Bytes are always the original file content: images are never decoded and re-encoded for
storage. A zip is read in place (random access through its central directory), never unpacked.

    with open_images("images.zip") as src:
        present, report = src.resolve(ids, on_missing="skip")
        data = src.read(present[0])
"""

from __future__ import annotations

import abc
import io
import os
import re
import stat
import struct
import threading
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import pyarrow as pa

from metashift_hf.core import options as opt
from metashift_hf.core.errors import InputFormatError, MissingImagesError
from metashift_hf.core.options import OnMissing


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
# Bounds on one image, checked from the declared size before anything is read or inflated: GQA's
# largest JPEG is a few MB, so a 64 MiB image is a damaged or hostile file, not a photograph.
MAX_IMAGE_BYTES = 64 * 1024 * 1024
# Pixels: PIL refuses to open an image of more than twice its MAX_IMAGE_PIXELS (89.5 M) and warns
# above it; what exports must also decode, so the check uses PIL's own limit.
MAX_IMAGE_PIXELS = 89_478_485
_SHOW_IDS = 10  # how many ids an error message lists before "..."
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zip local file header, 30 bytes
_FIX_IMAGES = (
    "pass --on-missing skip (Python: on_missing='skip') to drop these images, or point --images "
    "at the folder of <id>.jpg files or the zip (e.g. GQA images.zip) that holds them"
)


def _image_stem(name: str) -> str | None:
    """The image id of a file/entry name, or None when it is not an image we index."""
    base = name.rsplit("/", 1)[-1]
    # macOS zips carry '._<name>' resource forks next to real entries.
    if not base or base.startswith("."):
        return None
    stem, dot, suffix = base.rpartition(".")
    if not dot or not stem or f".{suffix.lower()}" not in IMAGE_SUFFIXES:
        return None
    return stem


def _safe_member(name: str) -> bool:
    """A zip member path that stays inside the archive's tree: relative, no '..', no drive, no '\\'."""
    if not name or name.startswith("/") or "\\" in name or (len(name) > 1 and name[1] == ":"):
        return False
    return ".." not in name.split("/")


def _shorten(ids: list[str]) -> str:
    shown = ", ".join(ids[:_SHOW_IDS])
    return shown + (f", ... ({len(ids) - _SHOW_IDS} more)" if len(ids) > _SHOW_IDS else "")


# Start-of-frame markers (baseline, progressive, lossless, arithmetic); C4/C8/CC are not frames.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


_BAD_SCAN_BYTES = re.compile(rb"\xff[\x02-\xbf]")


def jpeg_problem(data: "bytes | memoryview", *, scan: bool = True) -> str | None:
    """Walk the JPEG marker segments up to the scan: a frame header with a non-zero size within
    PIL's pixel limit must come first, and an end-of-image marker must sit near the end (a truncated
    download has none). ``scan`` also looks through the entropy-coded data for scrambled bytes."""
    pos, size, frame = 2, len(data), False
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return f"not a decodable image (bad JPEG marker at byte {pos})"
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        if marker < 0xC0:
            return f"not a decodable image (bad JPEG marker at byte {pos})"
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if length < 2:
            return f"not a decodable image (bad JPEG segment length at byte {pos})"
        if marker in _SOF_MARKERS:
            if pos + 9 > size:
                break
            height = int.from_bytes(data[pos + 5 : pos + 7], "big")
            width = int.from_bytes(data[pos + 7 : pos + 9], "big")
            if not width or not height:
                return f"not a decodable image (JPEG frame of {width}x{height} pixels)"
            if width * height > MAX_IMAGE_PIXELS:
                return f"image too large to decode ({width}x{height} pixels; at most {MAX_IMAGE_PIXELS:,})"
            frame = True
        elif marker == 0xDA:  # start of scan: entropy-coded data follows
            if not frame:
                return "not a decodable image (JPEG scan before any frame header)"
            # Trailing padding after EOI is legal and occurs in the wild, so look near the end only.
            if b"\xff\xd9" not in bytes(data[-4096:]):
                return "truncated JPEG (no end-of-image marker)"
            if not scan:
                return None
            # In entropy-coded data a 0xFF byte is followed by 0x00 (stuffing), a restart marker or a
            # segment marker (>= 0xC0, progressive scans); 0x02-0xBF never: scrambled scan data has them.
            bad = _BAD_SCAN_BYTES.search(data, pos + 2 + length)
            return None if bad is None else f"not a decodable image (JPEG scan data damaged at byte {bad.start()})"
        pos += 2 + length
    return "truncated JPEG (headers cut short)"


def sniff_image(data: bytes) -> str | None:
    """Why ``data`` is not a decodable image, or None when it looks whole.

    Checks without decoding pixels. JPEG (all of GQA): a walk over the marker segments (frame
    header present, sizes non-zero, scan reached) plus an end-of-image marker near the end —
    ~20x faster than PIL and it catches truncation, which PIL's JPEG ``verify`` does not. Other
    formats: PIL parses the headers and runs its ``verify`` (PNG: chunk CRCs).
    """
    if not data:
        return "empty file"
    if data[:3] == b"\xff\xd8\xff":
        return jpeg_problem(data)
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
            if width * height > MAX_IMAGE_PIXELS:
                return f"image too large to decode ({width}x{height} pixels; at most {MAX_IMAGE_PIXELS:,})"
            im.verify()
    except Exception as exc:  # PIL raises many types for garbage; all mean "not an image"
        return f"not a decodable image ({type(exc).__name__}: {str(exc)[:200]})"
    return None


@dataclass
class ImageCheck:
    """Result of checking a list of image ids against a source."""

    source: str
    requested: int
    missing: list[str] = field(default_factory=list)
    corrupt: dict[str, str] = field(default_factory=dict)  # id -> reason

    @property
    def ok(self) -> bool:
        return not self.missing and not self.corrupt

    @property
    def bad_ids(self) -> list[str]:
        return sorted(set(self.missing) | set(self.corrupt))

    def summary(self) -> str:
        """One paragraph for users: counts, first ids, the source."""
        if self.ok:
            return f"all {self.requested} images present and readable in {self.source}"
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing ({_shorten(self.missing)})")
        if self.corrupt:
            bad = sorted(self.corrupt)
            first = bad[0]
            parts.append(f"{len(bad)} corrupt ({_shorten(bad)}; e.g. {first}: {self.corrupt[first]})")
        return f"{len(self.bad_ids)} of {self.requested} images unusable in {self.source}: " + "; ".join(parts)

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "requested": self.requested,
            "missing": list(self.missing),
            "corrupt": dict(self.corrupt),
        }

    def raise_if_bad(self) -> None:
        if not self.ok:
            raise MissingImagesError(self.summary(), _FIX_IMAGES, image_ids=self.bad_ids)


class ImageSource(abc.ABC):
    """Read-only access to images by id. Thread-safe ``read``; use as a context manager."""

    def __init__(self, path: Path, index: dict[str, object]) -> None:
        self.path = path
        self._index = index
        self._ids: list[str] | None = None
        # COCO names files by the zero-padded image id (000000397133.jpg holds image 397133): such
        # a file also answers to the unpadded id, unless a file is named by that id itself.
        self._aliases = {s.lstrip("0") or "0": s for s in index if len(s) > 1 and s[0] == "0" and s.isdigit()}

    @abc.abstractmethod
    def _read(self, image_id: str, where: object) -> bytes:
        """The bytes of ``image_id`` stored at ``where`` (the index value)."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Kind, location and size of the source, for messages."""

    # -- public API ----------------------------------------------------------------------------
    def has(self, image_id: str) -> bool:
        return str(image_id) in self._index or str(image_id) in self._aliases

    def __contains__(self, image_id: object) -> bool:
        return self.has(str(image_id))

    def __len__(self) -> int:
        return len(self._index)

    def ids(self) -> list[str]:
        """Every image id in the source, sorted."""
        if self._ids is None:
            self._ids = sorted(self._index)
        return list(self._ids)

    def read(self, image_id: str) -> bytes:
        """The original bytes of one image; MissingImagesError when absent or unreadable."""
        image_id = str(image_id)
        return self._read(image_id, self._lookup(image_id))

    def read_many(self, image_ids: Sequence[str]) -> "pa.BinaryArray | pa.ChunkedArray":
        """The original bytes of each image, in order, as arrow binary (chunked only past 2 GB).

        Folders and zips know each size up front and read straight into one buffer from arrow's
        memory pool: no bytes object per image and no second copy into arrow (bench_materialise).
        """
        ids = [str(i) for i in image_ids]
        where = [self._lookup(i) for i in ids]
        sizes = [self._size(i, w) for i, w in zip(ids, where)]
        if any(n is None for n in sizes) or sum(sizes) >= 2**31:  # int32 offsets of arrow binary
            return pa.array([self._read(i, w) for i, w in zip(ids, where)], pa.binary())
        data = pa.allocate_buffer(sum(sizes))
        view = memoryview(data).cast("B")
        offsets = [0]
        for image_id, w, size in zip(ids, where, sizes):
            start = offsets[-1]
            self._read_into(image_id, w, view[start : start + size])
            offsets.append(start + size)
        return pa.Array.from_buffers(pa.binary(), len(ids), [None, pa.array(offsets, pa.int32()).buffers()[1], data])

    def _size(self, image_id: str, where: object) -> int | None:
        """The byte size of ``image_id`` if known without reading it (None: read it whole)."""
        return None

    def _read_into(self, image_id: str, where: object, view: memoryview) -> None:
        """Fill ``view`` (exactly ``_size`` bytes) with the image; sources with ``_size`` override it."""
        view[:] = self._read(image_id, where)

    def _lookup(self, image_id: str) -> object:
        where = self._index.get(image_id)
        if where is None and image_id in self._aliases:
            where = self._index[self._aliases[image_id]]
        if where is None:
            raise MissingImagesError(
                f"image {image_id!r} is not in {self.describe()}", _FIX_IMAGES, image_ids=[image_id]
            )
        return where

    def check(self, image_ids: Iterable[str], *, verify: bool = True) -> ImageCheck:
        """Which of ``image_ids`` are missing, and (``verify``) which are not decodable images."""
        ids = sorted({str(i) for i in image_ids})
        report = ImageCheck(source=self.describe(), requested=len(ids))
        for image_id in ids:
            if not self.has(image_id):
                report.missing.append(image_id)
            elif verify:
                try:
                    reason = sniff_image(self.read(image_id))
                except MissingImagesError as exc:  # e.g. a zip member failing its CRC
                    reason = exc.what
                if reason:
                    report.corrupt[image_id] = reason
        return report

    def resolve(
        self, image_ids: Iterable[str], on_missing: OnMissing = "error", *, verify: bool = True
    ) -> tuple[list[str], ImageCheck]:
        """Sorted usable ids and the check report; ``on_missing='error'`` raises when any is bad."""
        opt.on_missing(on_missing)
        ids = sorted({str(i) for i in image_ids})
        report = self.check(ids, verify=verify)
        if on_missing == "error":
            report.raise_if_bad()
        bad = set(report.bad_ids)
        return [i for i in ids if i not in bad], report

    def close(self) -> None:
        pass

    def __enter__(self) -> "ImageSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


class FolderImages(ImageSource):
    """``<id>.jpg`` files in a folder and in its direct subfolders (e.g. ``gqa/``, ``vg/``, ``images/``)."""

    def __init__(self, path: Path) -> None:
        index: dict[str, Path] = {}
        self.duplicates = 0
        # Top level first, then subfolders in sorted order: the first file seen for an id wins,
        # so the choice is deterministic.
        subdirs = self._scan(path, index)
        for sub in subdirs:
            self._scan(sub, index)
        super().__init__(path, index)

    def _scan(self, folder: Path, index: dict[str, Path]) -> list[Path]:
        """Add the images of ``folder`` to ``index``; return its visible subfolders, sorted."""
        subdirs = []
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.is_dir():
                if not entry.name.startswith("."):
                    subdirs.append(Path(entry.path))
                continue
            stem = _image_stem(entry.name)
            # regular files only (a link to one is fine): a FIFO would block the read for ever and
            # a link to /dev/zero never ends; such an id is reported missing
            if stem is None or not entry.is_file():
                continue
            if stem in index:
                self.duplicates += 1
            else:
                index[stem] = Path(entry.path)
        return subdirs

    def _open(self, image_id: str, where) -> tuple:
        """An open regular file of at most MAX_IMAGE_BYTES and its size (checked before reading).

        Opened non-blocking, so a FIFO swapped in after indexing cannot hang the read.
        """
        try:
            fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise MissingImagesError(
                f"image {image_id!r} could not be read from {where}: {exc}", _FIX_IMAGES, image_ids=[image_id]
            ) from exc
        f = os.fdopen(fd, "rb")
        st = os.fstat(fd)
        why = (
            "it is not a regular file"
            if not stat.S_ISREG(st.st_mode)
            else f"{st.st_size:,} bytes, more than the {MAX_IMAGE_BYTES:,} an image may have"
            if st.st_size > MAX_IMAGE_BYTES
            else None
        )
        if why:
            f.close()
            raise MissingImagesError(
                f"image {image_id!r} ({where}) is refused: {why}", _FIX_IMAGES, image_ids=[image_id]
            )
        return f, st.st_size

    def _read(self, image_id: str, where: object) -> bytes:
        f, size = self._open(image_id, where)
        try:
            with f:
                return f.read(size + 1)[: MAX_IMAGE_BYTES + 1]
        except OSError as exc:
            raise MissingImagesError(
                f"image {image_id!r} could not be read from {where}: {exc}", _FIX_IMAGES, image_ids=[image_id]
            ) from exc

    def _size(self, image_id: str, where: object) -> int | None:
        try:
            st = os.stat(where)  # type: ignore[arg-type]
        except OSError:
            return None  # reported by _read, with the reason
        return st.st_size if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_IMAGE_BYTES else None

    def _read_into(self, image_id: str, where: object, view: memoryview) -> None:
        f, _ = self._open(image_id, where)
        try:
            with f:
                n = f.readinto(view)
                grown = f.read(1)
        except OSError as exc:
            raise MissingImagesError(
                f"image {image_id!r} could not be read from {where}: {exc}", _FIX_IMAGES, image_ids=[image_id]
            ) from exc
        if n != len(view) or grown:
            raise MissingImagesError(
                f"image {image_id!r} ({where}) changed size while being read", _FIX_IMAGES, image_ids=[image_id]
            )

    def describe(self) -> str:
        extra = f", {self.duplicates} duplicate ids ignored" if self.duplicates else ""
        return f"folder {self.path} ({len(self._index)} images{extra})"


def open_zip(path: str | os.PathLike, fix: str) -> zipfile.ZipFile:
    """``zipfile.ZipFile(path)``, or an InputFormatError naming the file (``fix``: what the user does)."""
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputFormatError(f"{path} is not a readable zip file ({exc})", fix) from exc


class ZipImages(ImageSource):
    """Entries of a zip indexed by basename stem (``images/2375429.jpg`` -> ``"2375429"``).

    The central directory is parsed once. Each thread reads through its own file handle and
    decodes the member itself (stored or deflated, CRC checked), so concurrent reads never
    share a file position and no thread re-parses the 148k-entry directory.
    """

    def __init__(self, path: Path) -> None:
        zf = open_zip(
            path, "point --images at a complete zip (re-download it if it was cut short) or at a folder of <id>.jpg"
        )
        index: dict[str, zipfile.ZipInfo] = {}
        self.duplicates = 0
        self.unsafe: list[str] = []  # member paths that leave the archive's tree: never indexed
        # Sorted by entry name so the winner of a duplicate id does not depend on zip order.
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if info.is_dir():
                continue
            stem = _image_stem(info.filename)
            if stem is None or info.filename.startswith("__MACOSX/"):
                continue
            if not _safe_member(info.filename):
                self.unsafe.append(info.filename)
                continue
            if stem in index:
                self.duplicates += 1
            else:
                index[stem] = info
        zf.close()
        if self.unsafe:
            warnings.warn(
                f"{path}: {len(self.unsafe)} entries with unsafe paths ignored ({_shorten(self.unsafe)})", stacklevel=2
            )
        super().__init__(path, index)
        self._reset_handles()

    def _reset_handles(self) -> None:
        # Handles are per process and per thread: a forked worker must not share file offsets
        # with its parent, so they are recreated whenever the pid changes.
        self._pid = os.getpid()
        self._zip: zipfile.ZipFile | None = None  # only for members we do not decode ourselves
        self._zip_lock = threading.Lock()
        self._local = threading.local()
        self._handles: list = []
        self._handles_lock = threading.Lock()

    def __getstate__(self) -> dict:
        # Picklable (datasets fingerprints and multiprocessing): the index travels, handles do not.
        state = self.__dict__.copy()
        for key in ("_zip", "_zip_lock", "_local", "_handles", "_handles_lock", "_pid"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_handles()

    def _handle(self):
        if self._pid != os.getpid():
            self._reset_handles()
        fh = getattr(self._local, "fh", None)
        if fh is None:
            fh = open(self.path, "rb")
            self._local.fh = fh
            with self._handles_lock:
                self._handles.append(fh)
        return fh

    def _bad(self, image_id: str, info: zipfile.ZipInfo, why: str) -> MissingImagesError:
        return MissingImagesError(
            f"image {image_id!r} (entry {info.filename!r} of {self.path}) is unreadable: {why}",
            _FIX_IMAGES,
            image_ids=[image_id],
        )

    def _seek_data(self, image_id: str, info: zipfile.ZipInfo):
        """The thread's handle, positioned at the entry's data (after its local header)."""
        if info.flag_bits & 0x1:
            raise self._bad(image_id, info, "the entry is encrypted")
        fh = self._handle()
        fh.seek(info.header_offset)
        header = fh.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise self._bad(image_id, info, "bad local file header (zip cut short or damaged)")
        fields = _LOCAL_HEADER.unpack(header)
        name_len, extra_len = fields[-2], fields[-1]
        fh.seek(name_len + extra_len, os.SEEK_CUR)
        return fh

    def _read(self, image_id: str, where: object) -> bytes:
        info: zipfile.ZipInfo = where  # type: ignore[assignment]
        self._check_declared(image_id, info)
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) and not info.flag_bits & 0x1:
            with self._zip_lock:
                try:
                    if self._zip is None:
                        self._zip = zipfile.ZipFile(self.path)
                    return self._zip.read(info)
                except Exception as exc:
                    raise self._bad(image_id, info, str(exc)) from exc
        raw = self._seek_data(image_id, info).read(info.compress_size)
        if len(raw) != info.compress_size:
            raise self._bad(image_id, info, "entry data cut short (zip truncated)")
        if info.compress_type == zipfile.ZIP_DEFLATED:
            try:
                # never more than the declared size (+1 to see a lie): a bomb stops here
                raw = zlib.decompressobj(-15).decompress(raw, info.file_size + 1)
            except zlib.error as exc:
                raise self._bad(image_id, info, f"deflate error {exc}") from exc
        self._check_crc(image_id, info, raw)
        return raw

    def _check_declared(self, image_id: str, info: zipfile.ZipInfo) -> None:
        if max(info.file_size, info.compress_size) > MAX_IMAGE_BYTES:
            raise self._bad(
                image_id,
                info,
                f"{info.file_size:,} bytes declared, more than the {MAX_IMAGE_BYTES:,} an image may have",
            )

    def _check_crc(self, image_id: str, info: zipfile.ZipInfo, data) -> None:
        if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
            raise self._bad(image_id, info, "CRC/size mismatch (damaged entry)")

    def _size(self, image_id: str, where: object) -> int | None:
        size = where.file_size  # type: ignore[attr-defined]
        return size if size <= MAX_IMAGE_BYTES else None  # None: _read reports it

    def _read_into(self, image_id: str, where: object, view: memoryview) -> None:
        info: zipfile.ZipInfo = where  # type: ignore[assignment]
        self._check_declared(image_id, info)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            view[:] = self._read(image_id, info)  # deflated (GQA's zip stores its JPEGs) or refused
            return
        if info.compress_size != info.file_size:
            raise self._bad(image_id, info, "CRC/size mismatch (damaged entry)")
        n = self._seek_data(image_id, info).readinto(view)
        if n != len(view):
            raise self._bad(image_id, info, "entry data cut short (zip truncated)")
        self._check_crc(image_id, info, view)

    def describe(self) -> str:
        extra = f", {self.duplicates} duplicate ids ignored" if self.duplicates else ""
        extra += f", {len(self.unsafe)} entries with unsafe paths ignored" if self.unsafe else ""
        return f"zip {self.path} ({len(self._index)} images{extra})"

    def close(self) -> None:
        with self._handles_lock:
            for fh in self._handles:
                fh.close()
            self._handles.clear()
        self._local = threading.local()
        if self._zip is not None:
            self._zip.close()
            self._zip = None


class DatasetImages(ImageSource):
    """The image column of a ``datasets.Dataset`` (``Image`` feature) by image id: the stored bytes
    as they are (read with ``decode=False``). A cell's ``path`` is opened only with ``paths=True``
    (a dataset of the user's own, e.g. an imagefolder for ``build --tags``), and then only a regular
    file: a task's dataset may come from anyone, and its paths could name a FIFO or any local file."""

    def __init__(self, ds, image_column: str, ids: Sequence[str], name: str, *, paths: bool = False) -> None:
        feature = ds.features.get(image_column)
        if feature is None or not hasattr(feature, "decode"):
            raise InputFormatError(
                f"dataset {name}: column {image_column!r} is not an image column ({feature})",
                "pass --image-column naming a column of datasets.Image type",
            )
        if len(ids) != len(ds):
            raise InputFormatError(f"dataset {name}: {len(ids)} ids for {len(ds)} rows", "give one id per row")
        self._ds = ds.cast_column(image_column, type(feature)(decode=False)).select_columns([image_column])
        self._column, self._name, self._paths = image_column, name, paths
        index: dict[str, object] = {}
        for row, image_id in enumerate(ids):
            index.setdefault(str(image_id), row)
        super().__init__(Path(name), index)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}  # a lock does not pickle (DataLoader workers)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _read(self, image_id: str, where: object) -> bytes:
        with self._lock:  # one reader at a time into the Arrow table (decode threads); decoding is outside it
            cell = self._ds[int(where)][self._column]
        return cell_bytes(
            cell,
            f"image {image_id!r} (row {where} of {self.describe()})",
            image_id,
            paths=self._paths,
        )

    def describe(self) -> str:
        return f"dataset {self._name} column {self._column!r} ({len(self._index)} images)"


def cell_bytes(cell: object, where: str, image_id: str, *, paths: bool = False) -> bytes:
    """The bytes of one ``datasets.Image`` cell read with ``decode=False``; an empty cell is an error naming
    ``where``. Its ``path`` is read only with ``paths`` (the user's own dataset) and only as a regular file."""
    rec = cell if isinstance(cell, dict) else {}
    if rec.get("bytes"):
        return rec["bytes"]
    path = rec.get("path")
    if paths and path:
        try:
            with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
                st = os.fstat(f.fileno())
                if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_IMAGE_BYTES:
                    return f.read()
        except OSError:
            pass
    held = "a path but no bytes" if path else "neither bytes nor a path"
    raise MissingImagesError(
        f"{where} holds no image ({held}; a dataset's images are read from its bytes only)",
        "the dataset is incomplete or was altered: download it again, or export the task again "
        "with `metashift-hf export` (it stores every image's bytes)",
        image_ids=[image_id],
    )


def open_images(src: "str | os.PathLike | ImageSource") -> ImageSource:
    """Open a folder of ``<id>.jpg`` (plus one level of subfolders) or a zip of images."""
    if isinstance(src, ImageSource):
        return src
    path = Path(src).expanduser()
    if not path.exists():
        raise MissingImagesError(
            f"image source {path} does not exist",
            "pass --images pointing at a folder of <id>.jpg files or at GQA's images.zip",
        )
    if path.is_dir():
        source: ImageSource = FolderImages(path)
    elif path.suffix.lower() == ".zip" or zipfile.is_zipfile(path):
        source = ZipImages(path)
    else:
        raise InputFormatError(
            f"image source {path} is neither a folder nor a zip file",
            "pass --images pointing at a folder of <id>.jpg files or at a .zip such as GQA's images.zip",
        )
    if len(source) == 0:
        source.close()
        raise MissingImagesError(
            f"no image files ({', '.join(IMAGE_SUFFIXES)}) found in {path} or its direct subfolders",
            "point --images at the folder or zip that contains the <id>.jpg files",
        )
    return source
