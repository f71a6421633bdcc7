"""A task request and the task it resolves to: :class:`TaskRef` (what every command's task flags and every library
function's ``task`` argument become; :attr:`TaskRef.form` is the one place that decides a task's form) and
:class:`TaskData` (one task, whatever form it came in: spec first, rows and images read lazily).

:meth:`TaskData.prepare` is the one materialiser: the one place a resolved task becomes a ``DatasetDict`` of
rows with their original JPEG bytes (a task id planned on an artifact through the ``metashift`` builder, given
the plan :func:`metashift_hf.hub.task_open.open_task` made; a folder, repo or dataset as it was read).
``metashift_hf.prepare``/``load``, export, publish and evaluate all materialise through it
(tests/test_architecture.py checks that no other module builds rows).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

import datasets

from ..builders.artifact import Artifact
from ..builders.images import ImageSource, open_images
from ..builders.meta_graph_facts import FACTS_FILE, MetaGraphFacts
from ..builders.pair_distances import NO_PAIRS_FIX, PAIRS_FILE, PairDistances
from ..builders.tags import MultiLabelDataset
from ..core import options as opt
from ..core.errors import EmptyResultError, InputFormatError, MissingImagesError
from ..tasks.metashift import Metashift, carries_spec, spec_of_dataset
from ..tasks.plan import TaskPlan
from ..tasks.spec import ShiftSpec
from .repo_files import looks_like_repo_id
from .task_repo import FACTS_FILES, FactsReader, hub_commit
from .task_rows import (
    OWN_COLUMNS,
    as_dataset_dict,
    dataset_classes,
    dataset_images,
    in_export_order,
    own_rows,
    plan_of_dataset,
)


if TYPE_CHECKING:
    import pandas as pd


logger = logging.getLogger(__name__)

TaskForm = Literal["artifact", "folder", "hub", "dataset"]
FACTS_FIX = (
    "download the repo again (another --revision) or export the task again with `metashift-hf export`; the "
    "published facts are written from the build and checked by the sha256 the shift spec records"
)


@dataclass
class PreparedTask:
    """A materialised task (:meth:`TaskData.prepare`): its splits with the original JPEG bytes, and its spec."""

    task_id: str
    dataset: "datasets.DatasetDict"
    spec: ShiftSpec


TASK_FORMS_FIX = (
    "pass a task id with --artifact ARTIFACT (Python: artifact=), a folder written by "
    "`metashift-hf export`, a Hub dataset repo id NAMESPACE/NAME, or a loaded Dataset/DatasetDict"
)
# The one default of a task's sampling seed: a task id planned on an artifact takes it when no seed is
# given; a folder or repo keeps the seed its spec records.
DEFAULT_SEED = 0
_LOADED = (PreparedTask, datasets.Dataset, datasets.DatasetDict)


def frozen_options(options: Any, name: str) -> Mapping[str, Any]:
    """A task's options as a read-only mapping of option names (``{"scale": 0.5}``); anything else is refused."""
    if options is None:
        return types.MappingProxyType({})
    if not isinstance(options, Mapping):
        raise opt.OptionError(
            f"{name} must be a mapping of option names to values, not a {type(options).__name__}",
            f"pass {name}={{'scale': 0.5}} (CLI: --set scale=0.5)",
        )
    bad = [k for k in options if not isinstance(k, str) or not k]
    if bad:
        raise opt.OptionError(f"{name} has option name(s) that are not names: {bad[:3]!r}", "name each option")
    return types.MappingProxyType(dict(options))


def options_key(options: Mapping[str, Any]) -> tuple:
    """A hashable, order-free key of task options (values by their repr: lists are options too)."""
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def hash_key(value: Any) -> Any:
    """``value`` when it is hashable, else its identity (a loaded dataset compares by identity too)."""
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return value


