"""Repo layout and parquet shards: names the Hub accepts, shard files with embedded original bytes,
and the README YAML (``configs:`` and ``dataset_info``) that describes them."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import datasets
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets.features.features import require_storage_embed
from datasets.table import embed_table_storage
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..builders.meta_graph_facts import FACTS_FILE
from ..builders.pair_distances import PAIRS_FILE
from ..core.errors import InputFormatError
from ..tasks.spec import ShiftSpec


# Writer settings, chosen from benchmarks/bench_storage.py (figures in docs/hub.md), two tasks
# sharing 673 of 878 images, a store chunking at 64 KiB like the Hub's Xet:
# - rows sorted by image id: tasks that share images then hold them in the same relative order,
#   so the store finds long identical byte runs: 1.4% of the bytes saved unsorted, 30.6% sorted;
# - no compression: JPEG bytes do not compress (same file sizes), and compressed pages hide the
#   shared runs: 33.1% saved uncompressed vs 30.6% with snappy (ideal, every shared image once: 38.3%);
# - parquet content-defined chunking (pyarrow's experimental option) measured no gain on top
#   (33.0% vs 33.1%), so it stays off;
# - 100 rows per row group keeps the dataset viewer's random access cheap for image rows.
ROW_GROUP_ROWS = 100
COMPRESSION = "none"
CONTENT_DEFINED_CHUNKING = False
SORT_KEYS = ("image_id", "label")  # collections list an image once per class: label breaks ties
MAX_SHARD_BYTES = 500 * 1024 * 1024  # same bound as datasets' push_to_hub default

INDEX_REPO = "metashift"
SPEC_FILE = "shift_spec.json"  # the task's shift spec, machine-readable, beside the shards
# <config>/FACTS_FILE (builders.meta_graph_facts), the task's meta-graph facts, and <config>/PAIRS_FILE
# (builders.pair_distances), every pair's distance, also sit beside the shards: no split's data_files pattern
# (<config>/<split>-*) matches them, so they are never read as rows of the task's config (nor shown by the viewer).
REPO_PREFIX = "metashift-"
LAYOUTS = ("repo-per-task", "one-repo")

_CONFIG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_SPLIT_RE = re.compile(r"^\w+(\.\w+)*$")


def validate_repo_name(name: str, what: str = "repo name") -> str:
    """Raise unless the Hub would accept ``name`` as a namespace or repo name: huggingface_hub's
    own check (``validate_repo_id``) on a single part (no '/'), ASCII only."""
    try:
        validate_repo_id(name)
        ok = isinstance(name, str) and name.isascii() and "/" not in name
    except HFValidationError:
        ok = False
    if not ok:
        raise InputFormatError(
            f"{what} {name!r} would be refused by the Hub",
            "use 1-96 ASCII letters, digits, '-', '_' or '.', starting and ending with a letter, digit or '_', "
            "with no '--' or '..' and not ending in '.git'",
        )
    return name


# Names from scene graphs go into README tables, headings and links: characters that Markdown or
# HTML would read as markup (raw tags, table pipes, links, code, emphasis) or a control character.
_UNSAFE_TEXT_RE = re.compile(r"[<>|\[\]`*\\&\x00-\x1f\x7f]")


def validate_card_names(spec: ShiftSpec, task_id: str) -> None:
    """Raise unless every class, group and context name of a task is plain text in a card.

    Class names also name the meta-graph pictures (``images/<class>.png``), so they hold no ``/``.
    """
    groups = [g for split in spec.groups().values() for g in split]
    names = [("class", c) for c in spec.classes]
    names += [("group", g.group) for g in groups] + [("class", g.cls) for g in groups]
    names += [("context", c) for g in groups for c in g.contexts]
    for role, name in names:
        if name is None:
            continue
        text = str(name)
        bad = _UNSAFE_TEXT_RE.search(text) or (role == "class" and "/" in text)
        if bad:
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise InputFormatError(
                f"task {task_id}: {role} name {shown.encode('unicode_escape').decode()!r} is not plain text "
                "for a dataset card (it holds Markdown/HTML markup characters"
                + (" or '/'" if role == "class" else "")
                + ")",
                "rename it in the scene graphs (letters, digits, spaces and - ' . , ( ) only) and build again",
            )


def validate_config_name(name: str) -> str:
    if not _CONFIG_RE.fullmatch(name or "") or "--" in name:
        raise InputFormatError(
            f"config name {name!r} cannot be a Hub dataset config (it is also a folder name in the repo)",
            "use letters, digits, '-', '_' or '.', starting with a letter or digit, at most 96 characters",
        )
    return name


def validate_split_name(name: str, config: str = "") -> str:
    if not _SPLIT_RE.fullmatch(name or ""):
        where = f" in config {config!r}" if config else ""
        raise InputFormatError(
            f"split name {name!r}{where} is refused by datasets and the Hub (must match {_SPLIT_RE.pattern})",
            "rename the split to letters, digits and '_' (dots only between words), e.g. 'test_id'",
        )
    return name


@dataclass(frozen=True)
class ShardSettings:
    """How a split is written as parquet (the defaults are the measured choices above; other values are for the
    storage benchmark and tests)."""

    max_shard_bytes: int | None = None  # None: MAX_SHARD_BYTES; a new shard starts before one would pass it
    row_group_rows: int | None = None  # None: ROW_GROUP_ROWS
    compression: str = COMPRESSION
    content_defined_chunking: bool = CONTENT_DEFINED_CHUNKING
    sort_by_id: bool = True  # export order (SORT_KEYS); unsorted only for the storage benchmark


@dataclass(frozen=True)
class SplitFiles:
    name: str
    num_examples: int
    num_bytes: int  # Arrow size with images embedded, the number datasets reports
    files: tuple[str, ...]  # repo-relative shard paths


@dataclass(frozen=True)
class ConfigFiles:
    config: str
    features: Any  # datasets.Features
    splits: tuple[SplitFiles, ...]
    download_size: int  # bytes of the parquet shards


@dataclass(frozen=True)
class ExportedRepo:
    """One exported repo folder. ``configs`` is empty for the index repo."""

    name: str
    path: Path
    configs: tuple[str, ...]
    files: tuple[str, ...] = field(default=())
    num_bytes: int = 0
    note: str = ""  # one-line shift spec, used as the collection item note

    def load_line(self, config: str | None = None, namespace: str | None = None) -> str:
        """The line a user types: local folder, or ``ns/repo`` once published."""
        target = f"{namespace}/{self.name}" if namespace else str(self.path)
        cfg = config or (self.configs[0] if self.configs else None)
        return f'load_dataset("{target}", "{cfg}")' if cfg else f'load_dataset("{target}")'


def shard_name(config: str, split: str, index: int, count: int) -> str:
    return f"{config}/{split}-{index:05d}-of-{count:05d}.parquet"


def _schema_metadata(features) -> dict[bytes, bytes]:
    # datasets restores Image()/ClassLabel features from this key when it reads the parquet.
    return {b"huggingface": json.dumps({"info": {"features": features.to_dict()}}, sort_keys=True).encode()}


def export_order(dataset):
    """``dataset`` with its rows in export order (see SORT_KEYS), as a lazy index mapping."""
    keys = [k for k in SORT_KEYS if k in dataset.column_names]
    if not keys or not len(dataset):
        return dataset
    ids = dataset.select_columns(keys).with_format("arrow")[:]
    return dataset.select(pc.sort_indices(ids, sort_keys=[(k, "ascending") for k in keys]).to_pylist())


def _embedded_batches(dataset, rows: int):
    """Arrow batches of ``rows`` rows with each image file's original bytes read into the table
    (``embed_table_storage`` reads bytes as they are; nothing is decoded or re-encoded)."""
    if not len(dataset):
        yield embed_table_storage(dataset.with_format("arrow")[:0])
        return
    images = [name for name, f in dataset.features.items() if isinstance(f, datasets.Image)]
    nested = any(require_storage_embed(f) for name, f in dataset.features.items() if name not in images)
    for batch in dataset.with_format("arrow").iter(batch_size=rows):
        # Our builder already carries every image's bytes and a bare file name: embedding would
        # only round-trip the bytes through Python objects (half the export time, bench_materialise).
        if nested or not all(_embedded(batch.column(name)) for name in images):
            batch = embed_table_storage(batch)
        yield batch


def _embedded(column: pa.ChunkedArray) -> bool:
    """Every image of ``column`` has its bytes and a path without folders (what embedding gives)."""
    for storage in column.chunks:
        if isinstance(storage, pa.ExtensionArray):
            storage = storage.storage
        data, paths = storage.flatten()  # (flatten, unlike field, honours a slice's offset)
        if (
            storage.null_count
            or data.null_count
            or any(pc.any(pc.match_substring(paths, sep)).as_py() for sep in {"/", os.sep})
        ):
            return False
    return True


def write_split(
    dataset,
    repo_dir: Path,
    config: str,
    split: str,
    *,
    settings: ShardSettings = ShardSettings(),
    features=None,
) -> SplitFiles:
    """Write one split as parquet shards with the image bytes embedded in the file.

    Streams one row group at a time (memory stays at ~``row_group_rows`` images) and starts a new
    shard before one would pass ``max_shard_bytes``; shards get their final ``-of-n`` names at the end.
    ``features`` (same Arrow types as the dataset's, e.g. carrying the shift spec) replace the
    dataset's in the schema metadata.
    """
    validate_split_name(split, config)
    limit = settings.max_shard_bytes or MAX_SHARD_BYTES
    row_group_rows = settings.row_group_rows or ROW_GROUP_ROWS
    ordered = export_order(dataset) if settings.sort_by_id else dataset  # unsorted only for the storage benchmark
    metadata = _schema_metadata(features or dataset.features)
    folder = Path(repo_dir) / config
    folder.mkdir(parents=True, exist_ok=True)
    parts: list[Path] = []
    writer = None
    shard_bytes = num_bytes = rows = 0
    try:
        for batch in _embedded_batches(ordered, row_group_rows):
            batch = batch.replace_schema_metadata(metadata)
            if writer is None or (shard_bytes and shard_bytes + batch.nbytes > limit):
                if writer is not None:
                    writer.close()
                parts.append(folder / f".{split}-part-{len(parts):05d}.tmp")
                writer = pq.ParquetWriter(
                    parts[-1],
                    batch.schema,
                    compression=settings.compression,
                    use_content_defined_chunking=settings.content_defined_chunking,
                    write_page_index=True,
                )
                shard_bytes = 0
            writer.write_table(batch, row_group_size=row_group_rows)
            shard_bytes += batch.nbytes
            num_bytes += batch.nbytes
            rows += batch.num_rows
        writer.close()
        writer = None
        files = []
        for i, part in enumerate(parts):
            rel = shard_name(config, split, i, len(parts))
            os.replace(part, Path(repo_dir) / rel)
            files.append(rel)
    except BaseException:
        if writer is not None:
            writer.close()
        for part in parts:
            part.unlink(missing_ok=True)
        raise
    return SplitFiles(split, rows, int(num_bytes), tuple(files))


def write_config(dataset_dict, repo_dir: Path, config: str, *, features=None, **settings) -> ConfigFiles:
    """Write every split of ``dataset_dict`` under ``repo_dir/<config>/``; ``features``: see :func:`write_split`;
    ``settings``: the fields of :class:`ShardSettings`."""
    validate_config_name(config)
    shard_settings = ShardSettings(**settings)
    if not len(dataset_dict):
        raise InputFormatError(
            f"config {config!r} has no splits", "prepare the task again; every task has at least one split"
        )
    written, features = features, None
    splits = []
    for split in dataset_dict:  # keep the builder's split order (train, validation, test...)
        ds = dataset_dict[split]
        if features is None:
            features = ds.features
        elif ds.features != features:
            raise InputFormatError(
                f"split {split!r} of config {config!r} has different features from the other splits",
                "give every split of a task the same features",
            )
        splits.append(write_split(ds, repo_dir, config, split, settings=shard_settings, features=written))
    size = sum((repo_dir / f).stat().st_size for s in splits for f in s.files)
    return ConfigFiles(config, written or features, tuple(splits), size)


def dataset_infos_yaml(configs: Iterable[ConfigFiles], card_data) -> None:
    """Fill ``card_data`` with ``configs:`` (explicit, first one default) and ``dataset_info``."""
    configs = list(configs)
    card_data["configs"] = [
        {
            "config_name": c.config,
            "data_files": [{"split": s.name, "path": f"{c.config}/{s.name}-*"} for s in c.splits],
            **({"default": True} if i == 0 else {}),
        }
        for i, c in enumerate(configs)
    ]
    infos = datasets.info.DatasetInfosDict()
    for c in configs:
        splits = datasets.SplitDict()
        for s in c.splits:
            splits.add(datasets.SplitInfo(name=s.name, num_bytes=s.num_bytes, num_examples=s.num_examples))
        infos[c.config] = datasets.DatasetInfo(
            features=c.features,
            splits=splits,
            download_size=c.download_size,
            dataset_size=sum(s.num_bytes for s in c.splits),
            config_name=c.config,
        )
    infos.to_dataset_card_data(card_data)


# Every path a repo folder may publish (see export's layout); anything else is never uploaded.
_LAYOUT_FILE_RE = re.compile(
    r"README\.md|images/[^/.][^/]*\.png"
    r"|[A-Za-z0-9][A-Za-z0-9._-]{0,95}/(?:\w+(?:\.\w+)*-\d{5}-of-\d{5}\.parquet|"
    + re.escape(SPEC_FILE)
    + "|"
    + re.escape(FACTS_FILE)
    + "|"
    + re.escape(PAIRS_FILE)
    + ")"
)


def repo_files(repo_dir: Path) -> tuple[str, ...]:
    """The repo's files that belong to the layout: regular files only, found without following links.

    Symlinks, dotfiles, hidden folders and names outside the layout are left out, so publishing
    a folder never uploads a private file linked into it, a ``.env``, or our marker file.
    """
    root = Path(repo_dir)
    found = []
    for folder, dirs, files in os.walk(root):  # os.walk does not descend into linked folders
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            if name.startswith(".") or not _LAYOUT_FILE_RE.fullmatch(rel):
                continue
            try:
                if stat.S_ISREG(os.lstat(path).st_mode):
                    found.append(rel)
            except OSError:
                continue
    return tuple(sorted(found))


def _repo_bytes(repo_dir: Path) -> int:
    return sum(os.lstat(Path(repo_dir) / rel).st_size for rel in repo_files(Path(repo_dir)))


# -- tasks -> repos ----------------------------------------------------------------------------
