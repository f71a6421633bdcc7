"""The artifact folder written by ``metashift-hf build``: table writer and the one reader.

Layout and columns are the contract in DEVELOPERS.md. Tables are written with fixed parquet
settings and sorted rows so the same inputs give byte-identical files (and the same content hash).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metashift_hf.core.errors import (
    InputFormatError,
    MetashiftError,
    UnknownNameError,
    did_you_mean,
)
from metashift_hf.core.fsutil import PARQUET_ROW_GROUP, hash_file, sha256_file, write_parquet_groups
from metashift_hf.core.options import OptionError
from metashift_hf.core.options import names as names_option
from metashift_hf.core.options import path as path_option
from metashift_hf.core.options import text as text_option
from metashift_hf.core.provenance import SourceInfo

from . import distances, metagraph
from .build_options import BuildOptions
from .distances import Distance, DistanceMatrix
from .jsontypes import decode, encode
from .metagraph import ClassAnalysis
from .subsets import CandidateSubsets, parse_subset_name


FORMAT = "metashift-hf-artifact"
FORMAT_VERSION = 1
ARTIFACT_KIND = "artifact"  # the marker kind of a build --out folder (core.fsutil)
TABLES = ("subsets", "membership", "classes", "edges", "embeddings", "distances", "images")

SUBSETS_SCHEMA = pa.schema(
    [
        ("subset", pa.string()),
        ("subject", pa.string()),
        ("context", pa.string()),
        ("kind", pa.string()),
        ("category", pa.string()),
        ("n_images", pa.int64()),
        ("kept", pa.bool_()),
        ("community", pa.int64()),
    ]
)
MEMBERSHIP_SCHEMA = pa.schema([("subset", pa.string()), ("image_id", pa.string())])
CLASSES_SCHEMA = pa.schema(
    [
        ("subject", pa.string()),
        ("n_subsets", pa.int64()),
        ("n_images", pa.int64()),
        ("n_communities", pa.int64()),
        ("embedding_status", pa.string()),
        ("embedding_note", pa.string()),
    ]
)
EDGES_SCHEMA = pa.schema(
    [
        ("subject", pa.string()),
        ("source", pa.string()),
        ("target", pa.string()),
        ("weight", pa.float64()),
    ]
)
EMBEDDINGS_SCHEMA = pa.schema(
    [
        ("subject", pa.string()),
        ("subset", pa.string()),
        ("embedding", pa.list_(pa.float64())),
        ("rule", pa.string()),
    ]
)
# every within-class pair of kept subsets (source < target): distance under `rule`, or status disconnected
DISTANCES_SCHEMA = pa.schema(
    [
        ("subject", pa.string()),
        ("source", pa.string()),
        ("target", pa.string()),
        ("distance", pa.float64()),
        ("rule", pa.string()),
        ("status", pa.string()),
    ]
)
IMAGES_SCHEMA = pa.schema(
    [
        ("image_id", pa.string()),
        ("width", pa.int64()),
        ("height", pa.int64()),
        ("location", pa.string()),
        ("weather", pa.string()),
        ("objects", pa.string()),
    ]
)


# ------------------------------------------------------------------------------------------------
# writing
# ------------------------------------------------------------------------------------------------
def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def subsets_table(candidates: CandidateSubsets, kept: np.ndarray, communities: Mapping[str, int]) -> pa.Table:
    """subsets.parquet: every candidate subset (already name-sorted)."""
    return pa.table(
        {
            "subset": pa.array(candidates.names, pa.string()),
            "subject": pa.array(candidates.subjects, pa.string()),
            "context": pa.array(candidates.contexts, pa.string()),
            "kind": pa.array(candidates.kinds, pa.string()),
            "category": pa.array(candidates.categories, pa.string()),
            "n_images": pa.array(candidates.sizes(), pa.int64()),
            "kept": pa.array(kept, pa.bool_()),
            "community": pa.array([communities.get(n, -1) for n in candidates.names], pa.int64()),
        },
        schema=SUBSETS_SCHEMA,
    )


# A membership row group closes at write_parquet's row count or at this much text, whichever comes
# first: no column of one write nears Arrow's 2 GiB string limit, and memory stays bounded
# (today's corpora never reach it per 1 Mi rows, so their files are byte-identical to one write_table).
MEMBERSHIP_GROUP_BYTES = 1 << 28
_MEMBERSHIP_BLOCK = 1 << 16  # (subset, image) codes mapped to text per step


def membership_groups(
    names: "pa.Array | Sequence[str]",
    image_ids: "pa.Array | Sequence[str]",
    codes: Iterable[tuple[np.ndarray, np.ndarray]],
) -> Iterator[pa.Table]:
    """membership.parquet row groups from (subset code, image code) blocks already in row order:
    ``names[subset]``, ``image_ids[image]`` as plain string columns, each group at most
    ``PARQUET_ROW_GROUP`` rows and about ``MEMBERSHIP_GROUP_BYTES`` of text (a longer single row
    forms its own group). Lookups are large_string, so neither vocabulary can overflow either."""
    names = pa.array(names, pa.large_string()) if not isinstance(names, pa.Array) else names.cast(pa.large_string())
    ids = (
        pa.array(image_ids, pa.large_string())
        if not isinstance(image_ids, pa.Array)
        else image_ids.cast(pa.large_string())
    )
    name_len = pc.binary_length(names).to_numpy(zero_copy_only=False).astype(np.int64)
    id_len = pc.binary_length(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    buf: list[pa.Table] = []
    rows = text = 0

    def flush() -> pa.Table:
        nonlocal buf, rows, text
        # one chunk per column: the data pages then do not follow how the codes were blocked
        group = pa.concat_tables(buf).combine_chunks()
        buf, rows, text = [], 0, 0
        return group

    for sub, img in codes:
        sub = np.asarray(sub, dtype=np.int64)
        img = np.asarray(img, dtype=np.int64)
        size = name_len[sub] + id_len[img]
        lo = 0
        while lo < sub.size:
            # rows up to the next group boundary: row count and text both bounded
            room = min(PARQUET_ROW_GROUP - rows, sub.size - lo)
            cum = np.cumsum(size[lo : lo + room])
            fit = int(np.searchsorted(cum, MEMBERSHIP_GROUP_BYTES - text, side="right"))
            n = max(fit, 1) if rows == 0 else fit
            if n:
                piece = slice(lo, lo + n)
                buf.append(
                    pa.table(
                        {
                            "subset": names.take(pa.array(sub[piece])).cast(pa.string()),
                            "image_id": ids.take(pa.array(img[piece])).cast(pa.string()),
                        },
                        schema=MEMBERSHIP_SCHEMA,
                    )
                )
                rows += n
                text += int(cum[n - 1])
                lo += n
            if n < room or rows == PARQUET_ROW_GROUP:
                yield flush()
    if buf:
        yield flush()


def candidate_codes(candidates: CandidateSubsets) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(subset code, image code) of every candidate row in membership order, in blocks."""
    total = int(candidates.indices.size)
    for lo in range(0, total, _MEMBERSHIP_BLOCK):
        hi = min(lo + _MEMBERSHIP_BLOCK, total)
        # the subset of row r is the last one starting at or before r
        yield (
            np.searchsorted(candidates.indptr, np.arange(lo, hi, dtype=np.int64), side="right") - 1,
            candidates.indices[lo:hi],
        )


