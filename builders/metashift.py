"""The ``datasets`` builder (name ``metashift``): a built artifact + an image source -> task splits.

``datasets`` no longer runs loading scripts, so the package ships the builder class::

    from metashift_hf.builders.metashift import Metashift
    b = Metashift(config_name="paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip",
                  cache_dir="cache")
    b.download_and_prepare()
    ds = b.as_dataset()          # DatasetDict: train / validation / test / id_test

(``metashift_hf.load``/``prepare`` do exactly this.) Config names are task ids (see
:func:`task_ids`); :func:`plan_task` turns one into a :class:`builders.shifts.TaskPlan` without
touching images. Images are carried as their original bytes (``{"bytes", "path": "<id>.jpg"}``),
never decoded and re-encoded.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import datasets
from metashift_hf.builders.images import open_images, sniff_image

from metashift_hf import wordnet_match
from metashift_hf.core.errors import (
    EmptyResultError,
    InputFormatError,
    MetashiftError,
    MissingImagesError,
    UnknownNameError,
    did_you_mean,
)

from . import paper_tasks, shifts
from .artifact import Artifact

# The old HF loader's default classes (kept for reference in docs; our default is every class).
LEGACY_CLASSES = ("cat", "dog", "bus", "truck", "elephant", "horse", "bowl", "cup")
COLLECTIONS = ("classes", "attributes")
MATCHED_SIZE_FIELDS = {f for f in shifts.CommunitySizes.__dataclass_fields__}
_REGISTRY_FILE = "tasks.parquet"  # written by `metashift-hf match` (wordnet_match)


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
    verify_images: bool = True


# ---------------------------------------------------------------------------------------------
# task ids -> plans (no images needed)
# ---------------------------------------------------------------------------------------------
def _match_dir(artifact: Artifact) -> Path:
    return Path(artifact.root) / "match"


def _registry(artifact: Artifact) -> dict:
    """task_id -> wordnet_match TaskEntry for ARTIFACT/match/ (empty when the artifact is not matched)."""
    if not (_match_dir(artifact) / _REGISTRY_FILE).is_file():
        return {}

    return {t.task_id: t for t in wordnet_match.registry(_match_dir(artifact))}


def task_ids(artifact: Artifact) -> list[str]:
    """Every config name valid for this artifact (registry tasks when ARTIFACT/match/ exists)."""
    classes = set(artifact.classes())
    ids: list[str] = []
    if {"cat", "dog"} <= classes:
        ids += paper_tasks.applicable(shifts.ArtifactSource(artifact))
    ids += [f"class-{c}" for c in sorted(classes)]
    if classes:
        ids.append("classes")
    table = artifact.subsets_table()
    if ((table["kind"] == "attribute") & table["kept"]).any():
        ids.append("attributes")
    ids += sorted(t for t, e in _registry(artifact).items() if e.available)
    return ids


def _unknown(task: str, artifact: Artifact) -> UnknownNameError:
    return UnknownNameError(
        f"unknown task {task!r} for artifact {artifact.root}" + did_you_mean(task, task_ids(artifact)),
        "list the valid ids with `metashift-hf tasks list --artifact DIR` "
        "(matched bin-/multiclass ids need `metashift-hf match --artifact DIR` first)",
    )


def _base_rules(artifact: Artifact) -> dict:
    o = artifact.options
    return {k: o.get(k) for k in ("min_images_per_subset", "min_subsets_per_class", "edge_threshold",
                                  "community_method", "spectral_dim", "pairing") if k in o}


def _collection_contexts(task: str, artifact: Artifact, source: shifts.ArtifactSource, classes: list[str],
                         kinds: tuple[str, ...] | None, only: list[str] | None, threshold: int | None,
                         min_groups: int | None) -> dict[str, dict[str, frozenset[str]]]:
    """class -> {context: ids} after the migration filters (kind, subset list, size, local groups)."""
    base = int(artifact.options.get("min_images_per_subset", 25))
    if threshold is not None and int(threshold) < base:
        raise InputFormatError(
            f"image_subset_size_threshold={threshold} is below the artifact's min_images_per_subset={base}: "
            "smaller subsets were not kept in this artifact",
            f"use a threshold >= {base}, or rebuild with `metashift-hf build --min-images-per-subset {threshold}`",
        )
    only_set = set(only) if only else None
    if only_set:
        kept = {f"{c}({x})" for c in classes for x in source.kept_contexts(c)}
        bad = sorted(only_set - kept)
        if bad:
            raise UnknownNameError(
                f"task {task}: {bad[0]!r} is not a kept subset of the selected classes"
                + did_you_mean(bad[0], sorted(kept)),
                "pass subsets as 'subject(context)' of kept subsets, e.g. 'cat(orange)'",
            )
    out: dict[str, dict[str, frozenset[str]]] = {}
    for c in classes:
        ctxs = {}
        for ctx, ids in source.kept_contexts(c).items():
            name = f"{c}({ctx})"
            if kinds and source.kind(name) not in kinds:
                continue
            if only_set is not None and name not in only_set:
                continue
            if threshold is not None and len(ids) < int(threshold):
                continue
            ctxs[ctx] = ids
        if min_groups is not None and len(ctxs) <= int(min_groups):
            continue
        if ctxs:
            out[c] = ctxs
    if not out:
        raise EmptyResultError(f"task {task}: no class has subsets left after the filters",
                               "relax image_subset_size_threshold / min_local_groups / attributes / selected_classes")
    return out


def _check_selected(task: str, artifact: Artifact, selected: list[str] | None) -> list[str]:
    classes = artifact.classes()
    if selected is None:
        return classes
    for c in selected:
        if c not in classes:
            raise UnknownNameError(f"task {task}: selected class {c!r} is not a class of {artifact.root}"
                                   + did_you_mean(c, classes), "pick classes from Artifact.classes()")
    return sorted(set(selected))


def _matched_subsets(art: Artifact, entry) -> dict[str, list[str]] | None:
    """Per class, the subsets a registry task draws from: ``selected`` = subject and context both
    matched to ImageNet (the ImageNet-matched MetaShift); ``kept`` = every kept subset (None)."""
    if entry.subset_rule == "kept":
        return None

    match = wordnet_match.load_match(_match_dir(art))
    out = {}
    for c in entry.classes:
        try:
            out[c] = match.subsets_of(c, "selected")
        except UnknownNameError:
            out[c] = []  # community_shift reports the class as having no usable subsets
    return out


def _community_distance(artifact: Artifact):
    """Paper rule (size-weighted centre of member embeddings), over the members that have an
    embedding: a disconnected meta-graph leaves a few subsets without one."""
    def fn(cls: str, id_group: shifts.GroupDef, ood: list[shifts.GroupDef]) -> float:
        groups = {g.name: [c for c in g.contexts if artifact.embedding(f"{cls}({c})") is not None]
                  for g in [id_group, *ood]}
        groups = {k: v for k, v in groups.items() if v}
        if id_group.name not in groups or len(groups) < 2:
            raise EmptyResultError(f"{cls}: the training group or every test group lacks embedded subsets",
                                   "see the class's embedding_status in classes.parquet")
        others = [g.name for g in ood if g.name in groups]
        return artifact.group_distance(cls, groups, id_group.name, others, rule="paper")
    return fn


def plan_task(task: str, artifact: "str | os.PathLike | Artifact", *, seed: int = 0,
              selected_classes: list[str] | None = None, attributes_dataset: bool = False,
              attributes: list[str] | None = None, image_subset_size_threshold: int | None = None,
              min_local_groups: int | None = None, overrides: Mapping[str, Any] | None = None) -> shifts.TaskPlan:
    """The split plan of one task id on one artifact (no images read)."""
    art = Artifact.load(artifact)
    overrides = dict(overrides or {})
    given = dict(overrides)
    if attributes_dataset:
        if task not in ("attributes", None, ""):
            raise InputFormatError(f"attributes_dataset=True conflicts with task {task!r}",
                                   "use task 'attributes' (attributes_dataset=True is its old-loader spelling)")
        task = "attributes"
    if not task:
        raise UnknownNameError("no task id given", "pass a task id, e.g. 'paper-dg-cat-dog-1' "
                               "(list them with `metashift-hf tasks list --artifact DIR`)")
    if attributes is not None and task != "attributes":
        raise InputFormatError(f"option attributes= applies to the 'attributes' task, not {task!r}",
                               "use task 'attributes' or drop the attributes option")
    collection_like = task in COLLECTIONS or task.startswith("class-")
    if not collection_like:
        for opt, val in (("selected_classes", selected_classes),
                         ("image_subset_size_threshold", image_subset_size_threshold),
                         ("min_local_groups", min_local_groups)):
            if val is not None:
                raise InputFormatError(
                    f"option {opt} applies to the collections (classes, attributes, class-<name>), not task {task!r}",
                    f"drop {opt}, or use task 'classes' / 'attributes'")
    source = shifts.ArtifactSource(art)
    if task in paper_tasks.TASK_IDS:
        if not {"cat", "dog"} <= set(art.classes()):
            raise UnknownNameError(f"task {task} needs the classes cat and dog; artifact {art.root} lacks them",
                                   "build the artifact from GQA scene graphs (or the demo world), which has both")
        scale = overrides.pop("scale", None)
        plan = paper_tasks.plan(task, source, seed=seed, scale=scale, overrides=overrides)
    elif collection_like:
        if overrides:
            raise UnknownNameError(f"task {task} takes no size overrides, got {sorted(overrides)}",
                                   "drop the overrides: collections hold every image once")
        if task.startswith("class-"):
            cls = task[len("class-"):]
            if cls not in art.classes():
                raise _unknown(task, art)
            classes, kinds = [cls], None
        else:
            classes = _check_selected(task, art, selected_classes)
            kinds = ("attribute",) if task == "attributes" else None
            if task == "attributes" and "attributes" not in task_ids(art):
                raise EmptyResultError(f"artifact {art.root} has no kept attribute subsets",
                                       "build with --include-attributes or from the attributes pickle")
        ctx = _collection_contexts(task, art, source, classes, kinds, attributes, image_subset_size_threshold,
                                   min_local_groups)
        plan = shifts.collection(task, source, contexts=ctx, seed=seed, extra_spec={
            "filters": {"selected_classes": selected_classes, "attributes": attributes,
                        "image_subset_size_threshold": image_subset_size_threshold,
                        "min_local_groups": min_local_groups}})
    else:
        reg = _registry(art)
        if task not in reg:
            raise _unknown(task, art)
        entry = reg[task]
        if not entry.available:
            raise EmptyResultError(f"task {task} is not available on {art.root}: {entry.reason}",
                                   "pick another id from `metashift-hf tasks list --artifact DIR`")
        bad = sorted(set(overrides) - MATCHED_SIZE_FIELDS)
        if bad:
            raise UnknownNameError(f"unknown override(s) {bad} for task {task}" + did_you_mean(bad[0], MATCHED_SIZE_FIELDS),
                                   f"this task accepts: {', '.join(sorted(MATCHED_SIZE_FIELDS))}")
        classes = sorted(entry.classes)
        missing = [c for c in classes if c not in art.classes()]
        if missing:
            raise EmptyResultError(f"task {task}: classes {missing} are not classes of {art.root}",
                                   f"re-run `metashift-hf match --artifact {art.root}` for this artifact")
        allowed = _matched_subsets(art, entry)
        plan = shifts.community_shift(
            task, source, classes=classes, sizes=shifts.CommunitySizes(**overrides), seed=seed,
            distance_fn=_community_distance(art), distance_rule="paper", subsets=allowed,
            extra_spec={"registry": {"kind": entry.kind, "lca": entry.lca, "lca_name": entry.lca_name,
                                     "lca_depth": entry.lca_depth, "path_similarity": entry.path_similarity,
                                     "subset_rule": entry.subset_rule}})
    plan.spec["artifact_hash"] = art.content_hash
    plan.spec["rules"] = _base_rules(art)
    plan.spec["overrides"] = given
    return plan


# ---------------------------------------------------------------------------------------------
# features
# ---------------------------------------------------------------------------------------------
def base_features(classes: list[str]) -> datasets.Features:
    return datasets.Features({
        "image": datasets.Image(),
        "image_id": datasets.Value("string"),
        "label": datasets.ClassLabel(names=list(classes)),
        "context": datasets.Value("string"),
        "contexts": datasets.List(datasets.Value("string")),
        "group": datasets.Value("string"),
        "community": datasets.Value("int64"),
    })


METADATA_FEATURES = {
    "width": datasets.Value("int32"),
    "height": datasets.Value("int32"),
    "location": datasets.Value("string"),
    "weather": datasets.Value("string"),
    "objects": datasets.List({
        "object_id": datasets.Value("string"),
        "name": datasets.Value("string"),
        "x": datasets.Value("int32"),
        "y": datasets.Value("int32"),
        "w": datasets.Value("int32"),
        "h": datasets.Value("int32"),
        "attributes": datasets.List(datasets.Value("string")),
        "relations": datasets.List({"name": datasets.Value("string"), "object": datasets.Value("string")}),
    }),
}


def metadata_record(meta: dict | None, image_id: str) -> dict:
    """The scene-graph fields of one image, typed (GQA's object dict becomes a list sorted by id)."""
    if meta is None:
        return {"width": None, "height": None, "location": None, "weather": None, "objects": None}
    objs = meta.get("objects") or {}
    if not isinstance(objs, dict):
        raise InputFormatError(f"images.parquet: objects of image {image_id} is not a GQA object dict",
                               "rebuild the artifact from GQA scene graphs")
    out = []
    for oid in sorted(objs):
        o = objs[oid]
        out.append({
            "object_id": str(oid), "name": o.get("name"),
            **{k: (None if o.get(k) is None else int(o[k])) for k in ("x", "y", "w", "h")},
            "attributes": [str(a) for a in o.get("attributes") or []],
            "relations": [{"name": r.get("name"), "object": str(r.get("object"))} for r in o.get("relations") or []],
        })
    return {"width": meta.get("width"), "height": meta.get("height"), "location": meta.get("location"),
            "weather": meta.get("weather"), "objects": out}


def describe(plan: shifts.TaskPlan) -> str:
    """The dataset description: one line about the task, then ``shift_spec:`` and the spec JSON."""
    s = plan.spec
    head = (f"MetaShift task {plan.task_id}: classes {', '.join(plan.classes)}; shift type {s['shift_type']}; "
            f"splits {s['split_sizes']}.")
    return head + "\nshift_spec:\n" + json.dumps(s, sort_keys=True, indent=1)


def spec_from_description(description: str) -> dict:
    """Inverse of :func:`describe` (for cards/evaluation reading a prepared dataset)."""
    marker = "\nshift_spec:\n"
    if marker not in (description or ""):
        raise InputFormatError("dataset description has no 'shift_spec:' line",
                               "prepare the dataset with metashift_hf.prepare / the metashift builder")
    return json.loads(description.split(marker, 1)[1])


# ---------------------------------------------------------------------------------------------
# the builder
# ---------------------------------------------------------------------------------------------
class Metashift(datasets.GeneratorBasedBuilder):
    """MetaShift task datasets from a built artifact and GQA images (see module docstring)."""

    BUILDER_CONFIG_CLASS = MetashiftConfig
    BUILDER_CONFIGS: list = []
    VERSION = datasets.Version("1.0.0")

    def __init__(self, *args, **kwargs) -> None:
        name = kwargs.get("config_name")
        art = kwargs.get("artifact")
        if not name:
            raise UnknownNameError("the metashift builder needs a task id as config_name",
                                   "pass config_name='paper-dg-cat-dog-1' (or any id of metashift-hf tasks list)")
        if art is None:
            raise InputFormatError(f"task {name}: no artifact given",
                                   "pass artifact='ARTIFACT' (the folder written by `metashift-hf build`)")
        if isinstance(art, Artifact):
            self._artifact = art
            kwargs["artifact"] = str(art.root)
        else:
            self._artifact = Artifact.load(art)
            kwargs["artifact"] = str(Path(art))
        if kwargs.get("images") is not None:
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
        self._plan: shifts.TaskPlan | None = None
        self._source = None
        super().__init__(*args, **kwargs)

    # -- plan -----------------------------------------------------------------------------------
    @property
    def plan(self) -> shifts.TaskPlan:
        if self._plan is None:
            c = self.config
            if c.on_missing not in ("error", "skip"):
                raise InputFormatError(f"on_missing must be 'error' or 'skip', got {c.on_missing!r}",
                                       "use --on-missing error (default) or --on-missing skip")
            self._plan = plan_task(
                c.name, self._artifact, seed=int(c.seed), selected_classes=c.selected_classes,
                attributes_dataset=bool(c.attributes_dataset), attributes=c.attributes,
                image_subset_size_threshold=c.image_subset_size_threshold, min_local_groups=c.min_local_groups,
                overrides=c.overrides)
            if c.with_image_metadata and not (Path(self._artifact.root) / "images.parquet").is_file():
                raise InputFormatError(
                    f"with_image_metadata=True but artifact {self._artifact.root} has no images.parquet "
                    "(it was built from published subset pickles, which carry no scene graphs)",
                    "rebuild the artifact from GQA scene graphs (`metashift-hf build --scene-graphs ...`) "
                    "or drop with_image_metadata")
        return self._plan

    def _info(self) -> datasets.DatasetInfo:
        features = base_features(self.plan.classes)
        if self.config.with_image_metadata:
            features = datasets.Features({**features, **METADATA_FEATURES})
        return datasets.DatasetInfo(
            description=describe(self.plan),
            features=features,
            homepage="https://metashift.readthedocs.io/",
            license="CC BY 4.0 (images and annotations: Visual Genome / GQA)",
            citation=("@inproceedings{liang2022metashift, title={MetaShift: A Dataset of Datasets for Evaluating "
                      "Contextual Distribution Shifts and Training Conflicts}, author={Weixin Liang and James Zou}, "
                      "booktitle={ICLR}, year={2022}}"),
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

        if self.config.images is None:
            raise MissingImagesError(f"task {self.config.name}: no image source given",
                                     "pass images= a folder of <id>.jpg files or GQA's images.zip")
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
                # Said out loud (stderr via logging's last-resort handler) and recorded in the spec.
                logging.getLogger("metashift_hf").warning("task %s: skipped %s", plan.task_id, report.summary())
                plan = plan.without_images(report.bad_ids, reason={"missing": report.missing[:100],
                                                                   "corrupt": sorted(report.corrupt)[:100],
                                                                   "summary": report.summary()})
                self._plan = plan
                self.info.description = describe(plan)
        else:
            src.resolve(ids, "error", verify=False)  # missing files: one report before writing anything
        return [datasets.SplitGenerator(name=s, gen_kwargs={"split": s}) for s in plan.split_names()]

    def _generate_examples(self, split: str):
        src = self._source or self._open_source()
        meta = self.config.with_image_metadata
        verify = bool(self.config.verify_images) and self.config.on_missing == "error"
        rows = self.plan.splits[split]
        # datasets keeps only the path when it names an existing file (relative to the cwd): drop
        # the path for such ids so the bytes are always embedded (one listdir, not a stat per image).
        try:
            shadowed = {n for n in os.listdir(".") if n.endswith(".jpg")}
        except OSError:
            shadowed = set()
        # Reads stay in this thread: a read-ahead thread was measured slower (GIL contention with
        # the arrow writer; bench_materialise, 2 cores).
        for key, r in enumerate(rows):
            data = _read_checked(src, r.image_id, verify)
            path = f"{r.image_id}.jpg"
            rec = {"image": {"bytes": data, "path": None if path in shadowed else path},
                   "image_id": r.image_id, "label": r.label, "context": r.context,
                   "contexts": list(r.contexts), "group": r.group, "community": int(r.community)}
            if meta:
                rec.update(metadata_record(self._artifact.image_metadata(r.image_id), r.image_id))
            yield key, rec


def image_problem(data: bytes) -> str | None:
    """Why ``data`` is unusable, or None. JPEGs (all of GQA) get a structural check: SOI marker at
    the start, EOI marker near the end (catches truncated downloads and garbage); other formats
    the full PIL check of ``metashift_hf.builders.images.sniff_image``. Parsing every JPEG header with PIL
    would halve the materialising speed."""
    if data[:3] == b"\xff\xd8\xff":
        return None if b"\xff\xd9" in data[-4096:] else "truncated JPEG (no end-of-image marker)"

    return sniff_image(data)


def _read_checked(src, image_id: str, verify: bool) -> bytes:
    data = src.read(image_id)
    if verify:
        why = image_problem(data)
        if why:
            raise MissingImagesError(
                f"image {image_id} in {src.describe()} is unusable: {why}",
                "pass --on-missing skip (Python: on_missing='skip') to drop unusable images, "
                "or replace the file", image_ids=[image_id])
    return data


def shift_spec(ds: "datasets.Dataset | datasets.DatasetDict") -> dict:
    """The shift spec stored in a prepared dataset's info."""
    if isinstance(ds, datasets.DatasetDict):
        ds = next(iter(ds.values()))
    return spec_from_description(ds.info.description)


__all__ = ["Metashift", "MetashiftConfig", "plan_task", "task_ids", "shift_spec", "describe", "LEGACY_CLASSES"]
