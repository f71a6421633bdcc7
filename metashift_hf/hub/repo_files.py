"""Reading the files of an exported folder or Hub dataset repo, safely: its configs, its card's declared configs,
its ``<config>/shift_spec.json`` (:data:`metashift_hf.hub.shards.SPEC_FILE`) and small text files, each bounded
in size and never a FIFO or device; Hub failures as one error naming the repo. The task resolver
(:mod:`metashift_hf.hub.task_open`) puts these together.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Mapping

from ..builders.meta_graph_facts import FACTS_FILE
from ..builders.pair_distances import PAIRS_FILE
from ..core.errors import InputFormatError, MetashiftError, UnknownNameError, did_you_mean
from ..core.fsutil import open_input
from ..tasks.spec import ShiftSpec
from .http import bound_hub_timeouts
from .shards import SPEC_FILE


logger = logging.getLogger(__name__)
# A spec (and the card that carries a copy of it) of a real task is a few hundred kB at most; a larger
# one is refused before it is parsed (PyYAML/JSON on hundreds of MB would run for minutes).
MAX_SPEC_BYTES = 8 * 2**20


def check_spec_size(size: int | None, where: str) -> None:
    """Refuse a spec file or dataset card larger than :data:`MAX_SPEC_BYTES` before anything parses it."""
    if size is not None and size > MAX_SPEC_BYTES:
        raise InputFormatError(
            f"{where} is {size} bytes; a shift spec or card of a task is at most {MAX_SPEC_BYTES}",
            "this is not a task written by `metashift-hf export`/`publish`; export the task again",
        )


def read_text_file(path: str | os.PathLike, where: str | None = None) -> str:
    """A small regular file as text: a FIFO, device or folder is refused (never opened), a large one
    refused by its size (:func:`check_spec_size`)."""
    path, where = Path(path), where or str(path)
    with open_input(path, where, "export the task again") as f:
        check_spec_size(os.fstat(f.fileno()).st_size, where)
        try:
            data = f.read(MAX_SPEC_BYTES + 1)
        except OSError as exc:
            raise InputFormatError(f"cannot read {where} ({exc.strerror or exc})", "export the task again") from None
    check_spec_size(len(data), where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(f"{where} is not UTF-8 text ({exc})", "export the task again") from None


def read_spec_file(path: str | os.PathLike) -> ShiftSpec:
    """A ``shift_spec.json`` file, strictly parsed."""
    return ShiftSpec.from_json(read_text_file(path), where=str(path))


class ConfigChoiceError(UnknownNameError):
    """A folder or repo holds several configs and none was named: a caller without ``--config`` (the zoo) says
    what works there instead, recognising this error by its type."""


def pick_config(where: str, configs: list[str], config: str | None) -> str:
    """``config`` when ``where`` holds it; else the only config there is (several: name one)."""
    if config is not None:
        if config not in configs:
            raise UnknownNameError(
                f"{where} has no config {config!r} with a {SPEC_FILE}" + did_you_mean(config, configs),
                f"use one of: {', '.join(configs) or '(none)'}",
            )
        return config
    if len(configs) > 1:
        raise ConfigChoiceError(
            f"{where} holds {len(configs)} configs with a {SPEC_FILE}: {', '.join(configs)}",
            "name the config (--config CONFIG; Python: config=)",
        )
    if not configs:
        raise UnknownNameError(
            f"{where} holds {len(configs)} configs with a {SPEC_FILE}: {', '.join(configs) or 'none'}",
            "pass a task folder or repo written by `metashift-hf export` / `publish` (one "
            f"CONFIG/{SPEC_FILE} per task; an export's collection card `metashift` holds no task: "
            "pass one of the task repos its card lists)",
        )
    return configs[0]


def folder_configs(folder: Path) -> list[str]:
    """The configs of an exported repo folder: its subfolders holding a shift spec (whatever it is: a spec that is a
    FIFO or a dangling link is refused by name when read, not taken for a missing config)."""
    return configs_of([f"{p.name}/{SPEC_FILE}" for p in Path(folder).glob("*/") if os.path.lexists(p / SPEC_FILE)])


def hub_call(repo_id: str, config: str | None, call, revision: str | None = None):
    """``call()``, its Hub failures as one error naming the repo (and revision) and the fix: never a
    traceback, never a wait without end (the shared session gets a read timeout, :func:`metashift_hf.hub.http.bound_hub_timeouts`)."""
    import httpx2
    from huggingface_hub.errors import (
        EntryNotFoundError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"Hub dataset repo {repo_id}"
    bound_hub_timeouts()
    try:
        return call()
    except RepositoryNotFoundError:
        raise UnknownNameError(
            f"{where} does not exist (or is private and no token was given)",
            "check the repo id (namespace/name), or log in with `hf auth login`",
        ) from None
    except RevisionNotFoundError:
        raise UnknownNameError(
            f"{where} has no revision {revision!r}",
            "pass a branch, a tag or a full 40-character commit sha the repo has, "
            "or drop --revision for its main branch",
        ) from None
    except EntryNotFoundError:
        raise UnknownNameError(
            f"{where} has no {config}/{SPEC_FILE}",
            "name a config the repo holds; repos written by `metashift-hf publish` have one per task",
        ) from None
    except OfflineModeIsEnabled:
        raise MetashiftError(
            f"{where}: HF_HUB_OFFLINE is set, so the Hub cannot be asked for the repo's files",
            "unset HF_HUB_OFFLINE, or pass the repo's exported folder (a local copy) as --task",
        ) from None
    except HfHubHTTPError as exc:
        raise MetashiftError(f"{where}: the Hub answered {exc}", "check the connection and the repo id") from None
    except (OSError, httpx2.TransportError) as exc:  # refused, unreachable, timed out
        from huggingface_hub import constants

        raise MetashiftError(
            f"{where}: no answer from the Hub at {constants.ENDPOINT} ({type(exc).__name__}: {exc})",
            "check the connection and HF_ENDPOINT; a slow Hub: raise HF_HUB_DOWNLOAD_TIMEOUT "
            f"(seconds, now {constants.HF_HUB_DOWNLOAD_TIMEOUT})",
        ) from None


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (huggingface_hub reads it once, at import)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _cache_root(repo_id: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / f"datasets--{repo_id.replace('/', '--')}"


def _cached_refs(root: Path) -> dict[str, str]:
    """The cache's refs of a repo (``main``, a tag, a branch) -> commit sha."""
    refs = {}
    for ref in sorted((root / "refs").rglob("*")) if (root / "refs").is_dir() else ():
        if ref.is_file() and not ref.is_symlink() and ref.stat().st_size <= 256:
            sha = ref.read_text(encoding="ascii", errors="replace").strip()
            if re.fullmatch(r"[0-9a-f]{40}", sha):
                refs[str(ref.relative_to(root / "refs"))] = sha
    return refs


