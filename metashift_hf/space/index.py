"""The Space's index of published tasks: what the Tasks view lists and filters, read from an export folder or a Hub
namespace through the project's one spec reader (``metashift_hf.shift_spec``), so a tampered spec is refused here
as the CLI refuses it.

Only each task's ``<config>/shift_spec.json`` is read to list the tasks (no parquet row, no image); a task's rows,
meta-graph facts and images are read when a view first asks for them (:mod:`metashift_hf.space.graphs`).
"""

from __future__ import annotations

import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

import metashift_hf

from ..cards.shift_words import first_sentence, shift_label
from ..core.errors import InputFormatError, MetashiftError
from ..hub.publish import COLLECTION_TITLE
from ..hub.shards import REPO_PREFIX, SPEC_FILE
from ..tasks.design_check import DesignCheck, design_check, design_verdict
from ..tasks.families import TASK_FAMILIES
from ..tasks.spec import ShiftSpec


logger = logging.getLogger(__name__)

TASK_COLUMNS = ("task", "family", "classes", "shift", "measured", "verdict", "level", "train", "test", "rows", "d")
SOURCE_FIX = "pass an export folder (metashift-hf export --out) or a Hub namespace that `metashift-hf publish` filled"


@dataclass(frozen=True)
class IndexedTask:
    """One published task, as the Tasks view lists it (from its shift spec alone)."""

    task_id: str
    repo: str  # what open_task takes: the repo folder or the Hub dataset repo id
    config: str
    family: str
    classes: tuple[str, ...]
    shift_type: str  # declared by the design
    measured: str  # the type measured from the rows ("" when the spec has no measurement)
    verdict: str  # the design check's verdict on the declared type (tasks.design_check; "" where none applies)
    level: str  # the level's name for level families ("" otherwise)
    split_sizes: Mapping[str, int]
    distance: float | None
    spec: ShiftSpec = field(repr=False, compare=False)

    @property
    def rows(self) -> int:
        return int(sum(self.split_sizes.values()))


@dataclass(frozen=True)
class TaskIndex:
    """Every published task of a source, sorted by task id, and the classes they hold."""

    source: str
    tasks: tuple[IndexedTask, ...]

    @functools.cached_property
    def by_id(self) -> dict[str, IndexedTask]:
        return {t.task_id: t for t in self.tasks}

    @functools.cached_property
    def classes(self) -> dict[str, tuple[str, ...]]:
        """Class -> the ids of the tasks holding it, both sorted."""
        out: dict[str, list[str]] = {}
        for t in self.tasks:
            for c in t.classes:
                out.setdefault(c, []).append(t.task_id)
        return {c: tuple(out[c]) for c in sorted(out)}

    @functools.cached_property
    def frame(self) -> pd.DataFrame:
        """The tasks table (:data:`TASK_COLUMNS`), one row per task."""
        return pd.DataFrame(
            [
                {
                    "task": t.task_id,
                    "family": t.family,
                    "classes": ", ".join(t.classes),
                    "shift": t.shift_type,
                    "measured": t.measured,
                    "verdict": t.verdict,
                    "level": t.level,
                    "train": int(t.split_sizes.get("train", 0)),
                    "test": int(t.split_sizes.get("test", 0)),
                    "rows": t.rows,
                    "d": t.distance,
                }
                for t in self.tasks
            ],
            columns=list(TASK_COLUMNS),
        )

    def task(self, task_id: str) -> IndexedTask:
        try:
            return self.by_id[task_id]
        except KeyError:
            raise InputFormatError(
                f"no task {task_id!r} in {self.source}", "pick a task from the Tasks table"
            ) from None


def family(spec: ShiftSpec) -> str:
    """A task's family: the name of the task-family registry's family that owns its id (``TASK_FAMILIES``, the one
    list of families). A matched task's id is owned through the artifact's match registry, which a published task
    does not carry: its spec's registry facts say it is one. An id no family owns (a task from another tool) is
    ``other``."""
    if spec.registry is not None:
        return TASK_FAMILIES.get("matched").name
    for fam in TASK_FAMILIES.values():
        # every family but the matched one owns ids by their name alone ("valid on this artifact or not")
        if fam.name != "matched" and fam.owns(None, spec.task_id):
            return fam.name
    return "other"