def write_membership(
    path: Path,
    names: "pa.Array | Sequence[str]",
    image_ids: "pa.Array | Sequence[str]",
    codes: Iterable[tuple[np.ndarray, np.ndarray]],
) -> None:
    """membership.parquet: (subset, image_id) of every candidate, sorted by subset then image id,
    from (subset code, image code) blocks in that order (``candidate_codes``, or the out-of-core store's)."""
    write_parquet_groups(membership_groups(names, image_ids, codes), MEMBERSHIP_SCHEMA, path)


def image_meta_table(image_meta: pa.Table | Iterable[Mapping[str, Any]] | None) -> pa.Table | None:
    """images.parquet rows sorted by image_id; ``objects`` may be given as a dict (JSON-encoded here)."""
    if image_meta is None:
        return None
    if not isinstance(image_meta, pa.Table):
        rows = []
        for r in image_meta:
            objects = r.get("objects")
            rows.append(
                {
                    "image_id": str(r["image_id"]),
                    "width": r.get("width"),
                    "height": r.get("height"),
                    "location": r.get("location"),
                    "weather": r.get("weather"),
                    "objects": objects
                    if isinstance(objects, str) or objects is None
                    else json.dumps(objects, sort_keys=True, separators=(",", ":")),
                }
            )
        image_meta = pa.Table.from_pylist(rows, schema=IMAGES_SCHEMA)
    image_meta = image_meta.select(IMAGES_SCHEMA.names).cast(IMAGES_SCHEMA)
    return image_meta.sort_by("image_id")


