"""The one task resolver: :func:`open_task` turns a task request into a :class:`TaskData`, whatever its form.

    open_task(TaskRef("paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip"))   # planned from a build
    open_task("out/metashift-paper-dg-cat-dog-1")                                # an exported repo folder
    open_task("NS/metashift-paper-dg-cat-dog-1")                                  # a Hub dataset repo
    open_task(load_dataset("NS/metashift-paper-dg-cat-dog-1", "paper-dg-cat-dog-1"))   # a loaded dataset
    open_task(TaskRef("NS/metashift", config="paper-dg-cat-dog-1", revision="v1"))     # any of them, with options

Whatever the form, the result is a :class:`TaskData` (``metashift_hf.hub.task_data``): the task's rows per split
(a ``TaskPlan``, rows in export order, :data:`metashift_hf.hub.shards.SORT_KEYS`, so every form gives the same rows
in the same order and a training run gives the same numbers from each), its shift spec and where the pixels are.
From a folder, a repo or a dataset nothing else is needed: the images are the parquet's own bytes, and sizes,
seed and options are the ones the spec records, so ``--set`` and ``--seed`` only apply to a task id planned on
an artifact. A task id is planned here once; :meth:`TaskData.prepare` materialises that plan.

:class:`TaskOrigin` says where the tasks of one run come from (a build, or an export folder / Hub namespace);
its ``open(tasks)`` resolves each through :func:`open_task`. :func:`shift_spec` reads any form's spec.
"""

from __future__ import annotations

import logging
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import datasets

from ..builders.artifact import Artifact
from ..builders.images import ImageSource
from ..core import options as opt
from ..core.errors import EmptyGroupError, EmptyResultError, InputFormatError, MetashiftError, UnknownNameError
from ..core.fsutil import describe_path
from ..core.names import terminal_safe
from ..tasks.families import plan_task
from ..tasks.plan import TaskPlan
from ..tasks.spec import SPEC_VERSION, ShiftSpec
from .repo_files import (
    cached_snapshot,
    configs_of,
    hub_call,
    hub_files,
    hub_offline,
    hub_text,
    offline_task_files,
    offline_task_rows,
    pick_config,
    read_spec_file,
    read_text_file,
)
from .shards import REPO_PREFIX, SPEC_FILE, validate_repo_name
from .task_data import (
    DEFAULT_SEED,
    TASK_FORMS_FIX,
    PreparedTask,
    TaskData,
    TaskRef,
    frozen_options,
    hash_key,
    options_key,
    task_ref,
)
from .task_repo import (
    check_repo,
    exported_folder,
    folder_cache_dir,
    folder_facts,
    folder_listing,
    hub_facts,
    load_shards,
    repo_folder,
)
from .task_rows import as_dataset_dict, check_rows, dataset_spec


logger = logging.getLogger(__name__)


def _checked_rows(
    load: "Callable[[], datasets.DatasetDict]",
    where: str,
    spec: ShiftSpec,
    *,
    file_spec: bool,
    whole: bool,
    config: str | None,
) -> "Callable[[], datasets.DatasetDict]":
    """``load`` followed by the row checks: (``file_spec``, a folder or repo) the parquet's copy of the spec equals
    ``spec``, the config's shift_spec.json, and every row matches it (:func:`check_rows`)."""

    def rows() -> "datasets.DatasetDict":
        dd = load()
        warn_unrecorded_members(
            spec, f"{config}/{SPEC_FILE} of {where}" if file_spec else f"the shift spec of {where}"
        )
        if file_spec:  # the parquet's copy of the spec (its features) must equal the file's
            dataset_spec(dd, where, spec)
        check_rows(dd, spec, where, config, whole=whole)
        return dd

    return rows


def warn_unrecorded_members(spec: ShiftSpec, where: str) -> None:
    """Say what is not checked when a spec records no split members (spec_version 1-4; also a newer spec edited
    down to 4, X-16): its rows are checked for groups, sizes and duplicates, not for the split they were planned
    in, so a row moved between splits or changed would pass without a word."""
    if spec.members is None:
        logger.warning(
            f"{where} is spec_version {spec.spec_version} and records no split members: the rows are not checked "
            "against the rows each split was exported with (a row moved to another split, or changed, would go "
            f"unnoticed). Fix: export or publish the task again with this package (spec_version {SPEC_VERSION} "
            "records them), or use a repo revision exported since"
        )


