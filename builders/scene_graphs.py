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

from metashift_hf.errors import InputFormatError

from .subsets import ATTRIBUTE_CATEGORY

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
CHUNK = 1 << 22
# A decode error this far before the buffer end cannot be caused by the buffer ending there.
_MARGIN = 1 << 16
_FIX_JSON = ("the file is damaged or truncated: re-download/re-extract it (GQA sceneGraphs.zip), or check the "
             "generator that wrote it")


class _Buffer:
    """Rolling UTF-8 text window over a binary file, tracking byte offsets for error messages."""

    def __init__(self, f, path: Path, hasher, chunk: int) -> None:
        self.f, self.path, self.hasher, self.chunk = f, path, hasher, chunk
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0  # index into text
        self.base = 0  # byte offset of text[0] in the file
        self.eof = False

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
                f"{self.path}: not UTF-8 text near byte {self.base + len(self.text[:self.pos].encode()) + exc.start}",
                _FIX_JSON,
            ) from None
        if not data:
            self.eof = True
        if self.pos:
            done = self.text[: self.pos]
            self.base += len(done) if done.isascii() else len(done.encode("utf-8"))
            self.text = self.text[self.pos:]
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
        return InputFormatError(f"{self.path}: malformed JSON at byte {off}{where}: {what}", _FIX_JSON)

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
            if end == len(self.text) and not self.eof:  # a number cut by the buffer end decodes short
                self.fill()
                continue
            text = self.text[self.pos:end] if raw else None
            self.pos = end
            return (value, text) if raw else value

    def keys(self, image_id: str | None, what: str) -> Iterator[str]:
        """Walk the JSON object at the cursor, yielding each key with the cursor on its value;
        the caller decodes the value before asking for the next key."""
        if self.next_char() != "{":
            raise self.error(f"expected '{{' ({what})", image_id=image_id)
        self.pos += 1
        first = True
        while True:
            c = self.next_char()
            if c == "}":
                self.pos += 1
                return
            if not first:
                if c != ",":
                    raise self.error(f"expected ',' or '}}' in {what}" if c else f"file ends inside {what}",
                                     image_id=image_id)
                self.pos += 1
                c = self.next_char()
            if c != '"':
                raise self.error(f"expected a key string in {what}" if c else f"file ends inside {what}",
                                 image_id=image_id)
            key = self.decode(image_id)
            if self.next_char() != ":":
                raise self.error(f"expected ':' after key {key!r} in {what}", image_id=image_id)
            self.pos += 1
            self.next_char()
            first = False
            yield key


def _records(path: Path, hasher, chunk: int) -> Iterator[tuple[str, object, str | None]]:
    """(image_id, record, original text of its 'objects' value) for each image of the file."""
    with open(path, "rb") as f:
        buf = _Buffer(f, path, hasher, chunk)
        if buf.next_char() == "\ufeff":  # tolerate a UTF-8 byte-order mark
            buf.pos += 1
        for image_id in buf.keys(None, "the top-level object (imageId -> scene graph)"):
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
        raise InputFormatError(f"scene-graph file {path} does not exist",
                               "pass GQA's train_sceneGraphs.json / val_sceneGraphs.json (see `metashift-hf download`)")
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
        fix or "the file does not follow the GQA scene-graph format "
               "({imageId: {width, height, location?, weather?, objects: {objectId: {name, x, y, w, h, "
               "attributes: [str], relations: [{name, object}]}}}}); fix or regenerate it",
    )


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
                return _missing(path, image_id, f"object {oid!r} {key!r} is a {type(o[key]).__name__}, expected a list")
        for r in o["relations"]:
            if type(r) is not dict or "object" not in r:
                return _missing(path, image_id, f"object {oid!r} has relation {r!r} without an 'object'")
            if r["object"] not in objects:
                return _missing(
                    path, image_id,
                    f"object {oid!r} has relation {r.get('name')!r} pointing to object {r['object']!r}, "
                    "which is not in this image's objects",
                    "every relation's 'object' must be an object id of the same image; fix or regenerate the file",
                )
        for a in o["attributes"]:
            if type(a) is not str:
                return _missing(path, image_id, f"object {oid!r} has attribute {a!r}, expected a string")
    return _missing(path, image_id, "malformed objects")


