"""Export task datasets as Hub-ready repos: parquet shards with embedded JPEG bytes + README card.

A repo folder holds exactly what ``publish`` pushes::

    <repo>/README.md                                  YAML (configs, dataset_info, ...) + card body
    <repo>/<config>/<split>-00000-of-00001.parquet    image bytes embedded, never re-encoded
    <repo>/images/<class>.png                         meta-graph pictures copied from the artifact
    <repo>/images/<config>-<class>-groups.png         the class meta-graph, the task's groups by role
    <repo>/images/<config>-examples.png               example images, a row per group (cards.pictures)

``datasets.load_dataset("<repo dir or ns/repo>", "<config>")`` reads it with no loading script.
The shard writer and repo layout are in :mod:`metashift_hf.hub.shards`; the cards in :mod:`metashift_hf.cards`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Mapping

from ..builders.artifact import Artifact
from ..builders.meta_graph_facts import FACTS_FILE, MetaGraphFacts
from ..builders.pair_distances import PAIRS_FILE, PairDistances
from ..cards import pictures
from ..cards import render as cards
from ..core.errors import InputFormatError, MetashiftError, UnknownNameError
from ..core.fsutil import atomic_dir, atomic_file, check_out, claimed_dir, exclusive_lock, read_marker
from ..tasks.metashift import features_with_spec
from ..tasks.spec import SPEC_VERSION, ShiftSpec
from .repo_files import folder_configs, read_spec_file
from .shards import (
    INDEX_REPO,
    LAYOUTS,
    REPO_PREFIX,
    SPEC_FILE,
    ExportedRepo,
    _embedded_batches,
    _repo_bytes,
    export_order,
    repo_files,
    validate_card_names,
    validate_config_name,
    validate_repo_name,
    validate_split_name,
    write_config,
)
from .task_data import PreparedTask, TaskRef
from .task_open import TaskOrigin, open_task


LOCK_FILE = ".metashift-export.lock"  # in --out: held by the export writing there (_export_lock)
EXPORT_KIND = "export folder"  # marker kinds (core.fsutil): the --out container and each repo in it
REPO_KIND = "exported repo"
# The namespace a repo folder's cards name in their load lines and links (null: the local folders of
# an export made without --namespace). Cards are rendered once, for that target; publish compares it
# with its --namespace instead of rewriting the card. A dotfile, so never uploaded (shards.repo_files).
CARD_TARGET_FILE = ".card-target.json"


@dataclass(frozen=True)
class CardTarget:
    """Where the cards of an exported repo folder point: ``namespace/<repo>``, or local folders (None)."""

    namespace: str | None


def write_card_target(repo_dir: Path, namespace: str | None) -> None:
    with atomic_file(Path(repo_dir) / CARD_TARGET_FILE, "w") as f:
        f.write(json.dumps({"namespace": namespace}) + "\n")


def card_target(repo_dir: Path) -> CardTarget | None:
    """The recorded target of a repo folder's cards; None when not recorded (an older export, a folder
    made by hand) or unreadable."""
    path = Path(repo_dir) / CARD_TARGET_FILE
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 4096:
            return None
        ns = json.loads(path.read_text(encoding="utf-8")).get("namespace")
    except (OSError, ValueError, AttributeError):
        return None
    return CardTarget(ns) if ns is None or isinstance(ns, str) else None


def repo_name_for(task_id: str, layout: str) -> str:
    if layout == "one-repo":
        return INDEX_REPO
    return validate_repo_name(f"{REPO_PREFIX}{task_id}", "repo name for task")


def _export_lock(out: Path) -> "contextlib.AbstractContextManager[None]":
    """One export at a time into one ``--out`` (a lock on ``out/.metashift-export.lock``, released when the export
    ends or its process dies, the file removed with it): a second export at once gets a clear error before it
    writes anything, so no repo is left written but unlisted."""
    busy = InputFormatError(
        f"another export is writing into {out} now",
        "wait for it to end, then run this export again (it adds its tasks to that export), or pass another --out",
    )
    return exclusive_lock(out / LOCK_FILE, busy, remove=True)


@contextlib.contextmanager
def _claim_out(out_dir, task_ids: list[str], layout: str, origin: TaskOrigin, force: bool) -> Iterator[Path]:
    """The export folder, ours and locked; every repo folder it will write checked before any is written. A
    failed export leaves no folder (nor marker) it made behind (core.fsutil.claimed_dir).

    An earlier export in it is added to: a task's repo folder (or, one-repo layout, its config) already there is
    replaced only with ``force``; the collection repo ``metashift`` is rebuilt from every repo present (ours only)."""
    with claimed_dir(out_dir, EXPORT_KIND, inputs=list(origin.inputs)) as out, _export_lock(out):
        _refuse_layout_change(out, layout)
        if layout == "repo-per-task":
            for name in (repo_name_for(t, layout) for t in task_ids):
                check_out(out / name, REPO_KIND, force=force, flag=f"--out (repo {name})")
        else:
            there = (
                sorted(set(task_ids) & set(folder_configs(out / INDEX_REPO))) if (out / INDEX_REPO).is_dir() else []
            )
            if there and not force:
                raise InputFormatError(
                    f"--out {out}: the {INDEX_REPO} repo holds config(s) {', '.join(there)} from an earlier export",
                    "pass --force to replace them (its other configs stay), or export other tasks",
                )
        check_out(out / INDEX_REPO, REPO_KIND, force=True, flag=f"--out (repo {INDEX_REPO})")  # ours, or refused
        yield out


def _layout_found(out: Path) -> "tuple[str, list[str]] | None":
    """(layout, task ids) of the earlier export in ``out``: ``one-repo`` when its collection repo holds configs,
    ``repo-per-task`` when task repo folders of ours are there; None for a folder holding no task yet."""
    index = out / INDEX_REPO
    if index.is_dir() and not index.is_symlink() and folder_configs(index):
        return "one-repo", folder_configs(index)
    repos = [
        d
        for d in sorted(out.iterdir())
        if d.name != INDEX_REPO
        and d.is_dir()
        and not d.is_symlink()
        and (read_marker(d) or {}).get("kind") == REPO_KIND
    ]
    tasks = [c for d in repos for c in folder_configs(d)]
    return ("repo-per-task", tasks) if tasks else None


def _refuse_layout_change(out: Path, layout: str) -> None:
    """One export folder, one layout (X-06): a one-repo export into a repo-per-task export would turn its collection
    folder into a repo of the new tasks only (the earlier tasks unlisted, a task held twice), and the reverse would
    replace the one repo's configs by a card. Refused, naming the layout there, before anything is written."""
    found = _layout_found(out)
    if found is not None and found[0] != layout:
        there, tasks = found
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        raise InputFormatError(
            f"--out {out} holds an earlier export in the {there} layout (task(s) {shown}); --layout {layout} into it "
            f"would replace its collection folder {INDEX_REPO!r} and unlist those tasks",
            f"export with --layout {there} to add tasks to it, or name another --out for the {layout} layout",
        )