def _open_artifact(ref: TaskRef) -> TaskData:
    task = ref.task
    if isinstance(task, TaskPlan):  # already planned (experiments plan every task before training)
        art = None if ref.artifact is None else Artifact.load(ref.artifact)
        return TaskData(ref, "artifact", "task plan", task.spec, artifact=art, planned=task)
    if ref.artifact is not None and (exported_folder(ref.artifact) or exported_folder(task)):
        folder = ref.artifact if exported_folder(ref.artifact) else task
        raise InputFormatError(
            f"{folder} is an exported task folder, not a build artifact: it carries its rows, spec and images",
            f"pass it as the task (--task {folder}) and drop --artifact",
        )
    if isinstance(task, str) and task != task.strip() and task.strip() and not Path(task).exists():
        raise UnknownNameError(
            f"task {terminal_safe(task)!r} begins or ends with white space",
            f"pass {terminal_safe(task.strip())!r} (without the spaces)",
        )
    if ref.artifact is None:
        if isinstance(task, (str, os.PathLike)) and os.path.lexists(task):  # a file, a FIFO, a link to nowhere
            what, name = describe_path(task), Path(task).name
            raise InputFormatError(
                f"{terminal_safe(str(task))} is {terminal_safe(what)}, not a task",
                f"pass the task folder that holds it ({Path(task).parent})" if name == SPEC_FILE else TASK_FORMS_FIX,
            )
        if isinstance(task, os.PathLike) or (isinstance(task, str) and task.startswith(("/", "./", "../", "~"))):
            raise UnknownNameError(f"there is no folder {terminal_safe(str(task))}", TASK_FORMS_FIX)
        if not isinstance(task, (str, os.PathLike)):
            raise InputFormatError(f"cannot read a task from a {type(task).__name__}", TASK_FORMS_FIX)
        if task.count("/") == 1:  # meant as a Hub repo id NAMESPACE/NAME (task ids hold no '/'): say which part
            for part, what in zip(task.split("/"), ("the namespace", "the repo name")):
                validate_repo_name(part, f"no folder {terminal_safe(task)!r} here, and as a Hub repo id {what}")
        raise UnknownNameError(
            f"task {terminal_safe(str(task))!r} is made from an artifact, and none was given (nor is "
            "it an exported folder or a Hub repo id)",
            TASK_FORMS_FIX,
        )
    if ref.config is not None or ref.revision is not None:
        raise InputFormatError(
            "--config/--revision pick a config of an exported folder or Hub repo, not of a task id "
            "planned on --artifact",
            "drop --config/--revision, or drop --artifact and pass the repo",
        )
    art = Artifact.load(ref.artifact)
    tp = _plan_explained(task, art, ref.planning_seed, ref.options)
    return TaskData(ref, "artifact", f"artifact {art.root}", tp.spec, artifact=art, planned=tp)


_TRY_SCALES = (0.5, 0.25, 0.1, 0.05)


class TaskTooBigError(EmptyResultError):
    """A task whose sizes the artifact cannot supply; ``scale``: the largest of :data:`_TRY_SCALES` at which it
    plans (None: none does, or the task takes no scale), which the fix names."""

    def __init__(self, what: str, fix: str = "", scale: float | None = None) -> None:
        super().__init__(what, fix)
        self.scale = scale


def fitting_scale(ref: TaskRef) -> float | None:
    """The largest of 0.5, 0.25, 0.1, 0.05 at which task id ``ref`` plans on its artifact, or None (also when
    the task takes no ``scale``)."""
    art = Artifact.load(ref.artifact)
    for scale in _TRY_SCALES:
        try:
            plan_task(ref.task, art, seed=ref.planning_seed, **{**ref.options, "scale": scale})
        except EmptyResultError:
            continue  # still too big: try a smaller scale
        except MetashiftError:
            return None  # the task takes no scale option (or fails for another reason)
        return scale
    return None


def _plan_explained(task: str, art: Artifact, seed: int, options: Mapping[str, Any]) -> TaskPlan:
    """``plan_task``; a task whose sizes the artifact cannot supply raises an EmptyResultError whose fix is the
    concrete option that makes it plan, e.g. ``--set paper-subpop-cat-dog-p12:scale=0.5``."""
    try:
        return plan_task(task, art, seed=seed, **options)
    except EmptyGroupError as exc:
        raise EmptyGroupError(f"task {task} cannot be planned: {exc.what}", exc.fix) from None
    except EmptyResultError as exc:
        scale = fitting_scale(TaskRef(task, artifact=art, seed=seed, options=options))
        fix = (
            f"pass --set {task}:scale={scale} (the largest of {', '.join(map(str, _TRY_SCALES))} at which it "
            f"plans; Python: options={{'scale': {scale}}})"
            if scale is not None
            else f"pass smaller sizes for this task with --set {task}:KEY=VALUE ({exc.fix})"
        )
        given = (
            "the default sizes"
            if not options
            else "options " + ", ".join(f"{k}={v}" for k, v in sorted(options.items()))
        )
        raise TaskTooBigError(f"task {task} cannot be planned with {given}: {exc.what}", fix, scale) from None