def read_scene_graphs(paths: Sequence[str | os.PathLike], *, keep_meta: bool = True) -> SceneGraphTable:
    """Read and validate GQA scene-graph files into a SceneGraphTable (one streaming pass per file).

    Per image, the common case runs as a few list comprehensions; any exception falls back to a
    slow validator that names the image, object and key that are wrong.
    """
    vocab: list[str] = []
    codes: dict[str, int] = {}

    def word_code(word, path: Path, image_id: str, where: str) -> int:
        c = codes.get(word)
        if c is None:
            if not isinstance(word, str) or not word.strip() or word != word.strip() or "(" in word or ")" in word:
                raise _missing(path, image_id, f"{where} is {word!r}, which cannot be part of a subset name",
                               "names must be non-empty strings without parentheses or surrounding spaces")
            c = codes[word] = len(vocab)
            vocab.append(word)
        return c

    # ontology attribute words get codes up front so the hot loop is a plain dict lookup
    attr_code = {w: word_code(w, Path("-"), "-", "attribute") for w in sorted(ATTRIBUTE_CATEGORY)}
    image_ids: list[str] = []
    seen: dict[str, str] = {}
    obj_counts, obj_names = array.array("i"), array.array("i")
    rel_counts, rel_s, rel_t = array.array("i"), array.array("i"), array.array("i")
    attr_counts, attr_o, attr_w = array.array("i"), array.array("i"), array.array("i")
    loc_codes, wea_codes = array.array("i"), array.array("i")
    meta_batches: list[pa.RecordBatch] = []
    m_ids, m_w, m_h, m_loc, m_wea, m_obj = [], [], [], [], [], []
    digests = []

    def flush_meta() -> None:
        if m_ids:
            meta_batches.append(pa.record_batch(
                [pa.array(m_ids, pa.string()), pa.array(m_w, pa.int64()), pa.array(m_h, pa.int64()),
                 pa.array(m_loc, pa.string()), pa.array(m_wea, pa.string()), pa.array(m_obj, pa.string())],
                names=["image_id", "width", "height", "location", "weather", "objects"]))
            for lst in (m_ids, m_w, m_h, m_loc, m_wea, m_obj):
                lst.clear()

    for p in paths:
        path = _existing(p)
        hasher = hashlib.sha256()
        for image_id, rec, raw_objects in _records(path, hasher, CHUNK):
            if image_id in seen:
                raise InputFormatError(
                    f"image {image_id!r} appears twice: in {seen[image_id]} and {path}",
                    "pass each scene-graph file once (GQA train and val files are disjoint)",
                )
            seen[image_id] = str(path)
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
                if type(v) is not int or v <= 0:
                    raise _missing(path, image_id, f"{key!r} is {v!r}, expected a positive integer")
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
                if not all(type(x) is list for x in rels) or not all(type(x) is list for x in attrs):
                    raise TypeError
                targets = [local[r["object"]] for rl in rels for r in rl]
                a_pairs = [(c, attr_code[a]) for al, c in zip(attrs, names) for a in al if a in attr_code]
            except (KeyError, TypeError):
                raise _explain(path, image_id, objects) from None
            obj_names.extend(names)
            rel_t.extend(targets)
            rel_s.extend([c for rl, c in zip(rels, names) for _ in rl])
            attr_o.extend([c for c, _ in a_pairs])
            attr_w.extend([w for _, w in a_pairs])
            obj_counts.append(len(objs))
            rel_counts.append(len(targets))
            attr_counts.append(len(a_pairs))
            loc = rec.get("location")
            wea = rec.get("weather")
            loc_codes.append(-1 if loc is None else word_code(loc, path, image_id, "'location'"))
            wea_codes.append(-1 if wea is None else word_code(wea, path, image_id, "'weather'"))
            image_ids.append(image_id)
            if keep_meta:
                m_ids.append(image_id)
                m_w.append(width)
                m_h.append(height)
                m_loc.append(loc)
                m_wea.append(wea)
                m_obj.append(raw_objects)  # the file's own text of the objects: nothing re-encoded
                if len(m_ids) >= _META_BATCH:
                    flush_meta()
        digests.append(hasher.hexdigest())
    flush_meta()

    def np_(a: array.array) -> np.ndarray:
        return np.frombuffer(a, dtype=np.int32).astype(np.int64) if len(a) else np.zeros(0, dtype=np.int64)

    meta = pa.Table.from_batches(meta_batches) if meta_batches else None
    return SceneGraphTable(
        files=[str(p) for p in paths], image_ids=image_ids, vocab=vocab,
        obj_counts=np_(obj_counts), obj_names=np_(obj_names), rel_counts=np_(rel_counts),
        rel_subjects=np_(rel_s), rel_targets=np_(rel_t), attr_counts=np_(attr_counts),
        attr_objects=np_(attr_o), attr_words=np_(attr_w), location=np_(loc_codes), weather=np_(wea_codes),
        sha256=digests, meta=meta,
    )