@dataclass(frozen=True)
class TaskRef:
    """One task request: what every command's task flags and every library function's ``task`` mean.

    task: a task id (planned on ``artifact``), an exported repo folder or one of its config folders, a Hub
        dataset repo id ``NAMESPACE/NAME``, a loaded ``Dataset``/``DatasetDict``, a ``PreparedTask`` or a ``TaskPlan``.
    artifact: the build a task id is planned on (``metashift-hf build``'s folder or a loaded ``Artifact``); with
        a loaded dataset or plan, the build it was prepared from (for its meta-graph: communities, distances).
    images: the image source of a task id planned on ``artifact`` (folder of ``<id>.jpg`` or GQA's images.zip).
    seed: the sampling seed of a task id (None: :data:`DEFAULT_SEED`); a folder or repo keeps its spec's.
    config: which config of a folder or Hub repo that holds several tasks.
    revision: a Hub branch, tag or commit (default: main).
    options: the task family's options (``{"scale": 0.5}``), parsed once by the family's options dataclass
        when the task is planned; a folder or repo is planned already and refuses them.
    """

    task: Any
    artifact: "str | os.PathLike | Artifact | None" = None
    images: "str | os.PathLike | ImageSource | None" = None
    seed: int | None = None
    config: str | None = None
    revision: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # every argument checked where the request is made, not deep inside a resolver or the datasets builder
        if isinstance(self.task, TaskRef):
            raise InputFormatError("a TaskRef's task is itself a TaskRef", "pass the inner TaskRef as it is")
        if self.task is None or (isinstance(self.task, str) and not self.task.strip()):
            raise opt.OptionError(
                f"the task is {'an empty string' if self.task is not None else 'None'}: no task is named",
                TASK_FORMS_FIX,
            )
        if self.seed is not None:
            object.__setattr__(self, "seed", opt.seed(self.seed, "seed"))
        for name in ("config", "revision"):
            if getattr(self, name) is not None:
                opt.text(getattr(self, name), name)
        # read-only, so a request cannot change after it was resolved
        object.__setattr__(self, "options", frozen_options(self.options, "options"))

    def __hash__(self) -> int:
        return hash(
            (
                hash_key(self.task),
                hash_key(self.artifact),
                hash_key(self.images),
                self.seed,
                self.config,
                self.revision,
                options_key(self.options),
            )
        )

    @property
    def form(self) -> TaskForm:
        """The form of the task (the one place that decides it): a task id with an artifact (or one that is
        neither a folder nor a repo id) is ``artifact``, an existing folder ``folder``, ``NAMESPACE/NAME``
        ``hub``, a loaded object ``dataset``."""
        task = self.task
        if isinstance(task, TaskData):
            return task.form
        if isinstance(task, TaskPlan):
            return "artifact"
        if isinstance(task, _LOADED):
            return "dataset"
        if self.artifact is not None:
            return "artifact"
        if isinstance(task, (str, os.PathLike)) and Path(task).is_dir():
            return "folder"
        if isinstance(task, str) and looks_like_repo_id(task):
            return "hub"
        return "artifact"

    @property
    def planning_seed(self) -> int:
        """The seed a task id is planned with."""
        return DEFAULT_SEED if self.seed is None else self.seed


def task_ref(task: "TaskRef | Any") -> TaskRef:
    """``task`` as a :class:`TaskRef` (a bare task, folder, repo id or dataset becomes ``TaskRef(task)``)."""
    return task if isinstance(task, TaskRef) else TaskRef(task)


@dataclass(frozen=True, eq=False)
class OwnDataset:
    """A loaded Dataset/DatasetDict that carries no shift spec: someone's own data, which evaluate scores as task
    ``custom`` (:func:`own_dataset`). Read here, beside :class:`TaskData`, by the same readers: its rows
    (:func:`~metashift_hf.hub.task_rows.own_rows`) and its pixels (its own JPEG bytes). No spec, no artifact, no
    meta-graph."""

    dataset: "datasets.DatasetDict"
    task_id: str = "custom"
    where: str = "task dataset"
    spec: None = None
    artifact: None = None
    meta_graph: None = None

    @functools.cached_property
    def classes(self) -> list[str]:
        return dataset_classes(self.dataset, self.where, OWN_COLUMNS)

    def rows(self) -> "pd.DataFrame":
        """One row per (split, image, class): split, image_id, label name, contexts, group (if given), community."""
        return own_rows(self.dataset, self.where)

    def images(self) -> ImageSource:
        return dataset_images(self.dataset, self.where)


def own_dataset(task: "TaskRef | Any") -> OwnDataset | None:
    """A loaded Dataset/DatasetDict that carries no shift spec, as an :class:`OwnDataset`; None for anything
    else, which :func:`~metashift_hf.hub.task_open.open_task` resolves."""
    task = task.task if isinstance(task, TaskRef) else task
    if isinstance(task, (datasets.Dataset, datasets.DatasetDict)) and not carries_spec(task):
        return OwnDataset(as_dataset_dict(task))
    return None


def _image_column_record(artifact: "str | os.PathLike | Artifact") -> dict | None:
    for record in Artifact.load(artifact).manifest.inputs:
        if record.get("role") == "hf_dataset" and record.get("image_column"):
            return record
    return None