def _open_folder(ref: TaskRef) -> TaskData:
    if ref.revision is not None:  # a folder has one state: a revision would be ignored without a word
        raise InputFormatError(
            f"--revision {terminal_safe(ref.revision)} names a Hub revision; {terminal_safe(str(ref.task))} is a "
            "local folder, which has none",
            "drop --revision (Python: revision=), or pass the Hub repo id NAMESPACE/NAME",
        )
    repo, name = repo_folder(Path(ref.task), ref.config)
    where = f"exported folder {repo} (config {name})"
    stats = folder_listing(repo)
    files = {f: st.st_size for f, st in stats.items()}
    spec, spec_sha = check_repo(where, files, name, lambda f: read_text_file(repo / f, f"{f} of {where}"))
    cache = folder_cache_dir(repo, stats)
    load = _checked_rows(
        lambda: load_shards(where, lambda: datasets.load_dataset(str(repo), name, cache_dir=cache)),
        where,
        spec,
        file_spec=True,
        whole=True,
        config=name,
    )
    return TaskData(
        ref, "folder", where, spec, load_rows=load, load_facts=folder_facts(repo, name), spec_sha256=spec_sha
    )


def _open_hub(ref: TaskRef) -> TaskData:
    """A Hub dataset repo; offline (``HF_HUB_OFFLINE``) its snapshot in the local Hub cache is read as a folder
    (card, spec, shards and facts from the cached files: ``datasets`` alone cannot load a repo offline that only
    ``hf download`` fetched), and a partial copy is named as the cache's gap, not as the repo's."""
    repo_id, revision = str(ref.task), ref.revision
    files = hub_files(repo_id, revision)
    snapshot = None
    if hub_offline():
        offline_task_files(repo_id, revision, files, ref.config)
        snapshot = cached_snapshot(repo_id, revision)[1]
    name = pick_config(f"Hub dataset repo {repo_id}", configs_of(files), ref.config)
    where = f"Hub dataset repo {repo_id} (config {name}" + (f", revision {revision})" if revision else ")")
    if snapshot is None:
        spec, spec_sha = check_repo(where, files, name, lambda f: hub_text(repo_id, f, revision, files.get(f)))
        rows = lambda: hub_call(  # noqa: E731 -- one of two row loaders
            repo_id,
            name,
            lambda: load_shards(where, lambda: datasets.load_dataset(repo_id, name, revision=revision)),
            revision,
        )
    else:
        spec, spec_sha = check_repo(where, files, name, lambda f: read_text_file(snapshot / f, f"{f} of {where}"))
        cache = folder_cache_dir(snapshot, {f: (snapshot / f).stat() for f in files})

        def rows() -> "datasets.DatasetDict":  # the shards are asked for only here: spec and facts need none
            offline_task_rows(repo_id, revision, files, name)
            return load_shards(where, lambda: datasets.load_dataset(str(snapshot), name, cache_dir=cache))

    load = _checked_rows(rows, where, spec, file_spec=True, whole=True, config=name)
    facts = hub_facts(repo_id, files, name, revision, snapshot=snapshot, spec_version=spec.spec_version)
    return TaskData(ref, "hub", where, spec, load_rows=load, load_facts=facts, spec_sha256=spec_sha)


def _open_loaded(ref: TaskRef) -> TaskData:
    task = ref.task
    if (ref.config, ref.revision) != (None, None):
        raise InputFormatError(
            f"config={ref.config!r}, revision={ref.revision!r}: a loaded {type(task).__name__} is "
            "one config at one revision already",
            "drop config=/revision=, or pass the repo id or folder",
        )
    if isinstance(task, PreparedTask):
        where = f"prepared task {task.task_id}"
        dd, spec, whole = task.dataset, task.spec, True
    else:
        where, dd, whole = "dataset", as_dataset_dict(task), False
        spec = dataset_spec(dd, where)
    art = None if ref.artifact is None else _build_of(spec, where, ref.artifact)
    return TaskData(
        ref,
        "dataset",
        where,
        spec,
        artifact=art,
        load_rows=_checked_rows(lambda: dd, where, spec, file_spec=False, whole=whole, config=None),
    )