def _cached_commits(root: Path) -> list[str]:
    snapshots = root / "snapshots"
    found = snapshots.iterdir() if snapshots.is_dir() else ()
    return sorted(p.name for p in found if p.is_dir() and re.fullmatch(r"[0-9a-f]{40}", p.name))


def cached_snapshot(repo_id: str, revision: str | None) -> "tuple[str, Path] | None":
    """(commit sha, snapshot folder) of Hub dataset repo ``repo_id`` at ``revision`` (default main) in the local
    Hub cache, as huggingface_hub resolves it offline (``refs/<revision>``, or a commit sha with its snapshot; also
    a short sha, 7 or more hex digits, that begins exactly one cached snapshot's); None when the cache lacks it."""
    root = _cache_root(repo_id)
    rev = revision or "main"
    commits = _cached_commits(root)
    sha = _cached_refs(root).get(rev)
    if sha is None and re.fullmatch(r"[0-9a-f]{7,40}", rev):
        matches = [c for c in commits if c.startswith(rev)]
        sha = matches[0] if len(matches) == 1 else None
    return (sha, root / "snapshots" / sha) if sha in commits else None


def cache_fetch_fix(repo_id: str, revision: str | None) -> str:
    """How to put the whole repo (at ``revision``) into the local Hub cache: the one wording of that fix."""
    flag, kw = (f" --revision {revision}", f", revision={revision!r}") if revision else ("", "")
    return (
        f"with the Hub reachable, fetch the whole repo once: `hf download {repo_id} --repo-type dataset{flag}` "
        f"(Python: huggingface_hub.snapshot_download({repo_id!r}, repo_type='dataset'{kw})), then run again with "
        "HF_HUB_OFFLINE set; or pass the task's exported folder"
    )