def export_prepared(
    prepared: list,
    origin: TaskOrigin,
    out_dir: str | Path,
    *,
    layout: str = "repo-per-task",
    namespace: str | None = None,
    force: bool = False,
) -> list[ExportedRepo]:
    """Write the repos for already prepared tasks (``metashift_hf.hub.task_data.PreparedTask``, e.g. from
    ``TaskData.prepare()``) made on ``origin``'s build (its meta-graph and plots go into the cards).

    ``out_dir`` must be new, empty or an earlier export folder; a repo folder already in it is
    replaced only with ``force``. It never holds one of ``origin``'s inputs (artifact, images).
    """

    ids = _check_prepared(prepared, layout, namespace)
    with _claim_out(out_dir, ids, layout, origin, force) as out:
        return _write_repos(prepared, origin.build("export"), out, ids, layout, namespace, force)


def _check_prepared(prepared: list, layout: str, namespace: str | None) -> list[str]:
    """The task ids of ``prepared``, after checking every name export will write (before any is written)."""
    if layout not in LAYOUTS:
        raise UnknownNameError(f"layout {layout!r} is not known", f"use one of: {', '.join(LAYOUTS)}")
    if not prepared:
        raise MetashiftError(
            "no tasks to export",
            "name at least one task (list them with `metashift-hf tasks list --artifact ARTIFACT`)",
        )
    if namespace is not None:
        validate_repo_name(namespace, "namespace")
    ids = [p.task_id for p in prepared]
    dupes = sorted({t for t in ids if ids.count(t) > 1})
    if dupes:
        raise MetashiftError(f"task(s) named twice: {', '.join(dupes)}", "name each task once")
    for p in prepared:
        validate_config_name(p.task_id)
        validate_card_names(p.spec, p.task_id)
        for split in p.dataset:
            validate_split_name(split, p.task_id)
    return ids