def _build_of(spec: ShiftSpec, where: str, artifact: "str | os.PathLike | Artifact") -> Artifact:
    """The artifact a loaded dataset says it was prepared from; another build is refused (its meta-graph
    would describe other subsets)."""
    art = Artifact.load(artifact)
    if spec.artifact_hash and spec.artifact_hash != art.content_hash:
        raise InputFormatError(
            f"{where} was prepared from artifact {spec.artifact_hash[:12]}, not from {art.root} "
            f"({art.content_hash[:12]})",
            "pass the artifact the task was prepared from, or drop it",
        )
    return art


def open_task(task: "TaskRef | Any") -> TaskData:
    """Resolve a task request (a :class:`TaskRef`, or a bare task: see the module docstring) into a
    :class:`TaskData`; the one resolver every command and library function calls."""
    if isinstance(task, TaskData):
        return task
    ref = task_ref(task)
    if isinstance(ref.task, TaskData):  # resolved already (a run's entry given as a TaskData)
        return ref.task
    if isinstance(ref.task, (datasets.IterableDataset, datasets.IterableDatasetDict)):
        raise InputFormatError(
            "a streamed (iterable) dataset has no row order to score against",
            "load it without streaming=True, or pass the repo id and let metashift-hf load it",
        )
    opener = {"artifact": _open_artifact, "folder": _open_folder, "hub": _open_hub, "dataset": _open_loaded}[ref.form]
    data = opener(ref)
    if data.form != "artifact":
        # a loaded object may come with the images it was prepared from; a folder or repo id never needs them
        refuse_planning_options(
            data.spec, data.where, ref.seed, ref.options, ref.images if data.form in ("folder", "hub") else None
        )
    return data


@dataclass(frozen=True)
class TaskOrigin:
    """Where the tasks of one run come from (``export``, ``publish``, ``experiment``, ``experiment compare``): what
    a :class:`TaskRef` says for one task, said once for several task ids.

    artifact: the build every task id is planned on (with ``images``, ``seed``, ``options``), loaded once; or
    source: an export folder or a Hub namespace, where task T is ``SOURCE/metashift-T`` (planned already, its own
        images: ``images``, ``seed`` and ``options`` are refused for it as for any folder or repo).
    images, seed: as :class:`TaskRef`'s.
    options: every task's options (``{"scale": 0.5}``); ``task_options[T]`` replaces them for task T
        (``--set T:KEY=VALUE``: tasks take different options, paper tasks a ``scale``, collections none).
    """

    artifact: "str | os.PathLike | Artifact | None" = None
    source: "str | os.PathLike | None" = None
    images: "str | os.PathLike | ImageSource | None" = None
    seed: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    task_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.artifact is None) == (self.source is None):
            raise InputFormatError(
                "a run's tasks come from either a build (--artifact; Python: artifact=) or exported "
                "tasks (--from EXPORT_FOLDER or a Hub NAMESPACE; Python: source=), and here "
                + ("neither is given" if self.artifact is None else "both are given"),
                "pass exactly one of --artifact and --from",
            )
        source = self.source
        if isinstance(source, str) and "/" not in source.rstrip("/") and not Path(source).is_dir():
            validate_repo_name(source.rstrip("/"), "--from: no folder here, and the Hub namespace")  # the Hub's rule
        if self.seed is not None:
            object.__setattr__(self, "seed", opt.seed(self.seed, "seed"))
        # read-only, so an origin cannot change after its tasks were resolved; checked as TaskRef's options
        object.__setattr__(self, "options", frozen_options(self.options, "options"))
        per_task = frozen_options(self.task_options, "task_options")
        object.__setattr__(
            self,
            "task_options",
            types.MappingProxyType({t: frozen_options(o, f"task_options[{t!r}]") for t, o in per_task.items()}),
        )

    def __hash__(self) -> int:
        return hash(
            (
                hash_key(self.artifact),
                hash_key(self.source),
                hash_key(self.images),
                self.seed,
                options_key(self.options),
                tuple(sorted((t, options_key(o)) for t, o in self.task_options.items())),
            )
        )

    @property
    def planning_seed(self) -> int:
        """The seed task ids are planned with."""
        return DEFAULT_SEED if self.seed is None else self.seed

    @property
    def inputs(self) -> tuple:
        """The user's inputs as paths, which a run's output folder may never be or hold (``core.fsutil.claimed_dir``)."""
        art = self.artifact.root if isinstance(self.artifact, Artifact) else self.artifact
        images = getattr(self.images, "path", None) if isinstance(self.images, ImageSource) else self.images
        return art, images, self.source

    def options_of(self, task: str) -> Mapping[str, Any]:
        """Task ``task``'s options: its own ``task_options`` entry, else the common ``options``."""
        return self.task_options.get(task, self.options)

    def ref(self, task: Any, artifact: "Artifact | None" = None) -> TaskRef:
        """Task id ``task`` as a :class:`TaskRef` (``artifact``: the build, loaded already).

        With a build, an entry that is itself an exported folder, a Hub repo id ``NAMESPACE/NAME`` or a loaded
        dataset is that task as it is (its own rows and images: ``images`` and ``seed`` go to the task ids only,
        so the forms mix in one run, e.g. a zoo's ``--tasks``)."""
        if self.source is None and not _task_id_entry(task):
            return TaskRef(task, options=self.options_of(task) if isinstance(task, str) else {})
        if self.source is not None:
            return TaskRef(
                f"{str(self.source).rstrip('/')}/{REPO_PREFIX}{task}",
                images=self.images,
                seed=self.seed,
                options=self.options_of(task),
            )
        return TaskRef(
            task, artifact=artifact or self.artifact, images=self.images, seed=self.seed, options=self.options_of(task)
        )

    def build(self, command: str) -> Artifact:
        """The build, loaded, for a ``command`` that plans and materialises tasks (export, publish); tasks from an
        export folder or Hub namespace are refused: they are exported already."""
        if self.artifact is None:
            raise InputFormatError(
                f"{command} plans tasks on a build; the tasks in {self.source} are exported already",
                "pass TaskOrigin(artifact=ARTIFACT, ...) (CLI: --artifact), or push an export folder as it is with "
                "`metashift-hf publish --from-export FOLDER`",
            )
        return Artifact.load(self.artifact)

    def open(self, tasks: Sequence[str]) -> dict[str, TaskData]:
        """Every task of the run, each resolved by :func:`open_task` before any work (the build loaded once)."""
        art = None if self.artifact is None else Artifact.load(self.artifact)
        return {t: open_task(self.ref(t, art)) for t in tasks}


