"""Streaming reader of GQA scene-graph JSON and its extraction into integer-coded arrays.

``train_sceneGraphs.json`` is one ~400 MB JSON object ``{imageId: {...}, ...}``. We never
``json.load`` it: a rolling text buffer is walked key by key and each image's value is decoded
alone with ``json.JSONDecoder.raw_decode``, so only one image is a Python object at a time.
Extraction then turns names into integer codes in compact ``array`` buffers for numpy.
"""

from __future__ import annotations

import array
import codecs
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from metashift_hf.core.errors import InputFormatError, short_repr
from metashift_hf.core.fsutil import sha256_file
from metashift_hf.core.names import control_char, terminal_safe, usable_image_id

from .ontology import ATTRIBUTE_CATEGORY


_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
CHUNK = 1 << 22
# A decode error this far before the buffer end cannot be caused by the buffer ending there.
_MARGIN = 1 << 16
_FIX_JSON = (
    "the file is damaged or truncated: re-download/re-extract it (GQA sceneGraphs.zip), or check the "
    "generator that wrote it"
)


class _Buffer:
    """Rolling UTF-8 text window over a binary file, tracking byte offsets for error messages."""

    def __init__(self, f, path: Path, hasher, chunk: int, fix: str = _FIX_JSON) -> None:
        self.f, self.path, self.hasher, self.chunk = f, path, hasher, chunk
        self.fix = fix  # what to do about a damaged file: each format names its own download
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0  # index into text
        self.base = 0  # byte offset of text[0] in the file
        self.eof = False
        self.key_pos = 0  # index of the last key's opening quote (kept valid across refills)

    def fill(self) -> bool:
        """Read one more chunk (dropping consumed text); False at end of file."""
        if self.eof:
            return False
        data = self.f.read(self.chunk)
        if self.hasher is not None and data:
            self.hasher.update(data)
        try:
            more = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            raise InputFormatError(
                f"{self.path}: not UTF-8 text near byte {self.base + len(self.text[: self.pos].encode()) + exc.start}",
                self.fix,
            ) from None
        if not data:
            self.eof = True
        if self.pos:
            done = self.text[: self.pos]
            self.base += len(done) if done.isascii() else len(done.encode("utf-8"))
            self.text = self.text[self.pos :]
            self.key_pos -= self.pos
            self.pos = 0
        self.text += more
        return bool(data)

    def byte_offset(self, pos: int) -> int:
        head = self.text[:pos]
        return self.base + (len(head) if head.isascii() else len(head.encode("utf-8")))

    def next_char(self) -> str:
        """The next non-whitespace character (not consumed); '' at end of file."""
        text, pos = self.text, self.pos
        if pos < len(text) and text[pos] not in " \t\n\r":  # compact JSON: the common case
            return text[pos]
        while True:
            self.pos = _WS.match(self.text, self.pos).end()
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.fill():
                return ""

    def error(self, what: str, pos: int | None = None, image_id: str | None = None) -> InputFormatError:
        where = f" (image {image_id!r})" if image_id is not None else ""
        off = self.byte_offset(self.pos if pos is None else pos)
        return InputFormatError(f"{self.path}: malformed JSON at byte {off}{where}: {what}", self.fix)

    def decode(self, image_id: str | None = None, raw: bool = False):
        """Decode one JSON value at the cursor, reading more text while it is incomplete.
        With ``raw`` also return the value's original text."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                incomplete = exc.pos >= len(self.text) - _MARGIN or exc.msg.startswith("Unterminated string")
                if not self.eof and incomplete:
                    self.fill()
                    continue
                raise self.error(exc.msg, exc.pos, image_id) from None
            except RecursionError:
                raise self.error("a value nested too deeply", None, image_id) from None
            except ValueError as exc:  # e.g. an integer of more digits than Python converts
                raise self.error(str(exc).split(";")[0][:200], None, image_id) from None
            if end == len(self.text) and not self.eof:  # a number cut by the buffer end decodes short
                self.fill()
                continue
            text = self.text[self.pos : end] if raw else None
            self.pos = end
            return (value, text) if raw else value

    def next_member(self, close: str, first: bool, what: str, image_id: str | None = None) -> str:
        """Inside an object or array: '' (consumed) at ``close``, else the first character of the
        next member, after its ',' separator when it is not the first."""
        c = self.next_char()
        if c == close:
            self.pos += 1
            return ""
        if not first:
            if c != ",":
                raise self.error(
                    f"expected ',' or '{close}' in {what}" if c else f"file ends inside {what}", image_id=image_id
                )
            self.pos += 1
            c = self.next_char()
        return c

    def keys(self, image_id: str | None, what: str, opened: bool = False) -> Iterator[str]:
        """Walk the JSON object at the cursor, yielding each key with the cursor on its value;
        the caller decodes the value before asking for the next key. ``opened``: the cursor is
        already inside the object, on its first (or next) key."""
        if not opened:
            if self.next_char() != "{":
                raise self.error(f"expected '{{' ({what})", image_id=image_id)
            self.pos += 1
        first = True
        while True:
            c = self.next_member("}", first, what, image_id)
            if not c:
                return
            if c != '"':
                raise self.error(
                    f"expected a key string in {what}" if c else f"file ends inside {what}", image_id=image_id
                )
            self.key_pos = self.pos
            key = self.decode(image_id)
            if self.next_char() != ":":
                raise self.error(f"expected ':' after key {key!r} in {what}", image_id=image_id)
            self.pos += 1
            self.next_char()
            first = False
            yield key


def _records(
    path: Path, hasher, chunk: int, start: int = 0, stop: tuple[int, str] | None = None, state: dict | None = None
) -> Iterator[tuple[str, object, str | None]]:
    """(image_id, record, original text of its 'objects' value) for each image of the file.

    ``start``: byte offset of a top-level key to begin at (a split point) instead of the file start.
    ``stop``: (byte offset, image id) of a split point; reaching exactly that key ends the walk and
    sets ``state['stopped']``.
    """
    with open(path, "rb") as f:
        buf = _Buffer(f, path, hasher, chunk)
        if start:
            f.seek(start)
            buf.base = start
        elif buf.next_char() == "\ufeff":  # tolerate a UTF-8 byte-order mark
            buf.pos += 1
        for image_id in buf.keys(None, "the top-level object (imageId -> scene graph)", opened=bool(start)):
            if stop is not None and image_id == stop[1] and buf.byte_offset(buf.key_pos) == stop[0]:
                state["stopped"] = True
                return
            if buf.next_char() != "{":
                yield image_id, buf.decode(image_id), None  # not an object: the caller reports it
                continue
            record: dict = {}
            raw_objects = None
            for key in buf.keys(image_id, f"the scene graph of image {image_id!r}"):
                if key == "objects":
                    record[key], raw_objects = buf.decode(image_id, raw=True)
                else:
                    record[key] = buf.decode(image_id)
            yield image_id, record, raw_objects
        if buf.next_char() != "":
            raise buf.error("extra data after the top-level object")


def iter_scene_graphs(path: str | os.PathLike, *, hasher=None, chunk: int = CHUNK) -> Iterator[tuple[str, object]]:
    """Yield ``(image_id, record)`` one image at a time from a GQA scene-graph JSON file.

    ``hasher`` (e.g. ``hashlib.sha256()``) is fed the file's bytes as they are read.
    Raises InputFormatError naming the file, byte offset and image id on malformed JSON.
    """
    for image_id, record, _ in _records(_existing(path), hasher, chunk):
        yield image_id, record


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(
            f"scene-graph file {path} does not exist",
            "pass GQA's train_sceneGraphs.json / val_sceneGraphs.json (see `metashift-hf download`)",
        )
    return path


@dataclass
class SceneGraphTable:
    """Everything the subset stage needs, as integer codes (images in reading order)."""

    files: list[str]
    image_ids: list[str]  # reading order
    vocab: list[str]  # object names, attribute words and general words share one code space
    obj_counts: np.ndarray  # objects per image
    obj_names: np.ndarray  # name code per object
    rel_counts: np.ndarray  # relations per image
    rel_subjects: np.ndarray  # name code of the object that has the relation
    rel_targets: np.ndarray  # name code of the object it points to
    attr_counts: np.ndarray  # ontology attributes per image
    attr_objects: np.ndarray  # name code of the object
    attr_words: np.ndarray  # code of the attribute word
    location: np.ndarray  # code per image or -1
    weather: np.ndarray  # code per image or -1
    sha256: list[str] = field(default_factory=list)
    meta: pa.Table | None = None  # images.parquet rows (reading order)


def _missing(path: Path, image_id: str, what: str, fix: str = "") -> InputFormatError:
    return InputFormatError(
        f"{path}: image {image_id!r}: {what}",
        fix
        or "the file does not follow the GQA scene-graph format "
        "({imageId: {width, height, location?, weather?, objects: {objectId: {name, x, y, w, h, "
        "attributes: [str], relations: [{name, object}]}}}}); fix or regenerate it",
    )


MAX_SIDE = 1_000_000  # pixels: far above any photograph, and well inside int64
_META_BATCH = 8192


def _explain(path: Path, image_id: str, objects: dict) -> InputFormatError:
    """Slow path: find the first malformed object/relation of an image and say what is wrong."""
    for oid, o in objects.items():
        if type(o) is not dict:
            return _missing(path, image_id, f"object {oid!r} is a {type(o).__name__}, expected an object")
        for key in ("name", "attributes", "relations"):
            if key not in o:
                return _missing(path, image_id, f"object {oid!r} has no {key!r}")
        for key in ("attributes", "relations"):
            if type(o[key]) is not list:
                return _missing(
                    path, image_id, f"object {oid!r} {key!r} is a {type(o[key]).__name__}, expected a list"
                )
        for r in o["relations"]:
            if type(r) is not dict or "object" not in r:
                return _missing(path, image_id, f"object {oid!r} has relation {short_repr(r)} without an 'object'")
            if type(r["object"]) is not str:
                return _missing(
                    path,
                    image_id,
                    f"object {oid!r} has relation {short_repr(r.get('name'))} whose 'object' is "
                    f"a {type(r['object']).__name__}, expected an object id string",
                )
            if r["object"] not in objects:
                return _missing(
                    path,
                    image_id,
                    f"object {oid!r} has relation {r.get('name')!r} pointing to object {r['object']!r}, "
                    "which is not in this image's objects",
                    "every relation's 'object' must be an object id of the same image; fix or regenerate the file",
                )
        for a in o["attributes"]:
            if type(a) is not str:
                return _missing(path, image_id, f"object {oid!r} has attribute {short_repr(a)}, expected a string")
    return _missing(path, image_id, "malformed objects")


class _Extractor:
    """Accumulates integer-coded arrays over images; one per process when a file is split."""

    def __init__(self, keep_meta: bool) -> None:
        self.keep_meta = keep_meta
        self.vocab: list[str] = []
        self.codes: dict[str, int] = {}
        self.seen: dict[str, str] = {}  # image id -> file (duplicates across files)
        self.image_ids: list[str] = []
        a = lambda: array.array("i")  # noqa: E731
        self.obj_counts, self.obj_names = a(), a()
        self.rel_counts, self.rel_s, self.rel_t = a(), a(), a()
        self.attr_counts, self.attr_o, self.attr_w = a(), a(), a()
        self.loc, self.wea = a(), a()
        self.meta_batches: list[pa.RecordBatch] = []
        self._m: list[list] = [[] for _ in IMAGES_COLUMNS]
        # ontology attribute words get codes up front so the hot loop is a plain dict lookup
        self.attr_code = {w: self.word_code(w, Path("-"), "-", "attribute") for w in sorted(ATTRIBUTE_CATEGORY)}

    def word_code(self, word, path: Path, image_id: str, where: str) -> int:
        c = self.codes.get(word) if type(word) is str else None
        if c is None:
            if not isinstance(word, str) or not word.strip() or word != word.strip() or "(" in word or ")" in word:
                raise _missing(
                    path,
                    image_id,
                    f"{where} is {word!r}, which cannot be part of a subset name",
                    "names must be non-empty strings without parentheses or surrounding spaces",
                )
            bad = control_char(word)  # once per new word: 'so fa' and 'so\u00a0fa' would print alike (D9)
            if bad is not None:
                raise _missing(
                    path,
                    image_id,
                    f"{where} is '{terminal_safe(word)[:80]}', which holds the invisible, control or look-alike space "
                    f"character {terminal_safe(bad)}",
                    "write names with plain letters, digits, punctuation and ' ' as the only space",
                )
            c = self.codes[word] = len(self.vocab)
            self.vocab.append(word)
        return c

    def flush_meta(self) -> None:
        if self._m[0]:
            types = [pa.string(), pa.int64(), pa.int64(), pa.string(), pa.string(), pa.string()]
            self.meta_batches.append(
                pa.record_batch([pa.array(col, t) for col, t in zip(self._m, types)], names=list(IMAGES_COLUMNS))
            )
            for col in self._m:
                col.clear()

    def read(self, path: Path, hasher=None, start: int = 0, stop: tuple[int, str] | None = None) -> bool:
        """Add the images of one file (or of its part from ``start``/up to ``stop``); True when the
        walk ended exactly at ``stop``.

        Per image the common case runs as a few list comprehensions; any exception falls back to a
        slow validator that names the image, object and key that are wrong.
        """
        state = {"stopped": False}
        codes, attr_code, word_code = self.codes, self.attr_code, self.word_code
        for image_id, rec, raw_objects in _records(path, hasher, CHUNK, start, stop, state):
            if image_id in self.seen:
                raise InputFormatError(
                    f"image {image_id!r} appears twice: in {self.seen[image_id]} and {path}",
                    "pass each scene-graph file once (GQA train and val files are disjoint)",
                )
            self.seen[image_id] = str(path)
            if not usable_image_id(image_id):
                raise _missing(
                    path,
                    image_id,
                    "the image id is empty, padded with spaces or holds a path character",
                    "image ids name files (<id>.jpg): use GQA ids such as '2375429'",
                )
            if type(rec) is not dict:
                raise _missing(path, image_id, f"scene graph is a {type(rec).__name__}, expected an object")
            try:
                objects = rec["objects"]
                width = rec["width"]
                height = rec["height"]
            except KeyError as exc:
                raise _missing(path, image_id, f"missing key {exc.args[0]!r}") from None
            if type(objects) is not dict:
                raise _missing(path, image_id, f"'objects' is a {type(objects).__name__}, expected an object")
            for key, v in (("width", width), ("height", height)):
                if type(v) is not int or not 0 < v <= MAX_SIDE:
                    raise _missing(
                        path, image_id, f"{key!r} is {short_repr(v)}, expected an integer from 1 to {MAX_SIDE:,}"
                    )
            objs = list(objects.values())
            try:
                names = [codes[o["name"]] for o in objs]
            except (KeyError, TypeError):
                names = []
                for oid, o in objects.items():
                    if type(o) is not dict or "name" not in o:
                        raise _explain(path, image_id, objects) from None
                    names.append(word_code(o["name"], path, image_id, f"object {oid!r} 'name'"))
            local = dict(zip(objects, names))
            try:
                rels = [o["relations"] for o in objs]
                attrs = [o["attributes"] for o in objs]
                if {*map(type, rels), *map(type, attrs)} - {list}:
                    raise TypeError
                targets = [local[r["object"]] for rl in rels for r in rl]
                a_pairs = [(c, attr_code[a]) for al, c in zip(attrs, names) for a in al if a in attr_code]
            except (KeyError, TypeError):
                raise _explain(path, image_id, objects) from None
            self.obj_names.extend(names)
            self.rel_t.extend(targets)
            self.rel_s.extend([c for rl, c in zip(rels, names) for _ in rl])
            self.attr_o.extend([c for c, _ in a_pairs])
            self.attr_w.extend([w for _, w in a_pairs])
            self.obj_counts.append(len(objs))
            self.rel_counts.append(len(targets))
            self.attr_counts.append(len(a_pairs))
            loc = rec.get("location")
            wea = rec.get("weather")
            self.loc.append(-1 if loc is None else word_code(loc, path, image_id, "'location'"))
            self.wea.append(-1 if wea is None else word_code(wea, path, image_id, "'weather'"))
            self.image_ids.append(image_id)
            if self.keep_meta:
                # objects: the file's own text of the value, nothing re-encoded
                for col, v in zip(self._m, (image_id, width, height, loc, wea, raw_objects)):
                    col.append(v)
                if len(self._m[0]) >= _META_BATCH:
                    self.flush_meta()
        self.flush_meta()
        return state["stopped"]

    def merge(self, tail: "_Extractor", path: Path) -> None:
        """Append the images another process read from the rest of the same file (codes remapped)."""
        twice = next((i for i in tail.image_ids if i in self.seen), None)
        if twice is not None:
            raise InputFormatError(
                f"image {twice!r} appears twice in {path} (or in it and {self.seen[twice]})",
                "pass each scene-graph file once; fix or regenerate the file",
            )
        lut = np.asarray([self.word_code(w, path, "-", "name") for w in tail.vocab] + [-1], dtype=np.int32)

        def remap(arr: array.array) -> array.array:
            return array.array("i", lut[np.frombuffer(arr, dtype=np.int32)].tobytes()) if len(arr) else arr

        for name in ("obj_names", "rel_s", "rel_t", "attr_o", "attr_w", "loc", "wea"):
            getattr(self, name).extend(remap(getattr(tail, name)))  # -1 (no location) maps to lut[-1] = -1
        for name in ("obj_counts", "rel_counts", "attr_counts"):
            getattr(self, name).extend(getattr(tail, name))
        self.image_ids.extend(tail.image_ids)
        self.seen.update(dict.fromkeys(tail.image_ids, str(path)))
        self.meta_batches.extend(tail.meta_batches)

    def table(self, files: list[str], digests: list[str]) -> "SceneGraphTable":
        def np_(a: array.array) -> np.ndarray:
            return np.frombuffer(a, dtype=np.int32).astype(np.int64) if len(a) else np.zeros(0, dtype=np.int64)

        return SceneGraphTable(
            files=files,
            image_ids=self.image_ids,
            vocab=self.vocab,
            obj_counts=np_(self.obj_counts),
            obj_names=np_(self.obj_names),
            rel_counts=np_(self.rel_counts),
            rel_subjects=np_(self.rel_s),
            rel_targets=np_(self.rel_t),
            attr_counts=np_(self.attr_counts),
            attr_objects=np_(self.attr_o),
            attr_words=np_(self.attr_w),
            location=np_(self.loc),
            weather=np_(self.wea),
            sha256=digests,
            meta=pa.Table.from_batches(self.meta_batches) if self.meta_batches else None,
        )


IMAGES_COLUMNS = ("image_id", "width", "height", "location", "weather", "objects")
# Files at least this large are read by two processes (the second from a verified split point).
SPLIT_MIN_BYTES = 64 << 20
_SPLIT_KEY = re.compile(
    rb'[}\]][ \t\n\r]*,[ \t\n\r]*("(?:[^"\\]|\\.){1,200}")[ \t\n\r]*:[ \t\n\r]*\{[ \t\n\r]*'
    rb'"(?:width|height|objects|location|weather)"'
)


def _split_point(path: Path) -> tuple[int, str] | None:
    """A likely top-level key near the middle of the file: a key whose value starts with an image
    field (width/height/objects/location/weather). Object and relation keys never do, so this is
    almost always right; the first reader verifies it exactly before the halves are joined."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(size // 2)
        window = f.read(4 << 20)
    m = _SPLIT_KEY.search(window)
    if m is None:
        return None
    try:
        image_id = json.loads(m.group(1))
    except ValueError:
        return None
    return size // 2 + m.start(1), image_id