def _write_repos(
    prepared: list, art: Artifact, out_dir: Path, ids: list[str], layout: str, namespace: str | None, force: bool
) -> list[ExportedRepo]:

    def load_target(repo: str) -> str:
        """The name the cards load ``repo`` by: rendered once, for the publish target when one is given."""
        return f"{namespace}/{repo}" if namespace else str(out_dir / repo)

    def write_task(p, tmp: Path, repo: str):
        facts = published_facts(p, art)  # first: the spec (also in the shards' features) records their digests
        p = PreparedTask(p.task_id, p.dataset, with_facts_digests(p.spec, facts))
        cfg = write_config(p.dataset, tmp, p.task_id, features=_spec_features(p))
        info = cards.task_info(p, art, cfg, repo_id=load_target(repo))
        cards.copy_plots(info, art, tmp)
        info.pictures = pictures.draw_task_pictures(p, art, tmp)
        write_spec(tmp / p.task_id / SPEC_FILE, p.spec)
        for name, data in facts.items():
            with atomic_file(tmp / p.task_id / name, "wb") as f:
                f.write(data)
        return cfg, info

    exported: list[ExportedRepo] = []
    if layout == "repo-per-task":
        written = {repo_name_for(p.task_id, layout) for p in prepared}
        earlier = _earlier_repos(out_dir, written, art, namespace)  # read before anything is replaced
        infos = []
        for p in prepared:
            name = repo_name_for(p.task_id, layout)
            with atomic_dir(out_dir / name, kind=REPO_KIND, force=force) as tmp:
                cfg, info = write_task(p, tmp, name)
                with atomic_file(tmp / "README.md", "w") as f:
                    f.write(cards.render_task_card(info, [cfg]))
                write_card_target(tmp, namespace)
                keep_user_files(out_dir / name, tmp, {p.task_id})
            infos.append(info)
            exported.append(_exported(out_dir / name, (p.task_id,), cards.collection_note(p.spec)))
        # the collection card lists every task repo in the folder, this export's and the earlier ones
        infos += [cards.task_info(e, art, repo_id=load_target(repo_name_for(e.task_id, layout))) for e in earlier]
        infos.sort(key=lambda i: i.task_id)
        with atomic_dir(out_dir / INDEX_REPO, kind=REPO_KIND, force=True) as tmp:
            with atomic_file(tmp / "README.md", "w") as f:
                f.write(cards.render_index_card(infos, art, configs=None, repo_id=load_target(INDEX_REPO)))
            write_card_target(tmp, namespace)
            keep_user_files(out_dir / INDEX_REPO, tmp, set())
        exported.append(_exported(out_dir / INDEX_REPO, (), cards.INDEX_NOTE))
    else:
        # the earlier configs of the one repo are written again beside the new ones (their rows as exported)
        earlier = _earlier_configs(out_dir / INDEX_REPO, set(ids), art, namespace)
        every = sorted([*prepared, *earlier], key=lambda p: p.task_id)
        with atomic_dir(out_dir / INDEX_REPO, kind=REPO_KIND, force=True) as tmp:
            cfgs, infos = map(list, zip(*(write_task(p, tmp, INDEX_REPO) for p in every)))
            with atomic_file(tmp / "README.md", "w") as f:
                f.write(cards.render_index_card(infos, art, configs=cfgs, repo_id=load_target(INDEX_REPO)))
            write_card_target(tmp, namespace)
            keep_user_files(out_dir / INDEX_REPO, tmp, {p.task_id for p in every})
        exported.append(_exported(out_dir / INDEX_REPO, tuple(p.task_id for p in every), cards.INDEX_NOTE))
    return exported