def _task_id_entry(task: Any) -> bool:
    """Whether a run's entry ``task`` is a task id (planned on the run's build), not a task of its own: a folder,
    a Hub repo id (task ids hold no ``/``) or a loaded object (:attr:`TaskRef.form` decides, as for any task)."""
    if not isinstance(task, (str, os.PathLike)):
        return isinstance(task, TaskPlan)
    return TaskRef(task).form == "artifact"


def shift_spec(source: "TaskRef | Any") -> ShiftSpec:
    """The shift spec of ``source``: anything :func:`open_task` takes (the spec only: no parquet row or image is
    read), a ``ShiftSpec``, or a ``shift_spec.json`` file.

        metashift_hf.shift_spec(TaskRef("paper-dg-cat-dog-1", artifact="ARTIFACT", options={"scale": 0.5}))  # planned
        metashift_hf.shift_spec(prepared)                    # a PreparedTask (or a TaskPlan)
        metashift_hf.shift_spec(load_dataset(...))           # a Dataset / DatasetDict, prepared or loaded
        metashift_hf.shift_spec("out/metashift-paper-dg-cat-dog-1")             # an exported repo folder
        metashift_hf.shift_spec(TaskRef("out/metashift", config="paper-dg-cat-dog-1"))   # ... naming the config
        metashift_hf.shift_spec("out/metashift-class-cat/class-cat/shift_spec.json")  # the file itself
        metashift_hf.shift_spec("user/metashift-paper-dg-cat-dog-1")            # a Hub dataset repo
    """
    if isinstance(source, ShiftSpec):
        return source
    if isinstance(source, (str, os.PathLike)) and Path(source).is_file():
        return read_spec_file(source)
    return open_task(source).spec  # a dataset without a spec: open_task names what is missing


def refuse_planning_options(
    spec: ShiftSpec, where: str, seed: int | None, options: Mapping[str, Any] | None, images: Any
) -> None:
    """A dataset's rows are fixed: a seed, size option or image source that would change them is refused."""
    if options:
        raise InputFormatError(
            f"{where} is already planned (options {dict(spec.overrides) or 'default'} in its shift "
            f"spec); --set {', '.join(f'{k}={v}' for k, v in options.items())} cannot change it",
            "drop --set, or plan the task on an artifact with --artifact",
        )
    if seed is not None and seed != spec.seed:
        raise InputFormatError(
            f"{where} was sampled with seed {spec.seed}; --seed {seed} cannot change it",
            "drop --seed, or plan the task on an artifact with --artifact",
        )
    if images is not None:
        raise InputFormatError(
            f"{where} carries its own images; --images is only for a task id planned on --artifact", "drop --images"
        )


__all__ = ["open_task", "TaskOrigin", "TaskTooBigError", "shift_spec", "fitting_scale", "refuse_planning_options"]
