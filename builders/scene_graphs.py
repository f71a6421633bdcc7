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

    def decode(self, image_id: str | None = None):
        """Decode one JSON value at the cursor, reading more text while it is incomplete."""
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                incomplete = exc.pos >= len(self.text) - _MARGIN or exc.msg.startswith("Unterminated string")
                if not self.eof and incomplete:
                    self.fill()
                    continue
                raise self.error(exc.msg, exc.pos, image_id) from None
            self.pos = end
            return value


def iter_scene_graphs(path: str | os.PathLike, *, hasher=None, chunk: int = CHUNK) -> Iterator[tuple[str, object]]:
    """Yield ``(image_id, record)`` one image at a time from a GQA scene-graph JSON file.

    ``hasher`` (e.g. ``hashlib.sha256()``) is fed the file's bytes as they are read.
    Raises InputFormatError naming the file, byte offset and image id on malformed JSON.
    """
    path = Path(path)
    if not path.is_file():
        raise InputFormatError(f"scene-graph file {path} does not exist",
                               "pass GQA's train_sceneGraphs.json / val_sceneGraphs.json (see `metashift-hf download`)")
    with open(path, "rb") as f:
        buf = _Buffer(f, path, hasher, chunk)
        c = buf.next_char()
        if c == "\ufeff":  # tolerate a UTF-8 byte-order mark
            buf.pos += 1
            c = buf.next_char()
        if c != "{":
            raise buf.error("expected '{' at the start (a JSON object of imageId -> scene graph)")
        buf.pos += 1
        image_id = None
        first = True
        while True:
            c = buf.next_char()
            if c == "}":
                buf.pos += 1
                break
            if not first:
                if c != ",":
                    raise buf.error("expected ',' or '}' after an image" if c else "file ends inside the top-level object",
                                    image_id=image_id)
                buf.pos += 1
                c = buf.next_char()
            if c != '"':
                raise buf.error("expected an image id string" if c else "file ends inside the top-level object",
                                image_id=image_id)
            image_id = buf.decode(image_id)
            if buf.next_char() != ":":
                raise buf.error("expected ':' after the image id", image_id=image_id)
            buf.pos += 1
            buf.next_char()
            record = buf.decode(image_id)
            first = False
            yield image_id, record
        if buf.next_char() != "":
            raise buf.error("extra data after the top-level object")


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

    def code(self, word: str) -> int:
        try:
            return self.vocab.index(word)
        except ValueError:
            return -1


def _missing(path: Path, image_id: str, what: str, fix: str = "") -> InputFormatError:
    return InputFormatError(
        f"{path}: image {image_id!r}: {what}",
        fix or "the file does not follow the GQA scene-graph format "
               "({imageId: {width, height, location?, weather?, objects: {objectId: {name, x, y, w, h, "
               "attributes: [str], relations: [{name, object}]}}}}); fix or regenerate it",
    )


_META_BATCH = 8192


def read_scene_graphs(paths: Sequence[str | os.PathLike], *, keep_meta: bool = True) -> SceneGraphTable:
    """Read and validate GQA scene-graph files into a SceneGraphTable (one pass per file)."""
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

    attr_ok = {w: True for w in ATTRIBUTE_CATEGORY}
    image_ids: list[str] = []
    seen: dict[str, str] = {}
    obj_counts, obj_names = array.array("i"), array.array("i")
    rel_counts, rel_s, rel_t = array.array("i"), array.array("i"), array.array("i")
    attr_counts, attr_o, attr_w = array.array("i"), array.array("i"), array.array("i")
    loc_codes, wea_codes = array.array("i"), array.array("i")
    meta_batches: list[pa.RecordBatch] = []
    m_ids, m_w, m_h, m_loc, m_wea, m_obj = [], [], [], [], [], []
    digests = []
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    def flush_meta() -> None:
        if m_ids:
            meta_batches.append(pa.record_batch(
                [pa.array(m_ids, pa.string()), pa.array(m_w, pa.int64()), pa.array(m_h, pa.int64()),
                 pa.array(m_loc, pa.string()), pa.array(m_wea, pa.string()), pa.array(m_obj, pa.string())],
                names=["image_id", "width", "height", "location", "weather", "objects"]))
            for lst in (m_ids, m_w, m_h, m_loc, m_wea, m_obj):
                lst.clear()

    for p in paths:
        path = Path(p)
        hasher = hashlib.sha256()
        for image_id, rec in iter_scene_graphs(path, hasher=hasher):
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
            local: dict[str, int] = {}
            for oid, o in objects.items():
                try:
                    name = o["name"]
                except (KeyError, TypeError):
                    raise _missing(path, image_id, f"object {oid!r} has no 'name'") from None
                c = codes.get(name)
                if c is None:
                    c = word_code(name, path, image_id, f"object {oid!r} 'name'")
                local[oid] = c
                obj_names.append(c)
            n_rel = n_attr = 0
            for oid, o in objects.items():
                c = local[oid]
                try:
                    rels = o["relations"]
                    attrs = o["attributes"]
                except KeyError as exc:
                    raise _missing(path, image_id, f"object {oid!r} has no {exc.args[0]!r}") from None
                r = None
                try:
                    for r in rels:
                        rel_t.append(local[r["object"]])
                        rel_s.append(c)
                except (KeyError, TypeError) as exc:
                    if isinstance(r, dict) and "object" in r:
                        raise _missing(
                            path, image_id,
                            f"object {oid!r} has relation {r.get('name')!r} pointing to object {r['object']!r}, "
                            "which is not in this image's objects",
                            "every relation's 'object' must be an object id of the same image; fix or regenerate "
                            "the file",
                        ) from None
                    raise _missing(path, image_id, f"object {oid!r} 'relations' entry {r!r} is not "
                                   "{name, object}") from None
                n_rel += len(rels)
                if type(attrs) is not list:
                    raise _missing(path, image_id, f"object {oid!r} 'attributes' is not a list")
                for a in attrs:
                    if a in attr_ok:
                        attr_o.append(c)
                        attr_w.append(codes.get(a) if a in codes else word_code(a, path, image_id, "attribute"))
                        n_attr += 1
            obj_counts.append(len(objects))
            rel_counts.append(n_rel)
            attr_counts.append(n_attr)
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
                m_obj.append(dumps(objects))
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