def _read_tail(conn, path: str, offset: int, keep_meta: bool) -> None:
    """Child process: read the file from ``offset`` to the end; send the extractor or the error."""
    try:
        ex = _Extractor(keep_meta)
        ex.read(Path(path), start=offset)
        conn.send(("ok", ex))
    except InputFormatError as exc:
        conn.send(("error", (exc.what, exc.fix)))
    except BaseException as exc:  # report anything else instead of dying silently
        conn.send(("error", (f"{path}: reading from byte {offset} failed: {type(exc).__name__}: {exc}", "")))
    finally:
        conn.close()


def _hash_file(path: Path, out: dict) -> None:
    out["sha256"] = sha256_file(path)


def _read_split(ex: _Extractor, path: Path, split: tuple[int, str]) -> str:
    """Read ``path`` with a second process doing the part after ``split``; returns its sha256."""
    import multiprocessing
    import threading

    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold pyarrow/BLAS threads
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_read_tail, args=(child, str(path), split[0], ex.keep_meta), daemon=True)
    proc.start()
    child.close()
    digest: dict = {}
    hasher = threading.Thread(target=_hash_file, args=(path, digest))  # hashlib releases the GIL
    hasher.start()
    try:
        if ex.read(path, stop=split):
            try:
                status, payload = parent.recv()
            except EOFError:  # the child died (e.g. killed): read its part here instead
                ex.read(path, start=split[0])
            else:
                if status == "error":
                    raise InputFormatError(*payload)
                ex.merge(payload, path)
        # else: the guess was not a top-level key; this process has read the whole file itself
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join()
        parent.close()
        hasher.join()
    return digest["sha256"]


def default_workers() -> int:
    """2 on a machine with 2+ cores, else 1 (what the command line uses)."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def read_scene_graphs(
    paths: Sequence[str | os.PathLike], *, keep_meta: bool = True, workers: int = 1
) -> SceneGraphTable:
    """Read and validate GQA scene-graph files into a SceneGraphTable (streaming, one image at a time).

    With ``workers`` >= 2 a file of at least SPLIT_MIN_BYTES is read by two processes, split at a
    verified image boundary; the result is identical to the sequential read. The second process is
    started with 'spawn', which re-imports the caller's main script: library callers opt in (and
    need the usual ``if __name__ == "__main__":`` guard); the command line uses 2 by default.
    """
    ex = _Extractor(keep_meta)
    digests = []
    for p in paths:
        path = _existing(p)
        split = _split_point(path) if workers >= 2 and path.stat().st_size >= SPLIT_MIN_BYTES else None
        if split is None:
            hasher = hashlib.sha256()
            ex.read(path, hasher)
            digests.append(hasher.hexdigest())
        else:
            digests.append(_read_split(ex, path, split))
    return ex.table([str(p) for p in paths], digests)
