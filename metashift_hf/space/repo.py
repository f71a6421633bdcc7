"""The Space repo folder (``metashift-hf space --out DIR``) and its push to the Hub as a Space repo.

The folder holds ``README.md`` (the Space's front matter: ``sdk: gradio``, ``sdk_version``, ``app_file: app.py``,
``title``, ``license``, then what the Space shows), ``app.py`` (a few lines that call
:func:`metashift_hf.space.app.main` with the source it was written for: one reader, the package's) and
``requirements.txt`` (gradio, pinned, and metashift-hf).

The push follows the dataset repos' rules (``metashift_hf.hub.publish``): the token checked first, the README
metadata validated by the Hub's ``validate-yaml`` (as a Space's), the remote tree compared file by file (git blob
sha1) and one commit only when something differs, so pushing the same folder again makes no commit; the Space is
added to the namespace's MetaShift collection.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Sequence

from ..core import __version__
from ..core.errors import InputFormatError
from ..core.fsutil import atomic_dir, sha256_file
from ..core.names import markdown_safe
from ..hub.export import keep_user_files
from ..hub.publish import (
    COLLECTION_TITLE,
    DEFAULT_TIMEOUT,
    FilePlan,
    RepoPlan,
    git_blob_sha1,
    remote_tree,
    update_collection,
    writable_hub,
)
from ..hub.shards import validate_repo_name
from .package import WHEELS, build_wheel, check_package, check_requirements, requirement_for


logger = logging.getLogger(__name__)

GRADIO_VERSION = "6.31.0"  # the one pin: pyproject's `space` extra and the Space's requirements.txt/sdk_version
SPACE_KIND = "space repo"  # the marker kind of a folder `metashift-hf space` wrote (core.fsutil)
SPACE_FILES = ("README.md", "app.py", "requirements.txt")
DEFAULT_NAME = "metashift-space"
DEFAULT_TITLE = "MetaShift explorer"
LICENSE = "mit"  # the Space's code is the package's; each task card states its data's licence


def readme(source: str, results: Sequence[str], *, title: str = DEFAULT_TITLE, license: str = LICENSE) -> str:
    """README.md: the Space front matter, then what the Space shows and where it reads it."""
    front = "\n".join(
        [
            "---",
            f"title: {json.dumps(title)}",
            "emoji: 🧭",
            "colorFrom: blue",
            "colorTo: green",
            "sdk: gradio",
            f'sdk_version: "{GRADIO_VERSION}"',
            "app_file: app.py",
            "pinned: false",
            "fullWidth: true",
            f"license: {license}",
            "short_description: MetaShift tasks, meta-graphs, leaderboards and distances",
            "tags:",
            "- metashift",
            "- distribution-shift",
            "---",
        ]
    )
    sources = ", ".join(f"`{markdown_safe(r)}`" for r in results) or "none"
    return (
        f"{front}\n\n# {markdown_safe(title)}\n\n"
        "Browse MetaShift (Liang & Zou, ICLR 2022) as published: every task (family, classes, declared and measured "
        "shift, level, sizes) with its page, each class's meta-graph (context subsets sized by images, coloured by "
        "community; a node's images and distances), the leaderboard (test balanced accuracy beside the majority "
        "baseline; per-group accuracy with Wilson intervals and context bugs) and the distances between subsets.\n\n"
        f"Tasks from `{markdown_safe(source)}`; results from {sources}. The app reads only the published repos "
        "(each task's `shift_spec.json`, `meta_graph.parquet` and rows; the results' `leaderboard.csv` and "
        "`per_group.csv`) through `metashift_hf`, so it refuses a tampered repo as the CLI does. Each task card "
        "states its data's licence.\n\n"
        "Run it offline from an export folder:\n\n"
        "```bash\npip install -r requirements.txt\npython app.py --from EXPORT_FOLDER --port 7860\n```\n\n"
        f"Written by `metashift-hf space` (metashift-hf {__version__}).\n"
    )


def app_py(source: str, results: Sequence[str], folder: "str | os.PathLike | None" = None) -> str:
    """app.py: the package's app, with the source this Space was written for as its default. A local folder is
    written relative to the Space folder ``folder`` and resolved against app.py's own folder when it runs (the
    app finds it from any working directory); a Hub id stays as given."""

    def where(s: str) -> str:
        if folder is None or not Path(s).is_dir():
            return json.dumps(str(s))
        rel = os.path.relpath(Path(s).resolve(), Path(folder).resolve())
        return f"str((HERE / {json.dumps(Path(rel).as_posix())}).resolve())"

    return (
        '"""The MetaShift Space (written by `metashift-hf space`): python app.py [--from SOURCE] [--port P]."""\n\n'
        "import sys\n"
        "from pathlib import Path\n\n"
        "from metashift_hf.space.app import main\n\n\n"
        "HERE = Path(__file__).resolve().parent\n"
        f"SOURCE = {where(source)}\n"
        f"RESULTS = [{', '.join(where(str(r)) for r in results)}]\n\n"
        'if __name__ == "__main__":\n'
        "    sys.exit(main(default_source=SOURCE, default_results=RESULTS))\n"
    )


def requirements(package: str) -> str:
    """requirements.txt: gradio pinned (as ``sdk_version``) and the package's line (its wheel in the folder by
    relative path, or ``--package``: e.g. a wheel URL or ``metashift-hf @ git+https://...``)."""
    return f"gradio=={GRADIO_VERSION}\n{package}\n"