def _cache_holds(repo_id: str) -> str:
    """What the local Hub cache holds of a repo, for messages: its refs and the commits it has snapshots of."""
    root = _cache_root(repo_id)
    refs, commits = _cached_refs(root), _cached_commits(root)
    if not commits:
        return "holds no copy of it"
    named = [f"{name} = commit {sha[:12]}" for name, sha in refs.items() if sha in commits]
    other = [c[:12] for c in commits if c not in refs.values()]
    return "holds " + "; ".join(
        part
        for part in (
            f"revision(s) {', '.join(named)}" if named else "",
            f"commit(s) {', '.join(other)} (no branch or tag names them)" if other else "",
        )
        if part
    )


def _cached_files(repo_id: str, revision: str | None) -> dict[str, int | None]:
    """Offline (``HF_HUB_OFFLINE``): the files of the repo's cached snapshot, saying which commit it is."""
    from huggingface_hub import constants

    where = f"Hub dataset repo {repo_id}" + (f" (revision {revision})" if revision else "")
    found = cached_snapshot(repo_id, revision)
    if found is None:
        raise MetashiftError(
            f"{where}: HF_HUB_OFFLINE is set and the local Hub cache ({constants.HF_HUB_CACHE}) does not hold it "
            f"at revision {revision or 'main'}: it {_cache_holds(repo_id)} (the repo itself was not asked)",
            cache_fetch_fix(repo_id, revision)
            + ("" if revision is None else "; or drop --revision (Python: revision=) to read the cached main"),
        )
    sha, snapshot = found
    logger.warning(
        f"{where}: HF_HUB_OFFLINE is set; reading the copy in the local Hub cache, revision {revision or 'main'} "
        f"= commit {sha} (it may be older than the Hub's)"
    )
    return {
        str(p.relative_to(snapshot)): p.stat().st_size  # the cache links each file to its blob: stat the blob
        for p in snapshot.rglob("*")
        if p.is_file()
    }


def cache_lacks(
    repo_id: str, revision: str | None, files: Mapping[str, "int | None"], missing: list[str]
) -> MetashiftError:
    """Offline: the cached snapshot of a repo lacks files a task needs (``missing``): the cache is partial (what
    ``datasets.load_dataset`` fetches is the card and the shards, not the task's files), not the repo. Names what
    it lacks, what it holds and the fetch (D13, Z-62)."""
    found = cached_snapshot(repo_id, revision)
    commit = f" = commit {found[0]}" if found else ""
    held = sorted(files)
    shown = ", ".join(held[:6]) + (f" and {len(held) - 6} more" if len(held) > 6 else "") if held else "no file"
    return MetashiftError(
        f"Hub dataset repo {repo_id}: HF_HUB_OFFLINE is set and the local Hub cache's copy (revision "
        f"{revision or 'main'}{commit}) lacks {', '.join(missing)}; it holds {shown} (a copy fetched by "
        "`datasets.load_dataset` has the card and the shards only). The repo itself was not asked",
        cache_fetch_fix(repo_id, revision),
    )


