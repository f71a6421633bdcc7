"""The data manifest: where each real input lives, so later commands need no paths.

One JSON file (default ``<cache>/manifest.json``; ``$METASHIFT_HF_MANIFEST`` or an explicit path
overrides) maps a role -- the ``--what`` names of ``metashift_hf.sources`` -- to a path that was
either downloaded or registered by the user (``metashift-hf download --register ROLE PATH``).
An environment variable per role (``METASHIFT_HF_SCENE_GRAPHS`` ...) overrides the manifest.

Lookup order for a role: environment variable, then manifest entry. A known file is sha256-verified
once, when downloaded or registered; the manifest remembers the digest with the file's size and
mtime so it is not re-hashed while the file is unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from pathlib import Path
from typing import Any, Iterable

from ..builders.images import open_images
from ..core.errors import ChecksumError, InputFormatError, MetashiftError, UnknownNameError, did_you_mean
from ..core.fsutil import FileKind, atomic_out_file, check_out_file, human_size, sha256_file
from ..core.paths import cache_root, default_cache_dir
from ..core.sources import DEFAULT_ORDER, KNOWN_FILES, SCENE_GRAPH_MEMBERS, KnownFile, known_file
from .download import DownloadError, check_disk_space, download_file, extract_scene_graphs, extraction_dir, part_path


MANIFEST_ENV = "METASHIFT_HF_MANIFEST"

logger = logging.getLogger(__name__)
FORMAT = "metashift-hf-data-manifest"
FORMAT_VERSION = 1
# how a manifest of ours is recognised before it is replaced (core.fsutil): save() writes sorted keys, indent 2
MANIFEST_FILE = FileKind("metashift-hf data manifest", b'{\n  "format": "' + FORMAT.encode() + b'",')
ROLES: tuple[str, ...] = DEFAULT_ORDER
SOURCES = ("gqa", "published")


class MissingInputError(MetashiftError):
    """An input the command needs is not downloaded, registered or given."""


def env_var(role: str) -> str:
    """The environment variable that points at ``role``'s input, e.g. ``METASHIFT_HF_SCENE_GRAPHS``."""
    return "METASHIFT_HF_" + role.upper().replace("-", "_")


def default_manifest_path() -> Path:
    env = os.environ.get(MANIFEST_ENV)
    if env:
        return Path(env).expanduser()
    return default_cache_dir() / "manifest.json"


def _check_role(role: str) -> KnownFile:
    if role not in KNOWN_FILES:
        raise UnknownNameError(
            f"unknown input role {role!r}{did_you_mean(role, ROLES)}", f"use one of: {', '.join(ROLES)}"
        )
    return KNOWN_FILES[role]


def _fix_for(role: str) -> str:
    kf = KNOWN_FILES[role]
    return (
        f"run `metashift-hf download --what {role}` ({human_size(kf.size)}), or, with {kf.file_name} "
        f"already on disk, `metashift-hf download --register {role} PATH` (or set {env_var(role)}=PATH)"
    )


