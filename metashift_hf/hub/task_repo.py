"""Exported folders and Hub repos as task sources: which config a folder or repo holds, the checks before
``datasets`` reads one (no loading script, a card declaring the config, a bounded shift spec), the folder's
``datasets`` cache key (from one listing of its files), the meta-graph facts readers and a repo's commit sha.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import datasets

from ..builders.meta_graph_facts import FACTS_FILE, FACTS_MAX_BYTES, read_bounded
from ..builders.pair_distances import PAIRS_FILE, PAIRS_MAX_BYTES
from ..core.errors import InputFormatError, MetashiftError, UnknownNameError
from ..core.fsutil import input_file_error
from ..core.names import terminal_safe
from ..tasks.spec import ShiftSpec
from .repo_files import (
    cache_lacks,
    cached_snapshot,
    card_configs,
    check_spec_size,
    folder_configs,
    hub_call,
    hub_offline,
    pick_config,
    read_text_file,
)
from .shards import SPEC_FILE
from .task_rows import ROWS_FIX


logger = logging.getLogger(__name__)
# Every export since spec_version 4 carries <config>/meta_graph.parquet (the facts file came first): offline, a
# cached copy of such a task without it is a partial copy, not an older export.
FACTS_SINCE_SPEC = 4


class TaskFolderChoiceError(UnknownNameError):
    """A folder holds several task folders (an export's root, or its collection card beside them) and is no task
    itself; ``example`` is one of them, for a caller that names its own flag in the fix (the zoo's ``--tasks``)."""

    def __init__(self, what: str, fix: str = "", example: "Path | None" = None) -> None:
        super().__init__(what, fix)
        self.example = example


def folder_listing(repo: Path) -> dict[str, os.stat_result]:
    """Every regular file of repo folder ``repo`` and of its config folders (relative path -> stat), listed once.

    A file the task is read from (the card, a shift spec, the meta-graph facts, a parquet shard) that is not a
    regular file is refused by name, saying what it is (a symbolic link and where it points, a FIFO, a folder:
    never "missing", never opened): a folder is read only through its own regular files."""
    listed = {}
    for p in (*repo.glob("*"), *repo.glob("*/*")):
        rel = str(p.relative_to(repo))
        task_file = rel == "README.md" or p.name in (SPEC_FILE, FACTS_FILE) or p.suffix == ".parquet"
        if task_file and (p.is_symlink() or not p.is_file()):
            raise input_file_error(
                p,
                f"{rel} of exported folder {repo}",
                "export the task again, or download it with `hf download REPO --repo-type dataset --local-dir DIR` "
                "(files, not links)",
                follow_links=False,
            )
        if p.is_file() and not p.is_symlink():
            listed[rel] = p.stat()
    return listed


def repo_folder(path: Path, config: str | None) -> tuple[Path, str]:
    """(repo folder, config) for a repo folder or one of its config folders."""
    if os.path.lexists(path / SPEC_FILE):  # the config folder itself (its spec checked when read: a FIFO, a link)
        if config not in (None, path.name):
            raise UnknownNameError(
                f"{path} is config {path.name!r}, not {config!r}", "drop --config, or pass the repo folder"
            )
        return path.parent, path.name
    configs = folder_configs(path)
    if not configs:
        tasks = sorted(p.parent.parent.name for p in path.glob(f"*/*/{SPEC_FILE}"))
        if tasks:  # the export's root: one repo folder per task
            raise TaskFolderChoiceError(
                f"{path} is the root of an export holding {len(tasks)} task folder(s): "
                + ", ".join(terminal_safe(t) for t in sorted(set(tasks))[:10]),
                f"pass one of them as the task, e.g. --task {path / tasks[0]}",
                example=path / tasks[0],
            )
        if (path / "README.md").is_file():  # export wrote it: say what it lacks, not "pass an exported folder"
            declared = card_configs(read_text_file(path / "README.md", f"README.md of {path}"), str(path))
            if declared:
                raise InputFormatError(
                    f"{path}: its card declares config(s) {', '.join(map(terminal_safe, declared[:5]))}"
                    f" but no <config>/{SPEC_FILE} is there",
                    "the folder is incomplete: download "
                    "the repo again or export the task again with `metashift-hf export`",
                )
            siblings = sorted(p.parent.parent.name for p in path.parent.glob(f"*/*/{SPEC_FILE}"))
            if siblings:
                raise TaskFolderChoiceError(
                    f"{path} is the collection card of an export (a card, no task); the task "
                    f"folders beside it: {', '.join(map(terminal_safe, siblings[:10]))}",
                    f"pass one of them as the task, e.g. --task {path.parent / siblings[0]}",
                    example=path.parent / siblings[0],
                )
    return path, pick_config(str(path), configs, config)


def check_repo(where: str, files: Mapping[str, "int | None"], config: str, read) -> tuple[ShiftSpec, str]:
    """Before ``datasets`` reads a folder or repo: no loading script (never run), a card of bounded size
    that declares ``config``, and the config's shift spec file (bounded, strictly parsed). Returns the spec and
    the sha256 of the file's bytes (``read`` decodes strict UTF-8, so encoding the text gives them back)."""
    scripts = sorted(f for f in files if f.endswith(".py"))
    if scripts:
        raise InputFormatError(
            f"{where} holds a loading script ({', '.join(map(terminal_safe, scripts[:3]))}); "
            "metashift-hf never runs code from a dataset",
            "use a repo written by `metashift-hf export`/`publish` (parquet files and a card, no code)",
        )
    if "README.md" not in files:
        raise InputFormatError(f"{where} has no dataset card README.md", "export or publish the task again")
    check_spec_size(files["README.md"], f"README.md of {where}")
    declared = card_configs(read("README.md"), where)
    if config not in declared:
        raise InputFormatError(
            f"{where}: config {terminal_safe(config)!r} has a {SPEC_FILE} but the card declares "
            f"{', '.join(map(terminal_safe, declared)) or 'no config'}",
            "export or publish the task again (its card lists every config)",
        )
    path = f"{config}/{SPEC_FILE}"
    check_spec_size(files.get(path), f"{path} of {where}")
    text = read(path)
    return ShiftSpec.from_json(text, where=f"{path} of {where}"), hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_shards(where: str, call) -> "datasets.DatasetDict":
    """``datasets.load_dataset`` of a checked folder or repo; shards it cannot read (empty, missing, sizes
    unlike the card's) are one error naming the source."""
    try:
        return call()
    except (datasets.exceptions.DatasetsError, ValueError, FileNotFoundError) as exc:
        causes = [exc]  # datasets wraps the reader's error ("An error occurred while generating the dataset")
        while (nxt := causes[-1].__cause__ or causes[-1].__context__) is not None and len(causes) < 5:
            causes.append(nxt)
        said = "; ".join(
            f"{type(e).__name__}: {terminal_safe(_first_line(e))}" for e in dict.fromkeys(causes[:1] + causes[-1:])
        )
        raise InputFormatError(
            f"{where}: its parquet shards cannot be read as the card describes them ({said})", ROWS_FIX
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def exported_folder(path: Any) -> bool:
    """Whether ``path`` is a folder written by export (a repo folder or one of its config folders)."""
    p = Path(path) if isinstance(path, (str, os.PathLike)) else None
    return p is not None and p.is_dir() and ((p / SPEC_FILE).is_file() or bool(folder_configs(p)))


def folder_cache_dir(repo: Path, stats: Mapping[str, os.stat_result]) -> str:
    """The ``datasets`` cache of exported folder ``repo``, keyed by the state of its files (``stats``: relative
    path -> stat, the listing the folder was opened with).

    ``datasets`` (5.2) keys a local folder's cache by paths, not contents: a folder whose shards were rewritten
    (``export --force``, an edit) would be read as the rows of its first load. The key here is each file's size,
    mtime and ctime (a rewrite changes ctime even when the mtime is put back), so a changed folder is read again.
    """
    state = sorted((f, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for f, st in stats.items())
    key = hashlib.sha256(json.dumps([str(repo.resolve()), state]).encode()).hexdigest()[:16]
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "metashift-folders" / key)


# The meta-graph facts files an export publishes beside a config's shards, with their size bounds: a reader
# below returns one's bytes (bounded, a regular file), and TaskData checks them against the spec's digests.
FACTS_FILES = {FACTS_FILE: FACTS_MAX_BYTES, PAIRS_FILE: PAIRS_MAX_BYTES}
FactsReader = Callable[[str], "bytes | None"]


def folder_facts(repo: Path, name: str) -> FactsReader:
    """A reader of config ``name``'s facts files in exported folder ``repo``: a file's bytes, None when absent."""

    def read(file: str) -> bytes | None:
        path = repo / name / file
        if not os.path.lexists(path):
            return None
        return read_bounded(path, f"{name}/{file} of exported folder {repo}", FACTS_FILES[file])

    return read


# the spec_version since which an export publishes each facts file (an offline cache copy without it lacks it)
_PUBLISHED_SINCE = {FACTS_FILE: FACTS_SINCE_SPEC, PAIRS_FILE: 6}


def hub_facts(
    repo_id: str,
    files: Mapping[str, "int | None"],
    name: str,
    revision: str | None,
    *,
    snapshot: Path | None = None,
    spec_version: int = 0,
) -> FactsReader:
    """A reader of config ``name``'s facts files in a Hub dataset repo (downloaded into the Hub cache; ``snapshot``:
    offline, its folder in the local Hub cache): a file's bytes, None when the repo has no such file."""
    from huggingface_hub import hf_hub_download  # heavy optional import, as repo_files.hub_files

    def read(file: str) -> bytes | None:
        path, where = f"{name}/{file}", f"{name}/{file} of Hub dataset repo {repo_id}"
        if path not in files:
            if snapshot is not None and spec_version >= _PUBLISHED_SINCE[file]:  # the repo has it, the cache copy not
                raise cache_lacks(repo_id, revision, files, [path])
            return None  # exported before the file existed
        if (files[path] or 0) > FACTS_FILES[file]:
            raise InputFormatError(
                f"{where} is {files[path]} bytes; a task's meta-graph facts are at most {FACTS_FILES[file]}",
                "download the repo again (another --revision) or export the task again",
            )
        local = (
            snapshot / path
            if snapshot is not None
            else hub_call(
                repo_id, None, lambda: hf_hub_download(repo_id, path, repo_type="dataset", revision=revision), revision
            )
        )
        # the Hub cache links snapshots to blobs: read the blob (the facts reader follows no link)
        return read_bounded(os.path.realpath(local), where, FACTS_FILES[file])

    return read


@functools.lru_cache(maxsize=64)
def hub_commit(repo_id: str, revision: str | None) -> str | None:
    """The commit sha ``revision`` (default main) of a Hub dataset repo resolves to; None when it cannot be asked."""
    from huggingface_hub import HfApi  # heavy optional import, as repo_files.hub_files

    if hub_offline():  # the commit the cached copy is (repo_files.hub_files reads that copy)
        found = cached_snapshot(repo_id, revision)
        return None if found is None else found[0]
    try:
        return hub_call(repo_id, None, lambda: HfApi().dataset_info(repo_id, revision=revision).sha, revision)
    except MetashiftError as exc:
        logger.warning(f"Hub dataset repo {repo_id}: its commit sha is not known ({exc.what})")
        return None


__all__ = [
    "TaskFolderChoiceError",
    "folder_listing",
    "repo_folder",
    "check_repo",
    "load_shards",
    "exported_folder",
    "folder_cache_dir",
    "FACTS_FILES",
    "FactsReader",
    "folder_facts",
    "hub_facts",
    "hub_commit",
]