def offline_task_files(
    repo_id: str, revision: str | None, files: Mapping[str, "int | None"], config: str | None
) -> None:
    """Offline: refuse a cached snapshot that lacks the task's spec (for ``config``, or any: a copy fetched by
    ``datasets.load_dataset``), naming what it lacks (:func:`cache_lacks`). Its shards are asked for only when its
    rows are read (:func:`offline_task_rows`): a spec and facts answer ``distance --task`` alone."""
    configs = configs_of(files)
    sharded = sorted({f.split("/")[0] for f in files if _is_shard(f)})
    if config is None and not configs:
        wanted = sharded or ["CONFIG"]
        raise cache_lacks(repo_id, revision, files, [f"{c}/{SPEC_FILE}" for c in wanted])
    if config is not None and config not in configs and (config in sharded or not configs):
        raise cache_lacks(repo_id, revision, files, [f"{config}/{SPEC_FILE}"])


def offline_task_rows(repo_id: str, revision: str | None, files: Mapping[str, "int | None"], config: str) -> None:
    """Offline, before a task's rows are read: refuse a cached snapshot without ``config``'s parquet shards."""
    if not any(f.startswith(f"{config}/") and f.endswith(".parquet") and _is_shard(f) for f in files):
        raise cache_lacks(repo_id, revision, files, [f"{config}/*.parquet (the task's rows)"])


def _is_shard(path: str) -> bool:
    return path.count("/") == 1 and path.endswith(".parquet") and not path.endswith((FACTS_FILE, PAIRS_FILE))


def hub_files(repo_id: str, revision: str | None = None) -> dict[str, int | None]:
    """Every file of a Hub dataset repo at ``revision``: path -> size in bytes (offline: the cached snapshot's)."""
    from huggingface_hub import HfApi

    if hub_offline():
        return _cached_files(repo_id, revision)

    def listing():
        return {
            e.path: getattr(e, "size", None)
            for e in HfApi().list_repo_tree(repo_id, repo_type="dataset", revision=revision, recursive=True)
            if type(e).__name__ == "RepoFile"
        }

    return hub_call(repo_id, None, listing, revision)


def configs_of(files: "Mapping[str, int | None] | list[str]") -> list[str]:
    """The configs among a repo's file paths: its folders holding a shift spec."""
    return sorted(f.split("/")[0] for f in files if f.count("/") == 1 and f.endswith(f"/{SPEC_FILE}"))


def hub_configs(repo_id: str, revision: str | None = None) -> list[str]:
    """The configs of a Hub dataset repo written by `publish`: its folders holding a shift spec."""
    return configs_of(hub_files(repo_id, revision))


def hub_text(repo_id: str, path: str, revision: str | None, size: int | None) -> str:
    """A small text file of a Hub dataset repo (a card, a spec), refused by its listed size before download."""
    from huggingface_hub import hf_hub_download

    check_spec_size(size, f"{path} of Hub dataset repo {repo_id}")
    config = path.split("/")[0] if "/" in path else None
    local = hub_call(
        repo_id, config, lambda: hf_hub_download(repo_id, path, repo_type="dataset", revision=revision), revision
    )
    return read_text_file(local, f"{path} of Hub dataset repo {repo_id}")


def card_configs(card: str, where: str) -> list[str]:
    """The config names a dataset card's YAML header declares (``configs: - config_name: ...``)."""
    from huggingface_hub import DatasetCard

    try:
        meta = DatasetCard(card).data.to_dict()
    except (ValueError, RecursionError) as exc:  # yaml's errors are ValueErrors
        raise InputFormatError(
            f"{where}: the card's YAML header cannot be read ({type(exc).__name__})",
            "export or publish the task again",
        ) from None
    configs = meta.get("configs") if isinstance(meta, dict) else None
    return sorted(str(c.get("config_name")) for c in configs or () if isinstance(c, dict))


def looks_like_repo_id(text: str) -> bool:
    """``namespace/name`` as the Hub spells repo ids (no check that it exists)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return text.count("/") == 1


__all__ = [
    "hub_offline",
    "cached_snapshot",
    "cache_fetch_fix",
    "cache_lacks",
    "offline_task_files",
    "offline_task_rows",
    "read_spec_file",
    "read_text_file",
    "check_spec_size",
    "MAX_SPEC_BYTES",
    "hub_files",
    "hub_text",
    "hub_call",
    "card_configs",
    "configs_of",
    "pick_config",
    "folder_configs",
    "hub_configs",
    "looks_like_repo_id",
]