def entry(spec: ShiftSpec, repo: str, config: str) -> IndexedTask:
    """The index row of the task ``spec`` describes, published at ``repo`` (config ``config``)."""
    return IndexedTask(
        task_id=spec.task_id,
        repo=repo,
        config=config,
        family=family(spec),
        classes=tuple(spec.classes),
        shift_type=spec.shift_type,
        measured=spec.measured.type if spec.measured is not None else "",
        verdict=design_verdict(spec) or "",  # the verdict alone: its p-values are the task page's
        level=spec.level.name if spec.level is not None else "",
        split_sizes=dict(spec.split_sizes),
        distance=spec.distance.value if spec.distance is not None else None,
        spec=spec,
    )


def _repo_folders(root: Path) -> list[Path]:
    """The repo folders of an export root (or the root itself when it is one repo), links and dot folders skipped."""
    if any(root.glob(f"*/{SPEC_FILE}")):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def folder_tasks(root: "str | os.PathLike") -> list[IndexedTask]:
    """Every config with a ``shift_spec.json`` in the repo folders of export folder ``root``."""
    root = Path(root)
    out = []
    for repo in _repo_folders(root):
        for spec_file in sorted(repo.glob(f"*/{SPEC_FILE}")):
            if spec_file.is_symlink() or spec_file.parent.is_symlink():
                continue  # never followed: what publish would not upload is not shown either
            spec = metashift_hf.shift_spec(str(spec_file))
            if spec.task_id != spec_file.parent.name:
                raise InputFormatError(
                    f"{spec_file}: the spec is task {spec.task_id!r}, its folder is {spec_file.parent.name!r}",
                    "export the task again (a config folder is named for its task)",
                )
            out.append(entry(spec, str(repo), spec_file.parent.name))
    return out


def hub_repos(namespace: str) -> list[str]:
    """The dataset repos of ``namespace``'s MetaShift collection (else its ``metashift-*`` datasets)."""
    from huggingface_hub import HfApi  # heavy optional import: only a Hub source needs it

    api = HfApi()
    found = [c for c in api.list_collections(owner=namespace, limit=100) if c.title == COLLECTION_TITLE]
    if found:
        items = api.get_collection(found[0].slug).items
        repos = [i.item_id for i in items if i.item_type == "dataset"]
    else:
        repos = [d.id for d in api.list_datasets(author=namespace, search=REPO_PREFIX)]
    return sorted(r for r in repos if r.split("/")[-1].startswith(REPO_PREFIX))


def hub_tasks(namespace: str, workers: int = 8) -> list[IndexedTask]:
    """Every task repo of a Hub namespace, each spec read through ``metashift_hf.shift_spec`` (one repo, one task)."""
    repos = hub_repos(namespace)

    def one(repo: str) -> IndexedTask:
        spec = metashift_hf.shift_spec(repo)
        return entry(spec, repo, spec.task_id)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, repos))


def load_index(source: "str | os.PathLike") -> TaskIndex:
    """The index of an export folder or a Hub namespace; an empty one or two tasks of one id are refused."""
    text = str(source)
    if not text.strip():  # Path("") is the working directory: a blank --from is a mistake, not "here"
        raise InputFormatError("--from is blank", SOURCE_FIX)
    if Path(text).is_dir():
        tasks = folder_tasks(text)
    elif "/" not in text and text:
        try:
            tasks = hub_tasks(text)
        except MetashiftError:
            raise
        except Exception as exc:  # a network or Hub error: say which source could not be listed
            raise InputFormatError(f"Hub namespace {text!r} could not be listed ({exc})", SOURCE_FIX) from None
    else:
        raise InputFormatError(f"--from {text!r} is neither an export folder nor a Hub namespace", SOURCE_FIX)
    if not tasks:
        raise InputFormatError(f"{text} holds no exported task (no <repo>/<config>/{SPEC_FILE})", SOURCE_FIX)
    tasks.sort(key=lambda t: t.task_id)
    seen = [t.task_id for t in tasks]
    twice = sorted({t for t in seen if seen.count(t) > 1})
    if twice:
        raise InputFormatError(f"{text} holds task(s) {', '.join(twice)} more than once", "keep one copy of each task")
    return TaskIndex(text, tuple(tasks))


