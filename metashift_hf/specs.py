"""``metashift_hf.shift_spec(x)``: the one call that gives a task's :class:`ShiftSpec` back, whatever holds it.

    metashift_hf.shift_spec("paper-dg-cat-dog-1", artifact="ARTIFACT", scale=0.5)   # planned, no images
    metashift_hf.shift_spec(prepared)                    # a PreparedTask (or a TaskPlan)
    metashift_hf.shift_spec(load_dataset(...))           # a Dataset / DatasetDict, prepared or loaded
    metashift_hf.shift_spec("out/metashift-paper-dg-cat-dog-1")             # an exported repo folder
    metashift_hf.shift_spec("out/metashift", "paper-dg-cat-dog-1")          # ... naming the config
    metashift_hf.shift_spec("out/metashift-class-cat/class-cat/shift_spec.json")  # the file itself
    metashift_hf.shift_spec("user/metashift-paper-dg-cat-dog-1")            # a Hub dataset repo

Exported configs hold ``<config>/shift_spec.json`` (:data:`metashift_hf.shards.SPEC_FILE`);
datasets carry the same spec in their features (``builders.metashift.features_with_spec``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .api import plan
from .builders.metashift import spec_of_dataset
from .builders.spec import ShiftSpec
from .core.errors import InputFormatError, MetashiftError, UnknownNameError, did_you_mean
from .shards import SPEC_FILE


def read_spec_file(path: str | os.PathLike) -> ShiftSpec:
    """A ``shift_spec.json`` file, strictly parsed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputFormatError(f"cannot read {path} ({exc.strerror or exc})", "export the task again") from None
    return ShiftSpec.from_json(text, where=str(path))


def pick_config(where: str, configs: list[str], config: str | None) -> str:
    """``config`` when ``where`` holds it; else the only config there is (several: name one)."""
    if config is not None:
        if config not in configs:
            raise UnknownNameError(f"{where} has no config {config!r} with a {SPEC_FILE}" + did_you_mean(config, configs),
                                   f"use one of: {', '.join(configs) or '(none)'}")
        return config
    if len(configs) != 1:
        raise UnknownNameError(f"{where} holds {len(configs)} configs with a {SPEC_FILE}: {', '.join(configs) or 'none'}",
                               "name the config (--config CONFIG; Python: config=)" if configs else
                               "pass a folder or repo written by `metashift-hf export` / `publish`")
    return configs[0]


def folder_configs(folder: Path) -> list[str]:
    """The configs of an exported repo folder: its subfolders holding a shift spec."""
    return sorted(p.parent.name for p in Path(folder).glob(f"*/{SPEC_FILE}"))


def _from_folder(folder: Path, config: str | None) -> ShiftSpec:
    if config is None and (folder / SPEC_FILE).is_file():
        return read_spec_file(folder / SPEC_FILE)  # the config folder itself
    return read_spec_file(folder / pick_config(str(folder), folder_configs(folder), config) / SPEC_FILE)


def _hub_call(repo_id: str, config: str | None, call):
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError

    where = f"Hub dataset repo {repo_id}"
    try:
        return call()
    except RepositoryNotFoundError:
        raise UnknownNameError(f"{where} does not exist (or is private and no token was given)",
                               "check the repo id (namespace/name), or log in with `hf auth login`") from None
    except EntryNotFoundError:
        raise UnknownNameError(f"{where} has no {config}/{SPEC_FILE}",
                               "name a config the repo holds; repos written by `metashift-hf publish` have one per task") from None
    except HfHubHTTPError as exc:
        raise MetashiftError(f"{where}: the Hub answered {exc}", "check the connection and the repo id") from None


def hub_configs(repo_id: str, revision: str | None = None) -> list[str]:
    """The configs of a Hub dataset repo written by `publish`: its folders holding a shift spec."""
    from huggingface_hub import list_repo_files

    files = _hub_call(repo_id, None, lambda: list_repo_files(repo_id, repo_type="dataset", revision=revision))
    return sorted(f.split("/")[0] for f in files if f.count("/") == 1 and f.endswith(f"/{SPEC_FILE}"))


def _from_hub(repo_id: str, config: str | None, revision: str | None) -> ShiftSpec:
    from huggingface_hub import hf_hub_download

    if config is None:
        config = pick_config(f"Hub dataset repo {repo_id}", hub_configs(repo_id, revision), None)
    local = _hub_call(repo_id, config, lambda: hf_hub_download(repo_id, f"{config}/{SPEC_FILE}", repo_type="dataset",
                                                                revision=revision))
    return read_spec_file(local)


def looks_like_repo_id(text: str) -> bool:
    """``namespace/name`` as the Hub spells repo ids (no check that it exists)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return text.count("/") == 1


def shift_spec(source: Any, config: str | None = None, *, artifact: "str | os.PathLike | None" = None,
               seed: int = 0, revision: str | None = None, **options: Any) -> ShiftSpec:
    """The shift spec of ``source`` (see the module docstring for what it may be).

    ``config``: which config of an exported repo or Hub repo (needed when it holds several);
    ``artifact``, ``seed``, ``options``: plan task id ``source`` on that artifact (no images read);
    ``revision``: a Hub branch, tag or commit.
    """
    if artifact is not None:
        if not isinstance(source, str):
            raise InputFormatError(f"artifact= plans a task id, but the source is a {type(source).__name__}",
                                   "pass a task id with artifact=, or drop artifact=")
        return plan(source, artifact, seed=seed, **options).spec
    if options or seed:
        raise InputFormatError(f"task options {sorted(options) + (['seed'] if seed else [])} apply only when planning "
                               "a task id on an artifact", "pass artifact=ARTIFACT, or drop the options")
    if isinstance(source, ShiftSpec):
        return source
    if isinstance(getattr(source, "spec", None), ShiftSpec):  # PreparedTask, TaskPlan
        return source.spec
    import datasets

    if isinstance(source, (datasets.Dataset, datasets.DatasetDict)):
        return spec_of_dataset(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_file():
            return read_spec_file(path)
        if path.is_dir():
            return _from_folder(path, config)
        if isinstance(source, str) and looks_like_repo_id(source):
            return _from_hub(source, config, revision)
        raise UnknownNameError(f"{source!r} is neither a file, a folder nor a Hub repo id (namespace/name)",
                               "pass an exported folder, a shift_spec.json, a Hub dataset repo id, or a task id "
                               "with artifact=ARTIFACT")
    raise InputFormatError(f"cannot read a shift spec from a {type(source).__name__}",
                           "pass a task id with artifact=, a PreparedTask, a Dataset/DatasetDict, an exported "
                           "folder or a Hub repo id")


__all__ = ["shift_spec", "read_spec_file", "pick_config", "folder_configs", "hub_configs", "looks_like_repo_id"]