def reads_dataset_images(artifact: "str | os.PathLike | Artifact") -> bool:
    """Whether the artifact's images come from its dataset's image column (then no ``images`` is needed)."""
    return _image_column_record(artifact) is not None


def artifact_images(artifact: "str | os.PathLike | Artifact") -> "ImageSource | None":
    """An artifact built from a dataset with an image column (``build --hf-dataset ... --image-column``)
    reads its images from that column; None for other artifacts."""
    record = _image_column_record(artifact)
    return MultiLabelDataset.from_record(record).images() if record is not None else None


def plan_digest(tp: TaskPlan) -> str:
    """sha256 of a plan's spec and rows: keys the ``datasets`` cache of a materialised plan, so a plan made
    elsewhere (an experiment's own rows under a registry task id) never reuses another plan's cache."""
    h = hashlib.sha256(tp.spec.to_json().encode())
    for split in sorted(tp.splits):
        for r in tp.splits[split]:
            h.update(repr((split, r.image_id, r.label, r.group, r.context, tuple(r.contexts), r.community)).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class TaskProvenance:
    """The origin of every number a report gives about a task (its ``task_origin``), made once per task by
    :attr:`TaskData.provenance` and serialised as it is by every report (evaluate, score, bugs, train, the zoo,
    compare).

    kind: the task's form (artifact, folder, hub, dataset); where: the same in words; folder: the folder as given;
    repo_id, revision, commit: a Hub repo, the revision asked (None: main) and the commit sha it resolved to
    (None when the Hub could not be asked); config: the config read from a folder or repo; spec_sha256: sha256 of
    the published ``shift_spec.json`` bytes (a folder or repo), else of the spec as ``ShiftSpec.to_json`` writes
    it (a dataset's equals its repo's; a task id's is its spec before export adds the facts digests); seed and
    options: the task's sampling seed and options.
    """

    kind: TaskForm
    where: str
    folder: str | None
    repo_id: str | None
    revision: str | None
    commit: str | None
    config: str | None
    spec_sha256: str
    seed: int
    options: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The JSON object reports record (options as a plain dict; asdict cannot copy a read-only mapping)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["options"] = dict(self.options)
        return out


@dataclass(frozen=True, eq=False)
class TaskData:
    """One task, whatever form it came in: its spec, rows per split (``plan``) and images, read lazily.

    ``spec`` is known when :func:`open_task` returns (a folder's or repo's ``shift_spec.json``, a dataset's
    features, the plan of a task id); ``dataset`` (the loaded splits of a folder, repo or dataset, checked
    against the spec by :func:`check_rows`) and ``plan`` are read the first time they are asked for;
    pixels only by :meth:`images`.
    """

    ref: TaskRef
    form: TaskForm
    where: str  # for messages: "artifact A", "folder F", "Hub dataset repo NS/NAME", "dataset"
    spec: ShiftSpec
    artifact: Artifact | None = None
    planned: TaskPlan | None = None  # form "artifact": the plan as the planner made it (no images read)
    load_rows: "Callable[[], datasets.DatasetDict] | None" = field(default=None, repr=False)
    # a folder's or repo's <config>/<facts file> bytes by file name (None: no such file), read when first asked for
    load_facts: "FactsReader | None" = field(default=None, repr=False)
    spec_sha256: str | None = None  # sha256 of the published shift_spec.json bytes (folder, Hub repo)
    # a dataset materialised from a task of another form (evaluate's pixels of an artifact task): that task's origin,
    # so a report names where the task came from, not the in-memory copy
    materialised_from: "TaskProvenance | None" = None

    @functools.cached_property
    def dataset(self) -> "datasets.DatasetDict | None":
        """The loaded splits (folder, Hub repo, dataset), rows checked against the spec; None for a planned task."""
        return None if self.load_rows is None else self.load_rows()

    @functools.cached_property
    def plan(self) -> TaskPlan:
        """The task's rows per split, in export order."""
        if self.planned is not None:
            return in_export_order(self.planned)
        return in_export_order(plan_of_dataset(self.dataset, self.spec, self.where))

    @functools.cached_property
    def facts_files(self) -> Mapping[str, bytes]:
        """The published meta-graph facts files of a folder or Hub repo (file name -> bytes; empty for other forms).

        The one check of published facts before any use: a spec that records their sha256 (``facts_sha256``,
        spec_version 6) has every file it names, each with that digest, or the task is refused naming the file
        (an edit, however plausible, cannot pass unseen). An older spec records none: its files are read with
        the structural checks of their readers only, and a warning says the facts are unverified."""
        if self.load_facts is None:
            return {}
        recorded = self.spec.facts_sha256
        out: dict[str, bytes] = {}
        for name in FACTS_FILES:
            data = self.load_facts(name)
            where = f"{name} of {self.where}"
            if recorded is not None and name in recorded:
                if data is None:
                    raise InputFormatError(f"{where} is missing; the task's shift spec records its sha256", FACTS_FIX)
                digest = hashlib.sha256(data).hexdigest()
                if digest != recorded[name]:
                    raise InputFormatError(
                        f"{where} has sha256 {digest[:16]}..., not the {recorded[name][:16]}... its shift spec "
                        "records: the file was changed after export",
                        FACTS_FIX,
                    )
            elif data is not None:
                logger.warning(
                    f"{where}: its shift spec (spec_version {self.spec.spec_version}) records no sha256 of it, so "
                    "its facts are unverified (only checked for consistency); export the task again to publish them "
                    "with their digest"
                )
            if data is not None:
                out[name] = data
        return types.MappingProxyType(out)

    @functools.cached_property
    def distances(self) -> PairDistances:
        """Every pair of each class's kept subsets, as the folder or Hub repo publishes them
        (builders.pair_distances; ``distances.distance(a, b)``, ``distances.matrix(cls)`` answer as
        ``Artifact.distance``/``distance_matrix``): read from the repo alone, rows and images never loaded."""
        if self.form == "artifact" and self.artifact is not None:
            return PairDistances.of_artifact(self.artifact, self.classes)
        data = self.facts_files.get(PAIRS_FILE)
        if data is None:
            raise InputFormatError(
                f"{self.where} publishes no pairwise distances ({PAIRS_FILE}): "
                + ("it was exported before they were published" if self.load_facts else f"a {self.form} carries none"),
                NO_PAIRS_FIX,
            )
        rules = self.spec.rules
        return PairDistances.from_bytes(
            data, f"{PAIRS_FILE} of {self.where}", self.classes, None if rules is None else rules.spectral_dim
        )

    @functools.cached_property
    def meta_graph(self) -> MetaGraphFacts | None:
        """The meta-graph facts of a folder or Hub repo (builders.meta_graph_facts: each context subset's community
        and distance to the largest community; ``meta_graph.distance(a, b)`` / ``.matrix(cls)``: every pair's
        distance), checked against the task's classes and rows; None for other forms (an artifact has the
        meta-graph itself) or an export made before the file existed."""
        data = self.facts_files.get(FACTS_FILE)
        if data is None:
            return None
        where = f"{FACTS_FILE} of {self.where}"
        # the file against itself (and every pair's distance) before any row is read: a refusal never follows a
        # load. Exiting right after `datasets` read the shards could abort the process (exit 134, issue 46 D10):
        # pyarrow reads the Python file objects datasets gives it on its I/O threads, and one still releasing a
        # Python buffer when the interpreter shuts down is ended by pthread_exit inside a noexcept destructor.
        MetaGraphFacts.from_bytes(data, where, self.classes)
        pairs = self.distances if PAIRS_FILE in self.facts_files else None
        every = [r for split_rows in self.plan.splits.values() for r in split_rows]
        facts = MetaGraphFacts.from_bytes(data, where, self.classes, [(r.label, r.contexts) for r in every])
        # the file and the rows must agree (communities, sizes); the file with itself on read
        rules = self.spec.rules
        facts.check_rows(
            [(r.image_id, r.label, r.group, r.contexts, r.community) for r in every],
            where,
            spectral_dim=None if rules is None else rules.spectral_dim,
            min_images=None if rules is None else rules.min_images_per_subset,
        )
        return dataclasses.replace(facts, distances=pairs)

    @property
    def images_path(self) -> "str | os.PathLike | ImageSource | None":
        return self.ref.images

    @property
    def repo_id(self) -> str | None:
        return str(self.ref.task) if self.form == "hub" else None

    @property
    def revision(self) -> str | None:
        return self.ref.revision if self.form == "hub" else None

    @functools.cached_property
    def provenance(self) -> TaskProvenance:
        """Where the task came from (:class:`TaskProvenance`), built once; every report records it as
        ``task_origin``."""
        if self.materialised_from is not None:
            return self.materialised_from
        spec_sha = self.spec_sha256 or hashlib.sha256(self.spec.to_json().encode("utf-8")).hexdigest()
        repo_id = self.repo_id
        return TaskProvenance(
            kind=self.form,
            where=self.where,
            folder=str(self.ref.task) if self.form == "folder" else None,
            repo_id=repo_id,
            revision=self.revision,
            commit=None if repo_id is None else hub_commit(repo_id, self.revision),
            config=self.task_id if self.form in ("folder", "hub") else None,
            spec_sha256=spec_sha,
            seed=self.spec.seed,
            options=types.MappingProxyType(dict(self.spec.overrides)),
        )

    def origin(self) -> dict[str, Any]:
        """:attr:`provenance` as the JSON object reports record under ``task_origin``."""
        return self.provenance.as_dict()

    @property
    def task_id(self) -> str:
        return self.spec.task_id

    @property
    def classes(self) -> list[str]:
        return list(self.spec.classes)

    def verify(self) -> None:
        """Read the rows now and check them against the spec (otherwise read when first needed)."""
        _ = self.plan

    def images(self) -> ImageSource:
        """The task's pixels: the dataset's own JPEG bytes, or the image source given with the artifact (else the
        artifact's dataset image column, ``build --hf-dataset ... --image-column``)."""
        if self.load_rows is not None:
            return dataset_images(self.dataset, self.where)
        return open_images(self._image_source())

    def _image_source(self) -> "str | os.PathLike | ImageSource":
        """The images given with the artifact, else its dataset image column; the one "images are needed" error
        (``images()``, ``prepare()`` and so every command that reads pixels) when there are neither."""
        if self.images_path is not None:
            return self.images_path
        from_artifact = None if self.artifact is None else artifact_images(self.artifact)
        if from_artifact is None:
            raise MissingImagesError(
                f"task {self.task_id}: the images are needed, and none were given",
                "pass --images SRC (Python: images=; a folder of <id>.jpg files or GQA's images.zip), use the "
                "task's exported folder or Hub repo (it carries its images), or score predictions "
                "(--model predictions:FILE; metashift_hf.plan needs no images)",
            )
        return from_artifact

    def prepare(
        self,
        *,
        on_missing: str = "error",
        cache_dir: "str | os.PathLike | None" = None,
        with_image_metadata: bool = False,
        verify_images: bool = True,
    ) -> PreparedTask:
        """The task materialised: its splits as a ``DatasetDict`` with original JPEG bytes, and its spec (the one
        materialiser; module docstring).

        A folder, repo or dataset is returned as it was read (its rows checked against its spec). A task id
        planned on an artifact is built from the plan :func:`open_task` made (never planned again) and the
        images given with it (or the artifact's dataset image column), through the ``metashift`` builder:
        ``cache_dir`` is its ``datasets`` cache (a task is reused when plan, artifact content and images are the
        same), ``on_missing`` "error" stops on a missing or corrupt image, "skip" leaves it out (recorded in the
        spec), ``with_image_metadata`` adds the scene-graph fields, ``verify_images=False`` skips decoding each
        image once to check it.
        """
        # argument types first: a wrong one is named here, not deep inside the datasets builder
        opt.on_missing(on_missing)
        if cache_dir is not None:
            opt.path(cache_dir, "cache_dir")
        if self.dataset is not None:
            return PreparedTask(task_id=self.task_id, dataset=self.dataset, spec=self.spec)
        if self.artifact is None:
            raise InputFormatError(
                f"task {self.task_id}: a plan without its artifact cannot be materialised",
                "pass the build it was planned on (TaskRef(plan, artifact=ARTIFACT, images=IMAGES))",
            )
        images = self._image_source()
        builder = Metashift(
            config_name=self.task_id,
            artifact=self.artifact,
            images=images,
            seed=self.spec.seed,
            on_missing=on_missing,
            overrides=dict(self.ref.options) or None,
            cache_dir=None if cache_dir is None else str(cache_dir),
            with_image_metadata=with_image_metadata,
            verify_images=verify_images,
            plan=self.planned,
            plan_digest=plan_digest(self.planned),
        )
        builder.download_and_prepare()
        ds = builder.as_dataset()
        if not ds or not any(len(split) for split in ds.values()):  # every image dropped by on_missing="skip"
            raise EmptyResultError(
                f"task {self.task_id}: no image left to use (all were missing or unusable in {images})",
                "point --images (Python: images=) at the folder or zip that holds the task's images",
            )
        return PreparedTask(task_id=self.task_id, dataset=ds, spec=spec_of_dataset(ds))


__all__ = [
    "TaskRef",
    "TaskData",
    "TaskForm",
    "TaskProvenance",
    "FACTS_FIX",
    "PreparedTask",
    "task_ref",
    "DEFAULT_SEED",
    "TASK_FORMS_FIX",
    "OwnDataset",
    "own_dataset",
    "reads_dataset_images",
    "artifact_images",
    "plan_digest",
    "frozen_options",
    "options_key",
    "hash_key",
]