def _exported(path: Path, configs: tuple, note: str) -> ExportedRepo:
    return ExportedRepo(path.name, path, configs, repo_files(path), _repo_bytes(path), note)


def _earlier(folder: Path, config: str | None, art: Artifact, namespace: str | None):
    """An earlier export's task (a repo folder, or a config of the one repo) as a PreparedTask, its rows checked;
    refused when it was exported from another build or for another namespace (one collection card names one)."""
    data = open_task(TaskRef(folder, config=config))
    if data.spec.artifact_hash and data.spec.artifact_hash != art.content_hash:
        raise InputFormatError(
            f"{data.where} was exported from another build (artifact {data.spec.artifact_hash[:12]}, not "
            f"{art.content_hash[:12]}); one export folder holds the tasks of one build",
            "export into another --out, or remove that repo folder first",
        )
    target = card_target(folder)
    if target is not None and target.namespace != namespace:
        raise InputFormatError(
            f"{data.where} was exported for namespace {target.namespace!r}, this export for {namespace!r}",
            "export with the same --namespace as the earlier export, or into another --out",
        )
    return data.prepare()


def _earlier_repos(out_dir: Path, written: set[str], art: Artifact, namespace: str | None) -> list:
    """The task repo folders an earlier export left in ``out_dir`` (ours, by marker), except those written now."""
    found = []
    for d in sorted(out_dir.iterdir()):
        if d.name in written or d.name == INDEX_REPO or d.is_symlink() or not d.is_dir():
            continue
        if (read_marker(d) or {}).get("kind") == REPO_KIND and folder_configs(d):
            found.append(_earlier(d, None, art, namespace))
    return found


def _earlier_configs(repo: Path, written: set[str], art: Artifact, namespace: str | None) -> list:
    """The configs an earlier one-repo export left in ``repo``, except those written now."""
    if not repo.is_dir() or repo.is_symlink():
        return []
    return [_earlier(repo, c, art, namespace) for c in folder_configs(repo) if c not in written]


def keep_user_files(old: Path, tmp: Path, configs: set[str]) -> None:
    """Copy into ``tmp`` (the folder that replaces ``old``) every regular file of ``old`` that export did not write
    now: a user's notes stay. Files of the ``configs`` written now are not copied (a stale shard would be read
    with the new ones); links are never followed."""
    if not old.is_dir() or old.is_symlink():
        return
    for path in sorted(old.rglob("*")):  # rglob does not descend into linked folders
        rel = path.relative_to(old)
        if path.is_symlink() or not path.is_file() or rel.parts[0] in configs:
            continue
        dest = tmp / rel
        if dest.exists() or dest.is_symlink():
            continue  # written now
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)


def _spec_features(prepared):
    """The features written for a prepared task: its own, carrying its shift spec (so that a
    dataset loaded from the export or the Hub gives the spec back: metashift_hf.shift_spec(ds))."""
    first = next(iter(prepared.dataset.values()), None)
    if first is None:
        return None  # write_config reports the empty task
    return features_with_spec(first.features, prepared.spec)


def write_spec(path: Path, spec: ShiftSpec) -> None:
    with atomic_file(path, "w") as f:
        f.write(spec.to_json())


