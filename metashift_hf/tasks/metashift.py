"""The ``datasets`` builder (name ``metashift``): a built artifact + an image source -> task splits.

``datasets`` no longer runs loading scripts, so the package ships the builder class::

    from metashift_hf.tasks.metashift import Metashift
    b = Metashift(config_name="paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip",
                  cache_dir="cache")
    b.download_and_prepare()
    ds = b.as_dataset()          # DatasetDict: train / validation / test / id_test

(``metashift_hf.load``/``prepare`` do exactly this.) Config names are task ids (see
``tasks.families.task_ids``); ``tasks.families.plan_task`` turns one into a
:class:`tasks.plan.TaskPlan` without touching images. Images are carried as their original bytes (``{"bytes", "path": "<id>.jpg"}``),
never decoded and re-encoded.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets.arrow_writer import get_arrow_writer_batch_size_from_features
from datasets.builder import Key

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.images import DatasetImages, jpeg_problem, open_images, sniff_image
from metashift_hf.core import options as opt
from metashift_hf.core.errors import (
    InputFormatError,
    MetashiftError,
    MissingImagesError,
    UnknownNameError,
)
from metashift_hf.core.provenance import license_statement

from .families import OLD_LOADER_ATTRIBUTES_FLAG, plan_task
from .plan import TaskPlan
from .spec import ShiftSpec
from .task_options import CollectionOptions


# The old HF loader's default classes (kept for reference in docs; our default is every class).
LEGACY_CLASSES = ("cat", "dog", "bus", "truck", "elephant", "horse", "bowl", "cup")
# The config fields that are task options: the collections' options dataclass names them (no second list).
TASK_OPTION_FIELDS = tuple(f.name for f in fields(CollectionOptions))

logger = logging.getLogger(__name__)


@dataclass
class MetashiftConfig(datasets.BuilderConfig):
    """One task of one artifact. ``name`` is the task id.

    Fields (all optional except ``artifact`` and, for materialising, ``images``):

    artifact: folder written by ``metashift-hf build``.
    images: folder of ``<id>.jpg`` or a zip such as GQA's ``images.zip`` (read in place).
    on_missing: "error" (default) stops with a report of missing/corrupt images; "skip" drops them
        and records what was dropped in the shift spec.
    seed: seed of every sampling step (same seed -> identical splits and parquet bytes).
    overrides: size overrides of the task generator, e.g. ``{"scale": 0.1}`` or
        ``{"train_per_group": 50}`` (paper tasks), ``{"validation_fraction": 0.1}`` (matched tasks).

    Options of the old Hugging Face ``metashift`` loader, kept so its users can migrate:

    selected_classes: classes of the ``classes`` and ``attributes`` configs (old default: cat, dog,
        bus, truck, elephant, horse, bowl, cup; ours: every class of the artifact).
    attributes_dataset: True selects the MetaShift-Attributes collection (same as config ``attributes``).
    attributes: restrict ``attributes`` to these subsets, e.g. ``["cat(orange)", "dog(sitting)"]``.
    with_image_metadata: add the scene-graph fields (width, height, location, weather, objects with
        boxes, attributes and relations) from the artifact's images table.
    image_subset_size_threshold: keep only subsets with at least this many images (collections;
        cannot go below the artifact's own ``min_images_per_subset``).
    min_local_groups: keep only classes with more than this many such subsets (collections).
    """

    artifact: str | None = None
    images: str | None = None
    on_missing: str = "error"
    seed: int = 0
    overrides: dict | None = None
    selected_classes: list | None = None
    attributes_dataset: bool = False
    attributes: list | None = None
    with_image_metadata: bool = False
    image_subset_size_threshold: int | None = None
    min_local_groups: int | None = None
    artifact_hash: str | None = None  # filled by the builder: keys the cache to the artifact content
    images_stamp: str | None = None  # filled by the builder: size + mtime of the image folder/zip
    plan_digest: str | None = None  # given with ``plan=``: keys the cache to the rows of that plan
    verify_images: bool = True


# ---------------------------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------------------------
def base_features(classes: list[str], groups: list[str]) -> datasets.Features:
    """The task features (meanings: DEVELOPERS.md "Task layer", docs/tasks.md "Features").

    ``groups``: the task's group names, sorted (:meth:`TaskPlan.group_names`); ``group_id``
    is a ClassLabel over them, so ``names[group_id] == group`` on every row.
    """
    return datasets.Features(
        {
            "image": datasets.Image(),
            "image_id": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(classes)),
            "context": datasets.Value("string"),
            "contexts": datasets.List(datasets.Value("string")),
            "group": datasets.Value("string"),
            "group_id": datasets.ClassLabel(names=list(groups)),
            "community": datasets.Value("int64"),
        }
    )


def task_features(plan: TaskPlan, with_image_metadata: bool = False) -> datasets.Features:
    """The features of ``plan``'s dataset, the shift spec stamped into ``group``."""
    features = base_features(plan.classes, plan.group_names())
    if with_image_metadata:
        features = datasets.Features({**features, **METADATA_FEATURES})
    return features_with_spec(features, plan.spec)


METADATA_FEATURES = {
    "width": datasets.Value("int32"),
    "height": datasets.Value("int32"),
    "location": datasets.Value("string"),
    "weather": datasets.Value("string"),
    "objects": datasets.List(
        {
            "object_id": datasets.Value("string"),
            "name": datasets.Value("string"),
            "x": datasets.Value("int32"),
            "y": datasets.Value("int32"),
            "w": datasets.Value("int32"),
            "h": datasets.Value("int32"),
            "attributes": datasets.List(datasets.Value("string")),
            "relations": datasets.List({"name": datasets.Value("string"), "object": datasets.Value("string")}),
        }
    ),
}


def metadata_record(meta: dict | None, image_id: str) -> dict:
    """The scene-graph fields of one image, typed (GQA's object dict becomes a list sorted by id)."""
    if meta is None:
        return {"width": None, "height": None, "location": None, "weather": None, "objects": None}
    objs = meta.get("objects") or {}
    if not isinstance(objs, dict):
        raise InputFormatError(
            f"images.parquet: objects of image {image_id} is not a GQA object dict",
            "rebuild the artifact from GQA scene graphs",
        )
    out = []
    for oid in sorted(objs):
        o = objs[oid]
        out.append(
            {
                "object_id": str(oid),
                "name": o.get("name"),
                **{k: (None if o.get(k) is None else int(o[k])) for k in ("x", "y", "w", "h")},
                "attributes": [str(a) for a in o.get("attributes") or []],
                "relations": [
                    {"name": r.get("name"), "object": str(r.get("object"))} for r in o.get("relations") or []
                ],
            }
        )
    return {
        "width": meta.get("width"),
        "height": meta.get("height"),
        "location": meta.get("location"),
        "weather": meta.get("weather"),
        "objects": out,
    }


def describe(plan: TaskPlan) -> str:
    """The dataset description: one line about the task (the spec itself travels in the features)."""
    s = plan.spec
    return (
        f"MetaShift task {plan.task_id}: classes {', '.join(plan.classes)}; shift type {s.shift_type}; "
        f"splits {dict(s.split_sizes)}. Shift spec: metashift_hf.shift_spec(dataset)."
    )


# The shift spec rides in the ``id`` of the ``group`` feature: datasets keeps feature ids in the
# parquet schema metadata, the README's dataset_info, the Arrow cache and Hub loads, while it drops
# ``info.description`` when a dataset is loaded from exported parquet.
SPEC_FEATURE = "group"
_SPEC_MARK = "metashift-hf shift_spec "


def features_with_spec(features: datasets.Features, spec: ShiftSpec) -> datasets.Features:
    """``features`` with ``spec`` stamped into the ``group`` feature (same Arrow types)."""
    if SPEC_FEATURE not in features:
        raise InputFormatError(
            f"task {spec.task_id}: the dataset has no {SPEC_FEATURE!r} column to carry the shift spec",
            "prepare the task with metashift_hf.prepare (its datasets have a 'group' column)",
        )
    out = datasets.Features(features)
    out[SPEC_FEATURE] = datasets.Value("string", id=_SPEC_MARK + spec.to_json(compact=True))
    return out


def spec_of_features(features: datasets.Features, where: str = "dataset") -> ShiftSpec:
    """Inverse of :func:`features_with_spec`."""
    feat = features.get(SPEC_FEATURE) if features is not None else None
    mark = getattr(feat, "id", None) or ""
    if not mark.startswith(_SPEC_MARK):
        raise InputFormatError(
            f"{where} carries no shift spec (its {SPEC_FEATURE!r} feature has no spec id)",
            "prepare it with metashift_hf.prepare, or load it from a `metashift-hf export` "
            "folder or Hub repo; a spec file can be read with metashift_hf.shift_spec(PATH)",
        )
    return ShiftSpec.from_json(mark[len(_SPEC_MARK) :], where=f"shift spec of {where}")


# ---------------------------------------------------------------------------------------------
# the builder
# ---------------------------------------------------------------------------------------------
class Metashift(datasets.ArrowBasedBuilder):
    """MetaShift task datasets from a built artifact and GQA images (see module docstring)."""

    BUILDER_CONFIG_CLASS = MetashiftConfig
    BUILDER_CONFIGS: list = []
    VERSION = datasets.Version("1.0.0")

    def __init__(self, *args, **kwargs) -> None:
        name = kwargs.get("config_name")
        art = kwargs.get("artifact")
        if not name:
            raise UnknownNameError(
                "the metashift builder needs a task id as config_name",
                "pass config_name='paper-dg-cat-dog-1' (or any id of metashift-hf tasks list)",
            )
        if art is None:
            raise InputFormatError(
                f"task {name}: no artifact given",
                "pass artifact='ARTIFACT' (the folder written by `metashift-hf build`)",
            )
        if isinstance(art, Artifact):
            self._artifact = art
            kwargs["artifact"] = str(art.root)
        else:
            self._artifact = Artifact.load(art)
            kwargs["artifact"] = str(Path(art))
        # a dataset's image column has no path to reopen: the source itself is kept, the config names it
        self._dataset_images = kwargs.get("images") if isinstance(kwargs.get("images"), DatasetImages) else None
        if self._dataset_images is not None:
            kwargs["images"] = self._dataset_images.describe()
        elif kwargs.get("images") is not None:
            # an ImageSource is reopened from its path, so the config stays plain (hashable, picklable)
            kwargs["images"] = str(getattr(kwargs["images"], "path", kwargs["images"]))
            # a changed folder (files added/removed) or zip gets a new cache instead of a stale one
            try:
                st = os.stat(kwargs["images"])
                kwargs.setdefault("images_stamp", f"{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                pass  # a missing source is reported when the splits are generated
        # The cache is keyed by the config kwargs: the content hash makes a rebuilt artifact a new cache.
        kwargs.setdefault("artifact_hash", self._artifact.content_hash)
        # a plan made already (metashift_hf.hub.task_data.TaskData.prepare, the one materialiser): used as it is,
        # never planned a second time; its digest keys the cache
        self._given_plan: TaskPlan | None = kwargs.pop("plan", None)
        if self._given_plan is not None and (self._given_plan.task_id != name or not kwargs.get("plan_digest")):
            raise InputFormatError(
                f"plan of task {self._given_plan.task_id} given for config {name}, or without its plan_digest",
                "pass config_name=plan.task_id and plan_digest=metashift_hf.hub.task_data.plan_digest(plan)",
            )
        self._plan: TaskPlan | None = None
        self._source = None
        super().__init__(*args, **kwargs)

    # -- plan -----------------------------------------------------------------------------------
    @property
    def plan(self) -> TaskPlan:
        if self._plan is None:
            c = self.config
            opt.on_missing(c.on_missing)
            options = dict(c.overrides or {})
            options.update({k: getattr(c, k) for k in TASK_OPTION_FIELDS if getattr(c, k) is not None})
            if c.attributes_dataset:
                options[OLD_LOADER_ATTRIBUTES_FLAG] = True
            self._plan = self._given_plan or plan_task(c.name, self._artifact, seed=int(c.seed), **options)
            if c.with_image_metadata and not (Path(self._artifact.root) / "images.parquet").is_file():
                # the fix depends on the source: only GQA's scene graphs can give a published-pickle artifact
                # its metadata; a tags or Hub-dataset artifact never has any (no GQA advice for user data)
                published = self._artifact.provenance == "published"
                raise InputFormatError(
                    f"with_image_metadata=True but artifact {self._artifact.root} has no images.parquet "
                    f"(its {self._artifact.provenance} input carries no per-image metadata)",
                    "rebuild the artifact from GQA scene graphs (`metashift-hf build --scene-graphs ...`) "
                    "or drop with_image_metadata"
                    if published
                    else "drop with_image_metadata",
                )
        return self._plan

    def _info(self) -> datasets.DatasetInfo:
        features = task_features(self.plan, self.config.with_image_metadata)
        return datasets.DatasetInfo(
            description=describe(self.plan),
            features=features,
            homepage="https://metashift.readthedocs.io/",
            license=license_statement(self._artifact.provenance, self._artifact.manifest.source_info),
            citation=(
                "@inproceedings{liang2022metashift, title={MetaShift: A Dataset of Datasets for Evaluating "
                "Contextual Distribution Shifts and Training Conflicts}, author={Weixin Liang and James Zou}, "
                "booktitle={ICLR}, year={2022}}"
            ),
        )

    def download_and_prepare(self, *args, **kwargs):
        """As in ``datasets``, but our errors (e.g. a corrupt image met while writing) come out as
        the MetashiftError they are, not wrapped in DatasetGenerationError."""
        from datasets.exceptions import DatasetGenerationError

        try:
            return super().download_and_prepare(*args, **kwargs)
        except DatasetGenerationError as exc:
            if isinstance(exc.__cause__, MetashiftError):
                raise exc.__cause__ from None
            raise

    # -- images ---------------------------------------------------------------------------------
    def _open_source(self):

        if self._dataset_images is not None:
            return self._dataset_images
        if self.config.images is None:
            raise MissingImagesError(
                f"task {self.config.name}: no image source given",
                "pass images= a folder of <id>.jpg files or GQA's images.zip",
            )
        return open_images(self.config.images)

    def _split_generators(self, dl_manager) -> list[datasets.SplitGenerator]:
        src = self._open_source()
        self._source = src
        plan = self.plan
        ids = plan.image_ids()
        if self.config.on_missing == "skip":
            # Check everything first so that the spec's sizes describe exactly what is written.
            present, report = src.resolve(ids, "skip", verify=bool(self.config.verify_images))
            if not report.ok:
                # Said out loud (a logging warning: the CLI shows it on stderr) and recorded in the spec.
                logger.warning("task %s: skipped %s", plan.task_id, report.summary())
                plan = plan.without_images(
                    report.bad_ids, missing=report.missing, corrupt=report.corrupt, summary=report.summary()
                )
                self._plan = plan
                self.info.description = describe(plan)
                # a group whose every image was dropped leaves group_id's names too
                self.info.features = task_features(plan, self.config.with_image_metadata)
        else:
            src.resolve(ids, "error", verify=False)  # missing files: one report before writing anything
        return [datasets.SplitGenerator(name=s, gen_kwargs={"split": s}) for s in plan.split_names()]

    def _generate_tables(self, split: str):
        """Record batches of ``writer_batch_size`` rows: the original image bytes go straight into
        an arrow binary column (no per-example encoding pass; measured in bench_materialise)."""
        src = self._source or self._open_source()
        features = self.info.features
        schema = features.arrow_schema
        meta = self.config.with_image_metadata
        meta_types = {k: schema.field(k).type for k in METADATA_FEATURES} if meta else {}
        verify = bool(self.config.verify_images) and self.config.on_missing == "error"
        label_index = {c: i for i, c in enumerate(self.plan.classes)}
        group_index = {g: i for i, g in enumerate(features["group_id"].names)}
        rows = self.plan.splits[split]
        # Same record-batch size as datasets' own writer for image features (100), so the arrow files
        # are laid out as the example-by-example writer laid them out.
        batch = self._writer_batch_size or get_arrow_writer_batch_size_from_features(features) or 100
        # Reads stay in this thread: a read-ahead thread was measured slower (GIL contention with
        # the arrow writer; bench_materialise, 2 cores).
        for n, start in enumerate(range(0, len(rows), batch)):
            chunk = rows[start : start + batch]
            ids = [r.image_id for r in chunk]
            data = src.read_many(ids)
            if verify:
                _check_images(src, ids, data)
            image = pa.StructArray.from_arrays(
                [data, pa.array([f"{i}.jpg" for i in ids], pa.string())], names=["bytes", "path"]
            )
            cols = {
                "image": image,
                "image_id": pa.array(ids, pa.string()),
                "label": pa.array([label_index[r.label] for r in chunk], pa.int64()),
                "context": pa.array([r.context for r in chunk], pa.string()),
                "contexts": pa.array([list(r.contexts) for r in chunk], schema.field("contexts").type),
                "group": pa.array([r.group for r in chunk], pa.string()),
                "group_id": pa.array([group_index[r.group] for r in chunk], pa.int64()),
                "community": pa.array([int(r.community) for r in chunk], pa.int64()),
            }
            if meta:
                recs = [metadata_record(self._artifact.image_metadata(i), i) for i in ids]
                cols.update({k: pa.array([m[k] for m in recs], t) for k, t in meta_types.items()})
            yield Key(0, n), pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)


def image_problem(data: "bytes | memoryview") -> str | None:
    """Why ``data`` is unusable, or None. JPEGs (all of GQA) get a structural check: SOI marker at
    the start, EOI marker near the end (catches truncated downloads and garbage); other formats
    the full PIL check of ``metashift_hf.builders.images.sniff_image``. Parsing every JPEG header with PIL
    would halve the materialising speed."""
    if bytes(data[:3]) == b"\xff\xd8\xff":
        # the marker walk touches a few header bytes only (frame size checked: what exports decodes)
        return jpeg_problem(data, scan=False)

    return sniff_image(bytes(data))


def _check_images(src, image_ids: list[str], data: "pa.BinaryArray | pa.ChunkedArray") -> None:
    """Raise for the first unusable image of a batch (:func:`image_problem`), naming it; looks at
    slices of arrow's buffer, so no image is copied."""
    ids = iter(image_ids)
    for chunk in data.chunks if isinstance(data, pa.ChunkedArray) else [data]:
        offsets = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
        buf = chunk.buffers()[2]
        view = memoryview(buf if buf is not None else b"").cast("B")
        for n in range(len(chunk)):
            image_id = next(ids)
            why = image_problem(view[offsets[n] : offsets[n + 1]])
            if why:
                raise MissingImagesError(
                    f"image {image_id} in {src.describe()} is unusable: {why}",
                    "pass --on-missing skip (Python: on_missing='skip') to drop unusable images, or replace the file",
                    image_ids=[image_id],
                )


def carries_spec(ds: "datasets.Dataset | datasets.DatasetDict") -> bool:
    """Whether ``ds`` carries a shift spec (a task of this package), as :func:`spec_of_dataset` reads it."""
    if isinstance(ds, datasets.DatasetDict):
        ds = next(iter(ds.values()), None)
    feat = None if ds is None else ds.features.get(SPEC_FEATURE)
    return (getattr(feat, "id", None) or "").startswith(_SPEC_MARK)


def spec_of_dataset(ds: "datasets.Dataset | datasets.DatasetDict") -> ShiftSpec:
    """The shift spec a prepared or loaded dataset carries (every split carries the same)."""
    if isinstance(ds, datasets.DatasetDict):
        if not ds:
            raise InputFormatError("the DatasetDict has no splits", "load a task with at least one split")
        ds = next(iter(ds.values()))
    return spec_of_features(ds.features, where=f"dataset {ds.info.dataset_name or ds.info.builder_name or ''}".strip())


__all__ = [
    "Metashift",
    "MetashiftConfig",
    "spec_of_dataset",
    "carries_spec",
    "features_with_spec",
    "spec_of_features",
    "describe",
    "task_features",
    "LEGACY_CLASSES",
]