def table_hash(folder: Path, names: Sequence[str]) -> str:
    """sha256 over the table files (name + bytes), in sorted order."""
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode() + b"\0")
        hash_file(folder / name, h)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# manifest.json and stats.json, typed
# ------------------------------------------------------------------------------------------------
_REBUILD = "rebuild the artifact with `metashift-hf build` (this version)"


@dataclass(frozen=True)
class Manifest:
    """manifest.json: the format, what the artifact was built from and with which options."""

    format: str
    format_version: int
    package_version: str
    options: BuildOptions
    tables: tuple[str, ...]  # the table files the content hash covers
    content_hash: str
    inputs: tuple[Mapping[str, Any], ...] = ()  # build inputs: path, role, sha256 when known
    source: str = "custom"  # provenance (core.provenance); older artifacts did not record it
    synthetic: bool = False
    table_sha256: Mapping[str, str] | None = None  # per table file; older artifacts did not record it
    # what the user said about user data (build --license/--source-name/--homepage); older artifacts: None
    source_info: SourceInfo | None = None

    def to_dict(self) -> dict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "manifest.json") -> "Manifest":
        if (
            isinstance(data, dict)
            and isinstance(data.get("options"), dict)
            and "max_subsets_per_class" not in data["options"]
        ):
            # built before the cap existed: no cap, not today's default
            data = {**data, "options": {**data["options"], "max_subsets_per_class": 0}}
        m = decode(cls, data, where, _REBUILD, defaults=True)
        # source_info goes into cards: a hand-edited manifest gets the same checks as the build flags
        return dataclasses.replace(
            m,
            options=m.options.validate(),
            source_info=m.source_info.validate() if m.source_info is not None else None,
        )


@dataclass(frozen=True)
class SizeSummary:
    min: int
    median: float
    mean: float
    max: int


@dataclass(frozen=True)
class KindCounts:
    candidates: int
    kept: int


@dataclass(frozen=True)
class ArtifactStats:
    """stats.json: the headline figures of a build (``metashift-hf stats`` checks them against the tables)."""

    candidate_keys: int  # candidate subsets
    candidate_images: int
    kept_subsets_any_class: int  # subsets with enough images, before the class rule
    classes: int
    subsets: int  # kept subsets
    images: int  # images of kept subsets
    subsets_per_class: SizeSummary
    images_per_subset: SizeSummary
    kinds: Mapping[str, KindCounts]
    embedding_status: Mapping[str, int]
    edges: int
    name_collisions_merged: int
    rules: Mapping[str, int]

    def to_dict(self) -> dict:
        return encode(self)

    @classmethod
    def from_dict(cls, data: Any, where: str = "stats.json") -> "ArtifactStats":
        return decode(cls, data, where, _REBUILD)


# ------------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------------
# (path, size, mtime, inode) -> sha256 of table files already checked in this process, so loading
# the same artifact again does not hash its tables again.
_VERIFIED: dict[tuple, str] = {}


