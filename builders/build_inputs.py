"""Build inputs: one registered class per kind of input data (``BUILD_INPUTS``).

A build input is a frozen dataclass (its fields are the typed configuration: the files or the dataset
to read) registered with ``@BUILD_INPUTS.register``; ``read`` turns it into candidate subsets plus the
record of what was read (:class:`InputRecord`). ``builders/build.py:build_from_inputs`` takes one of
them, and ``metashift-hf build`` makes one from its flags through each entry's ``from_flags``.

A new data source = one class here (a reader module beside it when it is large) and its flags in
``metashift_hf/commands/build.py``; nothing in ``build.py`` changes.

Names: a *build input* is what a build reads (this module); its *provenance*
(``core.provenance.Provenance``: gqa, published, coco, demo, synthetic, custom) is where the data
came from, recorded in manifest.json.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import pyarrow as pa

from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.fsutil import sha256_file
from metashift_hf.core.provenance import Provenance, demo_world_summary
from metashift_hf.core.registry import Registry

from .build_options import BuildOptions
from .coco import coco_image_meta, read_coco_annotations
from .pickles import load_candidate_pickle, verify_known
from .scene_graphs import read_scene_graphs
from .subsets import CandidateSubsets, candidates_from_scene_graphs
from .tag_store import TagCandidates
from .tags import MultiLabelDataset, TagsFile


logger = logging.getLogger(__name__)

PathLike = str | os.PathLike

BUILD_INPUTS: Registry[type["BuildInput"]] = Registry(
    "build input",
    "build from one source: --scene-graphs FILE [FILE ...], --candidate-subsets PKL [--attributes-pickle PKL], "
    "--coco-annotations FILE [FILE ...], --tags FILE, or --hf-dataset NAME --tag-column COL",
)


@dataclass(frozen=True)
class InputRecord:
    """What a build read, as manifest.json records it: the input files (path, sha256, role), their
    provenance and, for scene-graph and COCO inputs, the images.parquet rows."""

    inputs: tuple[Mapping[str, Any], ...] = ()
    provenance: Provenance = "custom"
    image_meta: Any = None  # pa.Table | Iterable[Mapping] | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(dict(i) for i in self.inputs))


@dataclass(frozen=True)
class ReadSettings:
    """How an input is read: ``workers`` processes / DuckDB threads; ``memory_limit`` bytes for DuckDB
    (multi-label inputs count their candidates out of core; None: ``tag_store``'s default)."""

    workers: int = 1
    memory_limit: int | None = None


@dataclass(frozen=True)
class ReadInput:
    """A build input after reading: the candidate subsets, the record, and the options (an input may
    turn a kind on: the published attributes pickle holds only attribute subsets)."""

    candidates: CandidateSubsets | TagCandidates
    record: InputRecord
    options: BuildOptions


class BuildInput(ABC):
    """One kind of input data. Subclasses are frozen dataclasses registered in :data:`BUILD_INPUTS`."""

    name: ClassVar[str]  # registry name, e.g. "scene-graphs"
    flags: ClassVar[str]  # the build command's flags, for messages
    provenance: ClassVar[Provenance]  # the default provenance (before reading)
    multi_label: ClassVar[bool] = False  # subjects chosen by --subject-tags/--subject-categories

    @abstractmethod
    def paths(self) -> list[PathLike]:
        """The local files this input reads (an --out may never be one of them)."""

    @abstractmethod
    def read(self, options: BuildOptions, settings: ReadSettings) -> ReadInput:
        """Read the input into candidate subsets (long: called after every cheap check)."""

    @classmethod
    @abstractmethod
    def from_flags(cls, args: Any) -> "BuildInput | None":
        """This input from the build command's parsed flags, or None when none of its flags is given."""


def _file_records(paths: Sequence[PathLike], digests: Sequence[str], role: str) -> tuple[dict, ...]:
    return tuple({"path": str(Path(p).resolve()), "sha256": d, "role": role} for p, d in zip(paths, digests))


def _tag_candidates(table, options: BuildOptions, settings: ReadSettings) -> TagCandidates:
    # the reader's Arrow buffers are freed by now; hand their pages back (mimalloc/jemalloc keep them)
    pa.default_memory_pool().release_unused()
    # counted out of core when build_artifact opens it (tag co-occurrence, DuckDB under memory_limit)
    return TagCandidates(
        table,
        subjects=options.subject_tags,
        subject_categories=options.subject_categories,
        memory_limit=settings.memory_limit,
        threads=settings.workers,
    )


@dataclass(frozen=True)
class _Files(BuildInput):
    """An input read from a list of files (``files``; one flag taking several paths)."""

    files: tuple[PathLike, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", tuple(self.files))

    def paths(self) -> list[PathLike]:
        return list(self.files)

    @classmethod
    def from_flags(cls, args: Any) -> "_Files | None":
        given = getattr(args, cls.flags.lstrip("-").replace("-", "_"))
        return cls(tuple(given)) if given else None


@BUILD_INPUTS.register
@dataclass(frozen=True)
class SceneGraphs(_Files):
    """GQA scene-graph JSON files (train/val), streamed (builders/scene_graphs.py)."""

    name: ClassVar[str] = "scene-graphs"
    flags: ClassVar[str] = "--scene-graphs"
    provenance: ClassVar[Provenance] = "gqa"

    def read(self, options: BuildOptions, settings: ReadSettings) -> ReadInput:
        clock = time.perf_counter()
        sg = read_scene_graphs(self.files, workers=settings.workers)
        logger.info(
            f"read: {len(sg.image_ids)} images, {len(sg.obj_names)} objects, {len(sg.rel_subjects)} relations "
            f"from {len(self.files)} file(s) in {time.perf_counter() - clock:.2f} s"
        )
        candidates = candidates_from_scene_graphs(
            sg, pairing=options.pairing, general_context_as=options.general_context_as, kinds=options.kinds()
        )
        logger.info(f"candidates: {len(candidates)} subsets ({options.pairing} pairing)")
        # The demo world is GQA-shaped but drawn: recognise it by its summary file listing these
        # exact files, so `build --scene-graphs world/*.json` does not label drawn shapes as GQA.
        provenance: Provenance = "demo" if demo_world_summary(self.files, sg.sha256) else "gqa"
        record = InputRecord(_file_records(self.files, sg.sha256, "scene_graphs"), provenance, sg.meta)
        return ReadInput(candidates, record, options)


_PICKLE_NAMES = {False: "full-candidate-subsets.pkl", True: "attributes-candidate-subsets.pkl"}


@BUILD_INPUTS.register
@dataclass(frozen=True)
class PublishedPickles(BuildInput):
    """The published candidate-subset pickle(s): the full one and/or the attributes one (read by the
    restricted unpickler, builders/pickles.py). Giving ``attributes_pickle`` turns attributes on."""

    candidate_subsets: PathLike | None = None
    attributes_pickle: PathLike | None = None

    name: ClassVar[str] = "published-pickles"
    flags: ClassVar[str] = "--candidate-subsets/--attributes-pickle"
    provenance: ClassVar[Provenance] = "published"

    def paths(self) -> list[PathLike]:
        return [p for p in (self.candidate_subsets, self.attributes_pickle) if p]

    def read(self, options: BuildOptions, settings: ReadSettings) -> ReadInput:
        parts, inputs = [], []
        if self.attributes_pickle:
            options = dataclasses.replace(options, include_attributes=True)
        for path, role, is_attr in (
            (self.candidate_subsets, "candidate_subsets", False),
            (self.attributes_pickle, "attributes_pickle", True),
        ):
            if path and Path(path).name == _PICKLE_NAMES[not is_attr]:
                flag = "--attributes-pickle" if not is_attr else "--candidate-subsets"
                raise InputFormatError(
                    f"{path} was given as --{role.replace('_', '-')}, but its name says it is the other published pickle",
                    f"pass it with {flag} (kinds of its subsets depend on which file it is)",
                )
            if path:
                parts.append(load_candidate_pickle(path, attributes=is_attr))  # checks existence and format
                digest = verify_known(path) or sha256_file(path)
                inputs.append({"path": str(Path(path).resolve()), "sha256": digest, "role": role})
        candidates = CandidateSubsets.combine(parts)
        logger.info(f"candidates: loaded {len(candidates)} subsets")
        return ReadInput(candidates, InputRecord(tuple(inputs), "published"), options)

    @classmethod
    def from_flags(cls, args: Any) -> "PublishedPickles | None":
        if not (args.candidate_subsets or args.attributes_pickle):
            return None
        return cls(args.candidate_subsets, args.attributes_pickle)


@BUILD_INPUTS.register
@dataclass(frozen=True)
class CocoInstances(_Files):
    """MS-COCO instances files: categories of one image co-occur as tags (builders/coco.py)."""

    name: ClassVar[str] = "coco"
    flags: ClassVar[str] = "--coco-annotations"
    provenance: ClassVar[Provenance] = "coco"
    multi_label: ClassVar[bool] = True

    def read(self, options: BuildOptions, settings: ReadSettings) -> ReadInput:
        coco = read_coco_annotations(self.files)
        logger.info(
            f"read: {len(coco.images)} images, {coco.n_annotations} annotations, {len(coco.tags.tags)} categories "
            f"from {len(self.files)} file(s)"
        )
        record = InputRecord(_file_records(self.files, coco.sha256, "coco_annotations"), "coco", coco_image_meta(coco))
        return ReadInput(_tag_candidates(coco.tags, options, settings), record, options)


@BUILD_INPUTS.register
@dataclass(frozen=True)
class TagsTable(BuildInput):
    """A table of image_id,tag rows (CSV or parquet), streamed into DuckDB (builders/tags.py)."""

    file: PathLike

    name: ClassVar[str] = "tags"
    flags: ClassVar[str] = "--tags"
    provenance: ClassVar[Provenance] = "custom"
    multi_label: ClassVar[bool] = True

    def paths(self) -> list[PathLike]:
        return [self.file]

    def read(self, options: BuildOptions, settings: ReadSettings) -> ReadInput:
        # checked now (file, columns); read batch by batch into DuckDB when build_artifact opens it
        table = TagsFile(self.file)
        record = InputRecord(
            ({"path": str(Path(self.file).resolve()), "sha256": sha256_file(self.file), "role": "tags"},)
        )
        return ReadInput(_tag_candidates(table, options, settings), record, options)

    @classmethod
    def from_flags(cls, args: Any) -> "TagsTable | None":
        return cls(args.tags) if args.tags else None


@BUILD_INPUTS.register
@dataclass(frozen=True)
class HubMultiLabel(BuildInput):
    """A Hub (or local) dataset with a multi-label column (``tags.MultiLabelDataset``)."""

    dataset: MultiLabelDataset

    name: ClassVar[str] = "hf-dataset"
    flags: ClassVar[str] = "--hf-dataset"
    provenance: ClassVar[Provenance] = "custom"
    multi_label: ClassVar[bool] = True

    def paths(self) -> list[PathLike]:
        return []  # a dataset id or folder read through `datasets`, never written

    def read(self, options: BuildOptions, settings: ReadSettings) -> ReadInput:
        ds = self.dataset.load()
        dataset = self.dataset.resolved(ds)
        table = dataset.tag_table(ds)
        logger.info(f"read: {len(table)} image-tag rows from {dataset.name}")
        return ReadInput(_tag_candidates(table, options, settings), InputRecord((dataset.input_record(),)), options)

    @classmethod
    def from_flags(cls, args: Any) -> "HubMultiLabel | None":
        if not args.hf_dataset:
            if args.tag_column or args.id_column or args.image_column:
                raise InputFormatError(
                    "--tag-column/--id-column/--image-column apply to --hf-dataset only",
                    "add --hf-dataset NAME, or drop them",
                )
            return None
        if not args.tag_column:
            raise InputFormatError("--hf-dataset needs --tag-column", "name the dataset's multi-label column")
        return cls(
            MultiLabelDataset(
                args.hf_dataset,
                args.tag_column,
                split=args.hf_split,
                id_column=args.id_column,
                image_column=args.image_column,
            )
        )


def one_input(given: Sequence[BuildInput]) -> BuildInput:
    """The one build input among ``given``; an InputFormatError naming them when there are none or several."""
    if len(given) == 1:
        return given[0]
    raise InputFormatError(
        f"{len(given)} sources given ({', '.join(g.flags for g in given)})" if given else "no input given",
        BUILD_INPUTS.fix,
    )


def input_from_flags(args: Any) -> BuildInput:
    """The build input the command's flags name (each registered input reads its own flags)."""
    return one_input([x for cls in BUILD_INPUTS.values() if (x := cls.from_flags(args)) is not None])


__all__ = [
    "BUILD_INPUTS",
    "BuildInput",
    "CocoInstances",
    "HubMultiLabel",
    "InputRecord",
    "PublishedPickles",
    "ReadInput",
    "ReadSettings",
    "SceneGraphs",
    "TagsTable",
    "input_from_flags",
    "one_input",
]