class DataManifest:
    """The manifest file's content. ``load`` never fails on a missing file (empty manifest)."""

    def __init__(self, path: Path, entries: dict[str, dict[str, Any]] | None = None) -> None:
        self.path = Path(path)
        self.entries: dict[str, dict[str, Any]] = dict(entries or {})

    @classmethod
    def load(cls, path: str | os.PathLike | None = None, *, for_writing: bool = False) -> "DataManifest":
        """The manifest at ``path``; ``for_writing``: first refuse (before any work) a path that
        :meth:`save` may not write: a link, a folder, a device or FIFO, or a file that is not a data
        manifest of ours (core.fsutil.check_out_file)."""
        p = Path(path).expanduser() if path is not None else default_manifest_path()
        if for_writing:
            check_out_file(p, MANIFEST_FILE, force=True, flag="--manifest")
        if not p.exists():
            return cls(p)
        if not p.is_file():  # reading a FIFO would wait forever, a device has no manifest
            raise InputFormatError(
                f"data manifest {p} is not a regular file",
                "point --manifest / $" + MANIFEST_ENV + " at the manifest file (or a new path)",
            )
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputFormatError(
                f"data manifest {p} is unreadable ({exc})", f"delete {p} and re-register or re-download the inputs"
            ) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("inputs"), dict):
            raise InputFormatError(
                f"{p} is not a metashift-hf data manifest (key 'format' must be {FORMAT!r})",
                f"point --manifest / ${MANIFEST_ENV} at the right file, or delete {p}",
            )
        if data.get("format_version") != FORMAT_VERSION:
            raise InputFormatError(
                f"data manifest {p} has format_version {data.get('format_version')!r}; "
                f"this metashift-hf reads {FORMAT_VERSION}",
                f"delete {p} and re-register or re-download the inputs",
            )
        for role, e in data["inputs"].items():
            if not isinstance(e, dict) or not isinstance(e.get("path"), str) or not e["path"]:
                raise InputFormatError(
                    f"data manifest {p}: the entry {str(role)[:60]!r} has no path string",
                    f"delete {p} (or that entry) and re-register or re-download the inputs",
                )
        return cls(p, data["inputs"])

    def save(self) -> None:
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "inputs": {k: self.entries[k] for k in sorted(self.entries)},
        }
        # the manifest is the tool's own record, updated in place: ours is replaced without --force
        with atomic_out_file(self.path, MANIFEST_FILE, force=True, flag="--manifest") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")

    def entry(self, role: str) -> dict[str, Any] | None:
        return self.entries.get(role)

    def record(
        self,
        role: str,
        path: str | os.PathLike,
        *,
        origin: str,
        sha256: str | None = None,
        known: str | None = None,
        url: str | None = None,
        extracted: list[Path] | None = None,
        **facts: Any,
    ) -> dict[str, Any]:
        """Set ``role``'s entry (call ``save`` to write). File size and mtime are stored so a recorded
        sha256 stays trusted only while the file is unchanged."""
        _check_role(role)
        p = Path(path).absolute()
        old = self.entries.get(role) or {}
        entry: dict[str, Any] = {"path": str(p), "origin": origin, "known": known, "sha256": sha256}
        if p.is_file():
            st = p.stat()
            entry.update(size=st.st_size, mtime_ns=st.st_mtime_ns)
        if url is None and old.get("path") == str(p):
            url = old.get("url")  # a re-check of the same file keeps where it came from
        entry["url"] = url
        if extracted is not None:
            entry["extracted"] = [str(Path(x).absolute()) for x in extracted]
        entry.update(facts)
        self.entries[role] = entry
        return entry

    def trusted_sha256(self, path: str | os.PathLike) -> str | None:
        """The digest recorded for ``path`` if the file still has the recorded size and mtime."""
        p = Path(path).absolute()
        for e in self.entries.values():
            if e.get("path") == str(p) and e.get("sha256") and p.is_file():
                st = p.stat()
                if e.get("size") == st.st_size and e.get("mtime_ns") == st.st_mtime_ns:
                    return e["sha256"]
        return None

    def locate(self, role: str) -> tuple[Path, str] | None:
        """``(path, where)`` for ``role`` -- environment first, then manifest -- or None when neither
        names it. A named path that is gone raises ``MissingInputError`` saying who named it."""
        kf = _check_role(role)
        var = env_var(role)
        if os.environ.get(var):
            p, where = Path(os.environ[var]).expanduser(), f"${var}"
        elif role in self.entries:
            p, where = Path(self.entries[role]["path"]), f"data manifest {self.path}"
        else:
            return None
        if not p.exists():
            raise MissingInputError(f"{role} input {p} (named by {where}) does not exist", _fix_for(role))
        # Cheap guard for paths given by environment: a file with the known name must have the known size.
        if p.is_file() and p.name == kf.file_name and p.stat().st_size != kf.size:
            raise ChecksumError(
                f"{p} (named by {where}) has {p.stat().st_size:,} bytes, expected {kf.size:,} "
                f"for {kf.file_name}: it is incomplete or a different file",
                _fix_for(role),
            )
        return p.absolute(), where


def _claims_known(p: Path, kf: KnownFile) -> bool:
    # Same name or same size: check it against the pin (a truncated copy under the right name, or
    # the right copy under another name, must not slip through unverified).
    return p.is_file() and (p.name == kf.file_name or p.stat().st_size == kf.size)