def filter_tasks(
    index: TaskIndex,
    *,
    family: str = "",
    shift: str = "",
    measured: str = "",
    cls: str = "",
    text: str = "",
) -> pd.DataFrame:
    """The tasks table filtered: exact family / declared shift / measured shift, a class held, text in the task id."""
    df = index.frame
    keep = pd.Series(True, index=df.index)
    if family:
        keep &= df["family"] == family
    if shift:
        keep &= df["shift"] == shift
    if measured:
        keep &= df["measured"] == measured
    if cls:
        keep &= pd.Series([cls in t.classes for t in index.tasks], index=df.index)
    if text:
        keep &= df["task"].str.contains(text, regex=False, case=False)
    return df[keep].reset_index(drop=True)


@dataclass(frozen=True)
class TaskPage:
    """What a task's page shows: its sentence, groups, measured shift and the lines that use it."""

    entry: IndexedTask
    sentence: str  # Markdown: **bold** and `code` only
    shift_words: str
    groups: pd.DataFrame  # split, group, class, contexts, n
    measured: pd.DataFrame  # split, n, P(S) TV, P(Y|S) TV, type
    measured_note: str
    load_line: str
    evaluate_line: str


def task_page(index: TaskIndex, task_id: str) -> TaskPage:
    e = index.task(task_id)
    spec = e.spec
    groups = pd.DataFrame(
        [
            {"split": split, "group": g.group, "class": g.cls, "contexts": ", ".join(g.contexts), "n": g.n}
            for split, gs in spec.groups().items()
            for g in gs
        ],
        columns=["split", "group", "class", "contexts", "n"],
    )
    m = spec.measured
    check = design_check(spec)
    measured = pd.DataFrame(
        [
            {
                "split": s.split,
                "n": s.n,
                "P(S) TV": s.p_s_tv,
                "P(Y|S) shift": s.conditional,
                "type": s.type,
            }
            for s in (m.splits if m is not None else ())
        ],
        columns=["split", "n", "P(S) TV", "P(Y|S) shift", "type"],
    )
    repo = e.repo
    return TaskPage(
        entry=e,
        sentence=first_sentence(spec),
        shift_words=shift_label(spec),
        groups=groups,
        measured=measured,
        measured_note=_measured_note(spec, check),
        load_line=f'load_dataset("{repo}", "{e.config}")',
        evaluate_line=f"metashift-hf evaluate --model efficientnet-lite0 --task {repo} --out eval/",
    )


def _measured_note(spec: ShiftSpec, check: DesignCheck | None) -> str:
    """The task page's words under the measured shift: the design check's verdict (declared vs measured, p-values,
    rows needed for power 0.8 where underpowered), then the spec's own note."""
    m = spec.measured
    if m is None:
        return "no measurement in this spec (an export before spec version 2)"
    head = f"declared {check.declared} (the design); verdict: {check.verdict}. {check.why}" if check else ""
    return " ".join(part for part in (head, m.note) if part)


def families(index: TaskIndex) -> list[str]:
    return sorted({t.family for t in index.tasks})


def shift_types(index: TaskIndex) -> list[str]:
    return sorted({t.shift_type for t in index.tasks} | {t.measured for t in index.tasks if t.measured})


def class_tasks(index: TaskIndex, cls: str) -> Sequence[str]:
    """The tasks holding ``cls``, the one listing most of its contexts first (its meta-graph is the widest)."""
    if cls not in index.classes:
        raise InputFormatError(f"no class {cls!r} in {index.source}", "pick a class from the Classes view")

    def contexts(task_id: str) -> int:
        spec = index.by_id[task_id].spec
        return len({c for gs in spec.groups().values() for g in gs if g.cls == cls for c in g.contexts})

    return sorted(index.classes[cls], key=lambda t: (-contexts(t), t))