def published_facts(prepared, art: Artifact) -> dict[str, bytes]:
    """The task's meta-graph facts files, written beside its shards (file name -> bytes): each context subset's
    community and distance to the largest community (builders.meta_graph_facts), what ``evaluate`` and ``bugs`` read
    when there is no artifact, and every pair of each class's kept subsets (builders.pair_distances), what
    ``distance --task`` reads."""
    rows = []
    for ds in prepared.dataset.values():
        if "contexts" not in ds.column_names:
            continue
        names = ds.features["label"].names
        cols = ds.select_columns(["label", "contexts"]).to_dict()
        rows += [(names[y], cs) for y, cs in zip(cols["label"], cols["contexts"])]
    buf = io.BytesIO()
    MetaGraphFacts.of_artifact(art, rows).write(buf)
    return {FACTS_FILE: buf.getvalue(), PAIRS_FILE: PairDistances.of_artifact(art, prepared.spec.classes).to_bytes()}


def with_facts_digests(spec: ShiftSpec, facts: Mapping[str, bytes]) -> ShiftSpec:
    """``spec`` recording the sha256 of each published facts file (spec_version 6), so no edit passes unseen."""
    digests = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(facts.items())}
    return replace(spec, facts_sha256=digests, spec_version=SPEC_VERSION)


def read_note(repo_dir: Path) -> str:
    """The collection note of an exported repo folder (from its shift spec file)."""

    if repo_dir.name == INDEX_REPO:
        return cards.INDEX_NOTE
    specs = sorted(Path(repo_dir).glob(f"*/{SPEC_FILE}"))
    if len(specs) != 1:
        return ""
    return cards.collection_note(read_spec_file(specs[0]))


def export_tasks(
    tasks: list[str],
    origin: TaskOrigin,
    out_dir: str | Path,
    *,
    layout: str = "repo-per-task",
    namespace: str | None = None,
    force: bool = False,
    on_missing: str = "error",
    cache_dir: str | Path | None = None,
) -> list[ExportedRepo]:
    """Prepare each task on ``origin``'s build (its images, seed and options: :class:`TaskOrigin`) and export it
    (see module docstring).

    Every task is planned once, before any is built (``origin.open``), and materialised from that plan by
    ``TaskData.prepare``. ``on_missing``: images missing or corrupt in the images stop the export ("error") or
    are left out ("skip"); ``cache_dir``: the ``datasets`` cache ``TaskData.prepare`` uses.
    Returns every repo written, task repos first and the ``metashift`` index repo last.
    """

    if layout not in LAYOUTS:
        raise UnknownNameError(f"layout {layout!r} is not known", f"use one of: {', '.join(LAYOUTS)}")
    origin = replace(origin, artifact=origin.build("export"))  # loaded once, for the plans and the cards
    with _claim_out(out_dir, tasks, layout, origin, force) as out:  # before the (long) preparation
        opened = origin.open(tasks)  # every task plans before any is built
        done = [t for t, d in opened.items() if d.form != "artifact"]
        if done:  # a folder or repo among the task ids: its cards would describe another build
            raise InputFormatError(
                f"{', '.join(map(str, done))}: exported already ({opened[done[0]].where}); export plans task ids "
                "on a build",
                "name task ids of the build (`metashift-hf tasks list --artifact ARTIFACT`), or push an export "
                "folder as it is with `metashift-hf publish --from-export FOLDER`",
            )
        prepared = [opened[t].prepare(on_missing=on_missing, cache_dir=cache_dir) for t in tasks]
        ids = _check_prepared(prepared, layout, namespace)
        return _write_repos(prepared, origin.artifact, out, ids, layout, namespace, force)


@dataclass(frozen=True)
class VerifyResult:
    config: str
    splits: dict[str, int]  # split -> rows checked
    streaming_rows: int


_VERIFY_BATCH = 256  # rows held in memory at once while comparing (images are ~150 kB each)