def write_space(
    out: "str | os.PathLike",
    source: str,
    results: Sequence[str] = (),
    *,
    title: str = DEFAULT_TITLE,
    package: str | None = None,
    force: bool = False,
) -> Path:
    """Write the Space repo folder ``out`` (atomically: our marker, refused over someone else's folder). Without
    ``package`` the package's own wheel is built into ``out/wheels/``; files the user added to an earlier folder
    (``--force``) are kept, as export keeps them (the wheels folder is ours, rewritten whole)."""
    package = check_package(package)
    inputs = [source, *results] if Path(source).is_dir() else list(results)
    with atomic_dir(Path(out), kind=SPACE_KIND, force=force, inputs=inputs) as tmp:
        tmp = Path(tmp)
        line = package or requirement_for(build_wheel(tmp / WHEELS), tmp)
        files = {
            "README.md": readme(source, results, title=title),
            "app.py": app_py(source, results, out),
            "requirements.txt": requirements(line),
        }
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        keep_user_files(Path(out), tmp, {WHEELS})
    return Path(out)


def space_files(folder: Path) -> list[str]:
    """The files of the Space folder that are the Space's (never a file the user added, e.g. ``.env``)."""
    wheels = sorted(p for p in (folder / WHEELS).glob("*.whl") if p.is_file() and not p.is_symlink())
    return [*SPACE_FILES, *(p.relative_to(folder).as_posix() for p in wheels)]


def plan_space(folder: Path, repo_id: str, remote: dict[str, tuple[str, int, bool]] | None) -> RepoPlan:
    """Each Space file: upload or unchanged (git blob sha1, or sha256 for an LFS file, against the remote tree);
    an earlier wheel no longer in the folder is deleted; nothing else is touched."""
    plan = RepoPlan(repo_id, folder, None if remote is None else bool(remote), repo_type="space")
    local = space_files(folder)
    for name in local:
        path = folder / name
        old = (remote or {}).get(name)
        same = old is not None and old[0] == (sha256_file(path) if old[2] else git_blob_sha1(path))
        plan.files.append(FilePlan(name, path.stat().st_size, "unchanged" if same else "upload"))
    for name, (_, size, _) in sorted((remote or {}).items()):
        if name.startswith(f"{WHEELS}/") and name not in local:
            plan.files.append(FilePlan(name, size, "delete"))
    return plan


def check_space_folder(folder: "str | os.PathLike") -> Path:
    folder = Path(folder)
    for name in SPACE_FILES:
        p = folder / name
        if p.is_symlink() or not p.is_file():
            raise InputFormatError(
                f"{folder} has no regular file {name}", "write the folder with `metashift-hf space --out DIR`"
            )
    return folder


def push_space(
    folder: "str | os.PathLike",
    repo_id: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool = False,
    collection_title: str = COLLECTION_TITLE,
    timeout: float = DEFAULT_TIMEOUT,
) -> str | None:
    """Push the Space folder as Space repo ``repo_id`` (one commit when something changed, else none; returns the
    commit id or None) and add it to the namespace's collection."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete  # heavy optional import, as hub.publish

    folder = check_space_folder(folder)
    check_requirements(folder)  # before any Hub call: a Space whose requirements pip cannot resolve never builds
    if repo_id.count("/") != 1:
        raise InputFormatError(f"--push {repo_id!r} is not NAMESPACE/NAME", "e.g. --push my-org/metashift-space")
    namespace, name = repo_id.split("/")
    validate_repo_name(namespace, "namespace")
    validate_repo_name(name, "Space name")
    hub = writable_hub(token, namespace, endpoint=endpoint, timeout=timeout, flag="--push NAMESPACE/NAME")
    hub.call(
        f"creating {repo_id}",
        hub.api.create_repo,
        repo_id,
        repo_type="space",
        space_sdk="gradio",
        private=private,
        exist_ok=True,
    )
    plan = plan_space(folder, repo_id, remote_tree(hub, repo_id, repo_type="space"))
    commit = None
    if plan.changed:
        readme_path = folder / "README.md"
        if any(f.path == "README.md" and f.action == "upload" for f in plan.files):
            hub.validate_card(readme_path, readme_path.read_text(encoding="utf-8"), repo_id, repo_type="space")
        ops = [
            CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=str(folder / f.path))
            if f.action == "upload"
            else CommitOperationDelete(path_in_repo=f.path)
            for f in plan.files
            if f.action != "unchanged"
        ]
        info = hub.call(
            f"committing to {repo_id}",
            hub.api.create_commit,
            repo_id,
            ops,
            repo_type="space",
            commit_message=f"Space from metashift-hf {__version__}",
        )
        commit = info.oid
        logger.info(f"{repo_id}: committed {len(ops)} file(s) as {commit[:12]}")
    else:
        logger.info(f"{repo_id}: up to date, no commit")
    slug = update_collection(hub, namespace, collection_title, [plan], private=private)
    logger.info(f"collection: {hub.endpoint}/collections/{slug}")
    return commit