class Artifact:
    """Read-only view of an artifact folder. ``Artifact.load(path)`` is the only reader."""

    def __init__(self, root: Path, manifest: Manifest, stats: ArtifactStats) -> None:
        self.root = root
        self.manifest = manifest
        self.stats = stats
        self.options: BuildOptions = manifest.options
        self.content_hash: str = manifest.content_hash
        # Where the data comes from (core.provenance): cards, stats and publish read it.
        self.provenance: str = manifest.source
        self._subsets = self._table(
            "subsets", required=("subset", "subject", "context", "n_images", "kept", "community")
        ).to_pandas()
        self._names: list[str] = self._subsets["subset"].tolist()
        self._pos = {n: i for i, n in enumerate(self._names)}
        sizes = self._subsets["n_images"].to_numpy(dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(sizes)])
        self._by_subject: dict[str, list[int]] = {}
        for i, s in enumerate(self._subsets["subject"].tolist()):
            self._by_subject.setdefault(s, []).append(i)
        self._kept = self._subsets["kept"].to_numpy(dtype=bool)
        self._classes_df = self._table("classes", required=("subject",)).to_pandas()
        self._classes: list[str] = self._classes_df["subject"].tolist()
        self._membership: pa.ChunkedArray | None = None
        self._embeddings: dict[str, np.ndarray] | None = None
        self._image_rows: dict[str, int] | None = None
        self._images_table: pa.Table | None = None
        self._word_set: set[str] | None = None
        self._matrices: dict[str, DistanceMatrix] = {}
        # analysis() per class: shift-level designs ask for hundreds of set distances of one class
        self._analyses: dict[str, tuple[ClassAnalysis, dict[str, np.ndarray]]] = {}

    def _table(self, name: str, *, required: Sequence[str] = (), **read_options) -> pa.Table:
        """One table of the artifact, checked first against the sha256 its build recorded (so tables
        of two builds are never mixed), read with one-line errors for truncated or foreign files."""
        path = self.root / f"{name}.parquet"
        fix = f"rebuild the artifact with `metashift-hf build --out {self.root} --force`"
        expected = (self.manifest.table_sha256 or {}).get(path.name)
        if expected is not None:  # artifacts of earlier versions recorded only content_hash
            try:
                st = path.stat()
            except OSError as exc:
                raise InputFormatError(f"{path} is unreadable ({exc.strerror})", fix) from None
            key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
            if _VERIFIED.get(key) != expected:
                digest = sha256_file(path)
                if digest != expected:
                    raise InputFormatError(
                        f"{path} is not the file this artifact's build wrote (sha256 {digest[:16]}..., manifest.json "
                        f"records {expected[:16]}...): tables from different builds, or a damaged file",
                        fix,
                    )
                _VERIFIED[key] = digest
        try:
            table = pq.read_table(path, **read_options)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise InputFormatError(f"{path} is not a readable table ({str(exc).splitlines()[0][:200]})", fix) from None
        missing = [c for c in required if c not in table.column_names]
        if missing:
            raise InputFormatError(f"{path} lacks the column(s) {', '.join(missing)} (not an artifact table)", fix)
        return table

    @classmethod
    def load(cls, path: "str | os.PathLike | Artifact") -> "Artifact":
        """Open an artifact folder; an already loaded ``Artifact`` is returned as is, so every
        API taking "an artifact" accepts a path or an instance through this one call."""
        if isinstance(path, Artifact):
            return path
        root = Path(path_option(path, "artifact"))
        manifest_path = root / "manifest.json"
        fix = "pass the folder written by `metashift-hf build --out DIR`"
        if not manifest_path.is_file():
            raise InputFormatError(f"{root} is not a metashift-hf artifact (no manifest.json)", fix)
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            stats = json.loads((root / "stats.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputFormatError(f"{root}: unreadable manifest.json/stats.json ({exc})", fix) from None
        if manifest.get("format") != FORMAT:
            raise InputFormatError(f"{manifest_path}: format is {manifest.get('format')!r}, not {FORMAT!r}", fix)
        if manifest.get("format_version") != FORMAT_VERSION:
            raise InputFormatError(
                f"{manifest_path}: format_version {manifest.get('format_version')!r}, this package reads {FORMAT_VERSION}",
                "rebuild the artifact with this version of metashift-hf",
            )
        for t in ("subsets", "membership", "classes", "edges", "embeddings"):
            if not (root / f"{t}.parquet").is_file():
                raise InputFormatError(f"{root}: {t}.parquet is missing", "rebuild the artifact")
        return cls(
            root,
            Manifest.from_dict(manifest, str(manifest_path)),
            ArtifactStats.from_dict(stats, str(root / "stats.json")),
        )

    # -- names ----------------------------------------------------------------------------------
    def classes(self) -> list[str]:
        return list(self._classes)

    def _subject(self, subject: str) -> list[int]:
        if subject not in self._by_subject:
            raise UnknownNameError(
                f"unknown class {subject!r} in artifact {self.root}{did_you_mean(subject, self._classes or self._by_subject)}",
                "list the classes with `metashift-hf classes --artifact ARTIFACT` (Python: Artifact.classes())",
            )
        return self._by_subject[subject]

    def _subset(self, name: str) -> int:
        text_option(name, "subset name")  # None, a number, a list: an OptionError, not a TypeError from did_you_mean
        if name not in self._pos:
            raise UnknownNameError(
                f"unknown subset {name!r} in artifact {self.root}{did_you_mean(name, self._names)}",
                "subset names are 'subject(context)', e.g. 'dog(frisbee)'; list them with "
                "`metashift-hf subsets CLASS --artifact ARTIFACT` (Python: Artifact.subsets_table())",
            )
        return self._pos[name]

    def subsets_of(self, subject: str, kept_only: bool = True) -> list[str]:
        rows = self._subject(subject)
        return [self._names[i] for i in rows if self._kept[i] or not kept_only]

    def subsets_table(self):
        """Every candidate subset (pandas DataFrame, the subsets.parquet columns)."""
        return self._subsets.copy()

    def edges(self, subject: str):
        """Meta-graph edges of one class (pandas DataFrame: source, target, weight)."""
        if subject not in self._classes:
            self._subject(subject)
            raise UnknownNameError(
                f"{subject!r} is not a class of {self.root} (fewer kept subsets than the rule needs)",
                "pick one of Artifact.classes()",
            )
        t = self._table("edges", filters=[("subject", "=", subject)], required=("source", "target", "weight"))
        return t.to_pandas()[["source", "target", "weight"]]

    def communities(self, subject: str) -> dict[str, int]:
        rows = [i for i in self._subject(subject) if self._kept[i]]
        com = self._subsets["community"].to_numpy()
        return {self._names[i]: int(com[i]) for i in rows}

    # -- images ---------------------------------------------------------------------------------
    def _member_ids(self) -> pa.ChunkedArray:
        if self._membership is None:
            # kept in chunks: one array of every id may pass Arrow's 2 GiB string limit
            arr = self._table("membership", columns=["image_id"]).column("image_id")
            if len(arr) != int(self._offsets[-1]):
                raise InputFormatError(
                    f"{self.root}/membership.parquet has {len(arr)} rows but subsets.parquet counts {int(self._offsets[-1])}",
                    "the artifact is corrupt: rebuild it",
                )
            self._membership = arr
        return self._membership

    def _image_list(self, i: int) -> list[str]:
        a, b = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._member_ids().slice(a, b - a).to_pylist()

    def images(self, subset: str) -> frozenset[str]:
        return frozenset(self._image_list(self._subset(subset)))

    def class_images(self, subject: str, kept_only: bool = True) -> frozenset[str]:
        out: set[str] = set()
        for i in self._subject(subject):
            if self._kept[i] or not kept_only:
                out.update(self._image_list(i))
        return frozenset(out)

    def pair_images(self, a: str, b: str) -> frozenset[str]:
        """Images of ``a(b)`` and ``b(a)`` (every candidate, kept or not): the images that show both
        classes of a pair, e.g. cat(dog) ∪ dog(cat). Empty when neither subset exists."""
        words = self._words()
        for w in (a, b):
            if w not in words:
                raise UnknownNameError(
                    f"{w!r} is neither a subject nor a context of any subset in {self.root}{did_you_mean(w, words)}",
                    "use names as they appear in subset names, e.g. pair_images('cat', 'dog')",
                )
        out: set[str] = set()
        for name in (f"{a}({b})", f"{b}({a})"):
            if name in self._pos:
                out.update(self._image_list(self._pos[name]))
        return frozenset(out)

    def _words(self) -> set[str]:
        if self._word_set is None:
            self._word_set = set(self._by_subject) | set(self._subsets["context"].tolist())
        return self._word_set

    def image_metadata(self, image_id: str) -> dict | None:
        """width/height/location/weather/objects of an image (scene-graph builds only), else None."""
        path = self.root / "images.parquet"
        if not path.is_file():
            return None
        if self._image_rows is None:
            self._images_table = self._table("images", required=("image_id", "objects"))
            self._image_rows = {s: i for i, s in enumerate(self._images_table.column("image_id").to_pylist())}
        row = self._image_rows.get(str(image_id))
        if row is None:
            return None
        rec = self._images_table.slice(row, 1).to_pylist()[0]
        rec["objects"] = json.loads(rec["objects"]) if rec["objects"] is not None else None
        return rec

    # -- meta-graph -----------------------------------------------------------------------------
    def _embedding_map(self) -> dict[str, np.ndarray]:
        if self._embeddings is None:
            t = self._table("embeddings", required=("subset", "embedding"))
            self._embeddings = {
                s: np.asarray(e, dtype=np.float64)
                for s, e in zip(t.column("subset").to_pylist(), t.column("embedding").to_pylist())
            }
        return self._embeddings

    def embedding(self, subset: str) -> np.ndarray | None:
        self._subset(subset)
        e = self._embedding_map().get(subset)
        return None if e is None else e.copy()

    def class_info(self, subject: str) -> dict:
        """The classes.parquet row of a class (n_subsets, n_images, n_communities, embedding status/note)."""
        if subject not in self._classes:
            self._subject(subject)
            raise UnknownNameError(
                f"{subject!r} has candidate subsets in {self.root} but is not a class "
                f"(it needs more than {self.options.min_subsets_per_class} subsets of at least "
                f"{self.options.min_images_per_subset} images){did_you_mean(subject, self._classes)}",
                "pick one of Artifact.classes(), or rebuild with lower --min-images-per-subset/--min-subsets-per-class",
            )
        return self._classes_df.iloc[self._classes.index(subject)].to_dict()

    def _kept_subset(self, name: str) -> tuple[str, int]:
        i = self._subset(name)
        subject, _ = parse_subset_name(name)
        if not self._kept[i]:
            self.class_info(subject)  # raises when the subject is not a class at all
            raise UnknownNameError(
                f"subset {name!r} exists but was not kept ({int(self._subsets['n_images'].iloc[i])} images, "
                f"the rule needs {self.options.min_images_per_subset})",
                f"use a kept subset of {subject!r}: {', '.join(self.subsets_of(subject)[:5])} ...",
            )
        return subject, i

    def distance(self, a: str, b: str) -> Distance:
        """Distance between two kept subsets of one class: a number and its rule (``spectral`` where
        both have a stored embedding, else ``resistance``), or status ``disconnected``."""
        sa, _ = self._kept_subset(a)
        sb, _ = self._kept_subset(b)
        if sa != sb:
            raise MetashiftError(
                f"{a!r} and {b!r} belong to different classes ({sa!r}, {sb!r}); distances are defined "
                "within one class's meta-graph",
                f"compare two subsets of the same class, e.g. {a!r} and another '{sa}(...)' subset",
            )
        return self.distance_matrix(sa).get(a, b)

    def distance_matrix(self, subject: str) -> DistanceMatrix:
        """Every pair of a class's kept subsets (computed from the stored edges and embeddings)."""
        if subject not in self._matrices:
            self.class_info(subject)  # raises when it is not a class
            self._matrices[subject] = metagraph.class_distances(self.analysis(subject)[0])
        return self._matrices[subject]

    def members(self, subset_names: Iterable[str]) -> dict[str, np.ndarray]:
        """Subset -> sorted unique int64 indices into a local image index shared by these subsets."""
        lists = {n: self._image_list(self._subset(n)) for n in subset_names}
        ids = (
            np.unique(np.asarray([i for v in lists.values() for i in v], dtype=object))
            if lists
            else np.array([], dtype=object)
        )
        return {n: np.searchsorted(ids, np.asarray(v, dtype=object)).astype(np.int64) for n, v in lists.items()}

    def analysis(self, subject: str):
        """The stored meta-graph of a class as a ``metagraph.ClassAnalysis`` (edges, communities,
        embeddings read back from the tables, nothing recomputed) and its members (local indices).
        Read once per class and shared: treat both as read-only."""
        if subject not in self._analyses:
            self._analyses[subject] = self._read_analysis(subject)
        return self._analyses[subject]

    def _read_analysis(self, subject: str) -> tuple[ClassAnalysis, dict[str, np.ndarray]]:
        info = self.class_info(subject)
        names = self.subsets_of(subject)
        edges = self.edges(subject)
        emb = self._embedding_map()
        o = self.options
        result = ClassAnalysis(
            subsets=names,
            edges=list(
                zip(edges["source"].tolist(), edges["target"].tolist(), edges["weight"].astype(float).tolist())
            ),
            communities=self.communities(subject),
            embedding={n: emb[n].copy() for n in names if n in emb},
            embedding_status=info["embedding_status"],
            embedding_note=info["embedding_note"],
            subject=subject,
            community_method=o.community_method,
            edge_threshold=float(o.edge_threshold),
            spectral_dim=int(o.spectral_dim),
        )
        return result, self.members(names)

    def group_distance(
        self, subject: str, groups: Mapping[str, Sequence[str]], a: str, b: str | Sequence[str], rule: str = "code"
    ) -> Distance:
        """Distance between merged groups of subsets of one class (a number and its rule, or
        ``disconnected``; never an error for valid groups).

        ``groups`` maps a group name to its member subsets ('cat(sofa)' or just the context 'sofa').
        rule="code": the original code's rule (graph rebuilt over the merged groups, embedded; for a
        list ``b`` the mean of the pair distances). rule="paper": size-weighted mean of the member
        embeddings, then Euclidean (a list ``b``: mean of the pair distances as well); groups with an
        unembedded member get the resistance between the groups in the class meta-graph.
        """

        # Python API types first (round 3 D16, R3-14): None, a number or a bare string is an OptionError, not a
        # TypeError from iterating it
        text_option(subject, "subject")
        if not isinstance(groups, Mapping):
            raise OptionError(
                f"groups must be a mapping of group name -> member subsets, not a {type(groups).__name__}",
                "pass groups={'indoor': ['sofa', 'bed'], 'outdoor': ['grass']}",
            )
        groups = {text_option(g, "group name"): names_option(members, f"group {g!r}") for g, members in groups.items()}
        text_option(a, "a")
        targets = [b] if isinstance(b, str) else list(names_option(b, "b"))
        self.class_info(subject)
        full = {g: [m if "(" in m else f"{subject}({m})" for m in members] for g, members in groups.items()}
        for g in [a, *targets]:
            if g not in full:
                raise UnknownNameError(f"unknown group {g!r}{did_you_mean(g, full)}", f"use one of {sorted(full)}")
        for g, members in full.items():
            if not members:
                raise InputFormatError(f"group {g!r} has no member subsets", "give each group at least one subset")
            for m in members:
                if parse_subset_name(m)[0] != subject:
                    raise MetashiftError(
                        f"group {g!r} member {m!r} is not a subset of class {subject!r}",
                        f"use '{subject}(...)' subsets only",
                    )
                self._subset(m)
        o = self.options
        if rule == "code":
            every = sorted({m for members in full.values() for m in members})
            idx = self.members(every)
            unions = {g: np.unique(np.concatenate([idx[m] for m in members])) for g, members in full.items()}
            return metagraph.group_distance_code(
                unions,
                a,
                b if isinstance(b, str) else targets,
                edge_threshold=o.edge_threshold,
                spectral_dim=o.spectral_dim,
            )
        if rule == "paper":
            for members in full.values():
                for m in members:
                    self._kept_subset(m)
            analysis, members_idx = self.analysis(subject)
            return distances.mean_distance(
                [metagraph.group_distance_paper(analysis, members_idx, full[a], full[t]) for t in targets]
            )
        raise InputFormatError(f"unknown group-distance rule {rule!r}", "use rule='code' or rule='paper'")

    def set_distance(self, subject: str, a: Sequence[str], b: Sequence[str], rule: str = "paper") -> Distance:
        """Distance between two sets of subsets (or contexts) of one class, e.g. train vs test contexts."""
        return self.group_distance(
            subject, {"a": names_option(a, "a"), "b": names_option(b, "b")}, "a", "b", rule=rule
        )