def _check_shape(role: str, p: Path) -> dict[str, Any]:
    """Cheap content checks for a user file that is not the known one; returns facts to record."""
    bad = lambda why, fix: InputFormatError(f"{p} cannot be the {role} input: {why}", fix)  # noqa: E731
    if role == "scene-graphs":
        if p.is_dir():
            found = [n for n in SCENE_GRAPH_MEMBERS if (p / n).is_file()]
            if not found:
                raise bad(
                    f"the folder holds none of {', '.join(SCENE_GRAPH_MEMBERS)}",
                    "register the folder that holds the GQA scene-graph JSON files, a single JSON file, or sceneGraphs.zip",
                )
            return {"files": found}
        if zipfile.is_zipfile(p):
            with zipfile.ZipFile(p) as zf:
                names = {Path(n).name for n in zf.namelist()}
            if not names & set(SCENE_GRAPH_MEMBERS):
                raise bad(f"the zip holds none of {', '.join(SCENE_GRAPH_MEMBERS)}", "register GQA's sceneGraphs.zip")
            return {}
        with open(p, "rb") as f:
            head = f.read(64).lstrip()
        if not head.startswith(b"{"):
            raise bad(
                "it is neither a zip, a folder, nor a JSON object file",
                "register sceneGraphs.zip, a folder with train_sceneGraphs.json/val_sceneGraphs.json, or one such JSON file",
            )
        return {}
    if role == "images":
        with open_images(p) as src:
            return {"n_images": len(src)}
    if p.is_dir():
        raise bad("it is a folder", f"register the {KNOWN_FILES[role].file_name} file itself")
    if role in ("subsets", "attributes"):
        with open(p, "rb") as f:
            if f.read(1) != b"\x80":
                raise bad(
                    "it is not a pickle (protocol 2 or later)", f"register the published {KNOWN_FILES[role].file_name}"
                )
        return {}
    try:  # imagenet-tree
        tree = json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"it is not JSON ({exc})", "register the published imagenet1k_node_names.json") from exc
    if not isinstance(tree, dict) or "children" not in tree:
        raise bad(
            "the top level is not a tree node with 'children'", "register the published imagenet1k_node_names.json"
        )
    return {}