def _undecoded(ds):
    import datasets

    return ds.cast_column("image", datasets.Image(decode=False)) if "image" in ds.features else ds


def _expected_rows(ds):
    """Rows of a prepared split in export order, a batch at a time, image bytes embedded."""
    for batch in _embedded_batches(export_order(_undecoded(ds)), _VERIFY_BATCH):
        yield from batch.to_pylist()


def _shard_rows(files: list[Path]):
    import pyarrow.parquet as pq

    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=_VERIFY_BATCH):
            yield from batch.to_pylist()


def verify_export(repo_dir: str | Path, config: str, expected=None, *, streaming: bool = True) -> VerifyResult:
    """Load ``repo_dir`` back with ``datasets.load_dataset`` and check it row by row.

    The reference is ``expected`` (a DatasetDict, e.g. ``PreparedTask.dataset``) in export order
    (sorted by image id), or else the parquet shards read directly. Compared: row count, image ids,
    labels and the exact image bytes (which must be embedded). With ``streaming`` the first split
    is also read with ``streaming=True`` and must give the same image ids.
    """
    import itertools

    import datasets

    repo_dir = Path(repo_dir)
    if not (repo_dir / "README.md").is_file():
        raise InputFormatError(f"{repo_dir} is not an exported repo (no README.md)", "run `metashift-hf export` first")
    where = f"{repo_dir} config {config!r}"
    fix = "export again; the shards do not match the task"
    # A fresh cache: a cached copy of an earlier export would hide what is on disk now.
    with tempfile.TemporaryDirectory(prefix="metashift-verify-") as cache:
        loaded = datasets.load_dataset(str(repo_dir), config, cache_dir=cache)
        checked = {}
        for split, ds in loaded.items():
            if expected is not None and split not in expected:
                raise MetashiftError(f"{where}: split {split!r} is not in the prepared task", fix)
            ref = (
                _expected_rows(expected[split])
                if expected is not None
                else _shard_rows(sorted((repo_dir / config).glob(f"{split}-*.parquet")))
            )
            got = (
                row
                for batch in _undecoded(ds).with_format("arrow").iter(batch_size=_VERIFY_BATCH)
                for row in batch.to_pylist()
            )
            n = 0
            for a, b in itertools.zip_longest(got, ref):
                if a is None or b is None:
                    raise MetashiftError(
                        f"{where} split {split!r}: loaded {len(ds)} rows, the reference has a different count", fix
                    )
                for key in ("image_id", "label"):
                    if key in a and a[key] != b.get(key):
                        raise MetashiftError(
                            f"{where} split {split!r} row {n}: {key} {a[key]!r} != {b.get(key)!r}", fix
                        )
                if "image" in a:
                    mine, theirs = (a["image"] or {}).get("bytes"), (b.get("image") or {}).get("bytes")
                    if not mine:
                        raise MetashiftError(
                            f"{where} split {split!r} row {n}: image bytes are not embedded",
                            "export again with this version (images must be embedded)",
                        )
                    if mine != theirs:
                        raise MetashiftError(
                            f"{where} split {split!r} row {n}: image bytes differ",
                            "export again; the image bytes must be the original files'",
                        )
                n += 1
            checked[split] = n
        if expected is not None and set(expected) != set(checked):
            raise MetashiftError(f"{where}: splits {sorted(checked)} loaded, the task has {sorted(expected)}", fix)
        streamed = 0
        if streaming:
            first = next(iter(loaded))
            stream = datasets.load_dataset(str(repo_dir), config, streaming=True, cache_dir=cache)[first]
            key = "image_id" if "image_id" in stream.features else next(iter(stream.features))
            ids = [r[key] for r in stream.select_columns([key])]  # one column: no image decoding
            streamed = len(ids)
            if streamed != checked[first] or (key != "image" and ids != list(loaded[first][key])):
                raise MetashiftError(
                    f"{where}: streaming gave {streamed} rows that differ from the {checked[first]} loaded", fix
                )
    return VerifyResult(config, checked, streamed)