def register(
    role: str,
    path: str | os.PathLike,
    *,
    manifest: "DataManifest | str | os.PathLike | None" = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Record a user-provided input in the manifest (and save it). A file that claims to be the known
    one (same name or size) must match its sha256 (``ChecksumError`` otherwise); anything else gets a
    cheap shape check and is recorded as unverified. Returns the entry."""
    kf = _check_role(role)
    man = manifest if isinstance(manifest, DataManifest) else DataManifest.load(manifest)
    p = Path(path).expanduser().absolute()
    if not p.exists():
        raise MissingInputError(f"cannot register {role}: {p} does not exist", "check the path")
    if _claims_known(p, kf):
        digest = man.trusted_sha256(p) or sha256_file(p, progress=progress)
        if digest != kf.sha256:
            raise ChecksumError(
                f"{p} looks like {kf.file_name} but its sha256 is {digest}, expected {kf.sha256}",
                f"the copy is incomplete or altered: replace it, or run `metashift-hf download --what {role}`",
            )
        entry = man.record(role, p, origin="registered", sha256=digest, known=kf.key)
    else:
        entry = man.record(role, p, origin="registered", **_check_shape(role, p))
    man.save()
    return entry


def resolve_input(
    role: str, manifest: "DataManifest | str | os.PathLike | None" = None, *, required: bool = True
) -> Path | None:
    """The path of ``role``'s input (environment, then manifest); ``MissingInputError`` saying which
    ``metashift-hf download`` to run when it is required and unknown, else None."""
    man = manifest if isinstance(manifest, DataManifest) else DataManifest.load(manifest)
    found = man.locate(role)
    if found is None:
        if required:
            raise MissingInputError(
                f"no {role} input is known ({KNOWN_FILES[role].description}; "
                f"nothing in ${env_var(role)} or data manifest {man.path})",
                _fix_for(role),
            )
        return None
    return found[0]


def scene_graph_files(path: str | os.PathLike, manifest: "DataManifest | None" = None) -> list[Path]:
    """The scene-graph JSON files behind a registered path: a zip (extracted once, atomically), a
    folder holding train/val_sceneGraphs.json, or a single JSON file."""
    p = Path(path)
    if p.is_dir():
        files = [p / n for n in SCENE_GRAPH_MEMBERS if (p / n).is_file()]
        if not files:
            raise MissingInputError(
                f"scene-graph folder {p} holds none of {', '.join(SCENE_GRAPH_MEMBERS)}", _fix_for("scene-graphs")
            )
        return files
    if zipfile.is_zipfile(p):
        files = extract_scene_graphs(p, extraction_dir(p))
        if manifest is not None and manifest.entries.get("scene-graphs", {}).get("path") == str(p.absolute()):
            e = manifest.entries["scene-graphs"]
            if e.get("extracted") != [str(f) for f in files]:
                e["extracted"] = [str(f) for f in files]
                manifest.save()
        return files
    return [p]


def resolve_build_inputs(
    source: str, manifest: "DataManifest | str | os.PathLike | None" = None, *, include_attributes: bool = False
) -> dict[str, Any]:
    """Inputs for ``metashift-hf build --source gqa|published`` from the environment and manifest.

    Returns ``{"scene_graphs": [paths], "candidate_subsets": path|None, "attributes_pickle": path|None,
    "images": path|None}``. ``gqa`` needs the scene graphs (a zip is extracted on first use);
    ``published`` needs the full candidate-subset pickle; the attributes pickle is added only with
    ``include_attributes=True`` (then it is required), because MetaShift and MetaShift-Attributes are
    separate published datasets and a mixed build matches neither's published figures.
    Images are optional for both (the build does not read pixels).
    """
    if source not in SOURCES:
        raise UnknownNameError(
            f"unknown build source {source!r}{did_you_mean(source, SOURCES)}",
            "use --source gqa (GQA scene graphs) or --source published (the published pickles)",
        )
    man = manifest if isinstance(manifest, DataManifest) else DataManifest.load(manifest)
    out: dict[str, Any] = {
        "scene_graphs": [],
        "candidate_subsets": None,
        "attributes_pickle": None,
        "images": resolve_input("images", man, required=False),
    }
    if source == "gqa":
        out["scene_graphs"] = scene_graph_files(resolve_input("scene-graphs", man), man)
    else:
        out["candidate_subsets"] = resolve_input("subsets", man)
        if include_attributes:
            out["attributes_pickle"] = resolve_input("attributes", man)
    return out


PAPER_URL_ENV = "METASHIFT_HF_PAPER_TREE_URL"  # override of the published tree's URL (mirrors, tests)


def paper_tree_path(
    url: str | None = None, cache_dir: str | os.PathLike | None = None, timeout: float = 60, retries: int = 1
) -> Path:
    """The published tree in the cache, fetched once (by :func:`download.download_file`: sha256
    checked before it gets its name) from ``url``, ``$METASHIFT_HF_PAPER_TREE_URL`` or its published URLs."""
    known = known_file("imagenet-tree")
    folder = cache_root(cache_dir) / "hierarchies"
    override = url or os.environ.get(PAPER_URL_ENV)
    if not override and not (folder / known.file_name).exists():
        # already downloaded or registered (metashift-hf download --what imagenet-tree / --register)
        local = resolve_input("imagenet-tree", required=False)
        if local is not None and Path(local).is_file() and sha256_file(local) == known.sha256:
            return Path(local)
    try:
        # 149 KB: no progress bar, and one retry rather than three (a refused connection stays refused)
        path, _ = download_file(
            known, folder, urls=[override] if override else None, progress=False, timeout=timeout, retries=retries
        )
    except (ChecksumError, DownloadError) as exc:
        fix = (
            f"pass a reachable copy with --tree-url URL (or set {PAPER_URL_ENV}), fetch the file yourself and "
            f"run `metashift-hf download --register imagenet-tree PATH`, or use --hierarchy tree:PATH "
            "or --hierarchy wordnet"
        )
        what = (
            exc.what
            if isinstance(exc, ChecksumError)
            else exc.what.replace("could not download", "could not fetch", 1)
        )
        raise type(exc)(what, fix) from None
    return path


def download(
    keys: Iterable[str] = DEFAULT_ORDER,
    dest_dir: str | os.PathLike | None = None,
    *,
    mirror: str | None = None,
    progress: bool = True,
    manifest=None,
    **fetch_options,
) -> dict[str, Path]:
    """Download several known files, record each in the data manifest, extract the scene graphs.

    The free-space check covers every file still to fetch before the first byte is requested.
    Returns ``{key: path}`` (for scene graphs, the zip).
    """
    man = manifest if isinstance(manifest, DataManifest) else DataManifest.load(manifest)
    dest = Path(dest_dir) if dest_dir is not None else default_cache_dir()
    knowns = [known_file(k) for k in dict.fromkeys(keys)]
    missing = 0
    for kf in knowns:
        final = dest / kf.file_name
        if not final.exists():
            part = part_path(final)
            missing += kf.size - (part.stat().st_size if part.exists() else 0)
    check_disk_space(dest, missing, f"downloading {', '.join(k.file_name for k in knowns)}")
    paths: dict[str, Path] = {}
    for kf in knowns:
        path, url = download_file(
            kf, dest, mirror=mirror, progress=progress, trusted_sha256=man.trusted_sha256, **fetch_options
        )
        man.record(kf.key, path, origin="downloaded", sha256=kf.sha256, known=kf.key, url=url)
        if kf.key == "scene-graphs":
            jsons = extract_scene_graphs(path, extraction_dir(path))
            man.record(kf.key, path, origin="downloaded", sha256=kf.sha256, known=kf.key, url=url, extracted=jsons)
        man.save()
        paths[kf.key] = path
        logger.info(f"{kf.file_name}: {'downloaded from ' + url if url else 'already present and verified'} -> {path}")
    return paths
