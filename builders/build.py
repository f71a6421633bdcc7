"""Orchestration: inputs -> candidate subsets -> rules -> per-class meta-graphs -> artifact folder."""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from metashift_hf.core import __version__
from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.core.fsutil import (
    ParquetRowGroups,
    atomic_dir,
    check_out,
    sha256_file,
    write_parquet,
)
from metashift_hf.core.names import terminal_safe
from metashift_hf.core.options import byte_size, positive_int
from metashift_hf.core.provenance import (
    PROVENANCES,
    Provenance,
    SourceInfo,
    check_source_info,
    is_synthetic,
)

from . import artifact as art
from . import distances, metagraph
from .build_inputs import BUILD_INPUTS, BuildInput, InputRecord, ReadSettings
from .build_options import BuildOptions
from .class_worker import AnalysisParams, analyse_one
from .plots import plot_name
from .subsets import KINDS, CandidateSubsets, KeptSubsets, apply_rules
from .tag_store import TagCandidates


logger = logging.getLogger(__name__)


class _Clock:
    """Wall and CPU seconds since creation (CPU time stays meaningful when other jobs share the cores)."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def __str__(self) -> str:
        return f"{time.perf_counter() - self.wall:.2f} s (cpu {time.process_time() - self.cpu:.2f} s)"


def _summary(values: Sequence[int]) -> dict:
    if len(values) == 0:
        return {"min": 0, "median": 0, "mean": 0.0, "max": 0}
    a = np.asarray(values, dtype=np.int64)
    return {"min": int(a.min()), "median": float(np.median(a)), "mean": round(float(a.mean()), 3), "max": int(a.max())}


def _can_plot() -> bool:
    try:
        import matplotlib  # noqa: F401  (optional: the pictures need it)
    except ImportError:
        return False
    return True


class _InMemory:
    """A :class:`CandidateSubsets` read through the interface of ``tag_store.TagCandidates`` (the
    out-of-core source), so the build has one path: scene graphs, pickles and fixtures are held in
    memory (GQA fits one machine), multi-label tags are counted in DuckDB."""

    def __init__(self, candidates: CandidateSubsets) -> None:
        self.c = candidates
        self.image_ids = candidates.image_ids
        self.collisions = candidates.collisions
        self._kept = np.zeros(len(candidates), dtype=bool)

    def open(self, spill: Path) -> "_InMemory":
        return self

    def close(self) -> None:
        pass

    def __len__(self) -> int:
        return len(self.c)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.c.kinds)))

    def only_kinds(self, enabled: set[str]) -> None:
        if not all(k in enabled for k in self.c.kinds):
            self.c = self.c.select(np.fromiter((k in enabled for k in self.c.kinds), dtype=bool, count=len(self.c)))

    def big(self, min_images: int) -> tuple[int, int]:
        sizes = self.c.sizes()
        return int((sizes >= min_images).sum()), int(sizes.max(initial=0))

    def rules(self, min_images: int, min_subsets: int, max_subsets: int = 0) -> KeptSubsets:
        r = apply_rules(self.c, min_images, min_subsets, max_subsets)
        self._kept = r.kept
        idx = np.flatnonzero(r.kept)
        return KeptSubsets(
            r.classes,
            idx.astype(np.int64),
            [self.c.names[i] for i in idx.tolist()],
            [self.c.subjects[i] for i in idx.tolist()],
            self.c.sizes()[idx],
        )

    def best_subject(self, min_images: int) -> tuple[str, int]:
        per_subject: dict[str, int] = {}
        for s, n in zip(self.c.subjects, self.c.sizes().tolist()):
            per_subject[s] = per_subject.get(s, 0) + int(n >= min_images)
        return max(per_subject.items(), key=lambda kv: (kv[1], kv[0]))

    def distinct_images(self, kept_only: bool) -> int:
        if not kept_only:
            return int(np.unique(self.c.indices).size)
        rows = np.flatnonzero(self._kept).tolist()
        return int(np.unique(np.concatenate([self.c.members(self.c.names[i]) for i in rows])).size) if rows else 0

    def kind_counts(self) -> dict:
        return {
            k: {
                "candidates": int(sum(1 for x in self.c.kinds if x == k)),
                "kept": int(sum(1 for x, ok in zip(self.c.kinds, self._kept.tolist()) if x == k and ok)),
            }
            for k in KINDS
        }

    def names_array(self) -> list[str]:
        return self.c.names

    def membership_codes(self):
        return art.candidate_codes(self.c)

    def class_members(self, kept: KeptSubsets):
        by_class: dict[str, list[int]] = {}
        for i, subject in zip(kept.sid.tolist(), kept.subjects):
            by_class.setdefault(subject, []).append(i)
        for subject in kept.classes:
            yield (
                subject,
                {self.c.names[i]: self.c.indices[self.c.indptr[i] : self.c.indptr[i + 1]] for i in by_class[subject]},
            )

    def subsets_pieces(self, communities: Mapping[str, int], schema: pa.Schema) -> Iterator[pa.Table]:
        yield art.subsets_table(self.c, self._kept, communities)


def _apply_rules(held, options: BuildOptions) -> KeptSubsets:
    """Drop kinds that are off, apply the rules; EmptyResultError (with the numbers) when nothing is left."""
    enabled = set(options.kinds())
    if isinstance(held, _InMemory):
        held.only_kinds(enabled)
    elif not set(held.kinds) <= enabled:
        held = None  # multi-label subsets are all object contexts: none is left
    if held is None or len(held) == 0:
        raise EmptyResultError(
            f"no candidate subsets of the enabled kinds ({', '.join(sorted(enabled))})",
            "check the inputs, or enable other kinds (--include-attributes / --include-general / --include-objects)",
        )
    kept = held.rules(options.min_images_per_subset, options.min_subsets_per_class, options.max_subsets_per_class)
    if not kept.classes:
        n_big, largest = held.big(options.min_images_per_subset)
        best = held.best_subject(options.min_images_per_subset)
        raise EmptyResultError(
            f"no class passes the rules: {n_big} of {len(held)} candidate subsets have "
            f">= {options.min_images_per_subset} images (largest: {largest}), and the best "
            f"subject {best[0]!r} has {best[1]} such subsets but needs more than {options.min_subsets_per_class}",
            "lower --min-images-per-subset and/or --min-subsets-per-class, or give more input data",
        )
    return kept


def _distances_rows(subject: str, analysis: Any) -> pa.Table:
    """distances.parquet rows of one class: every within-class pair (source < target)."""
    m = metagraph.class_distances(analysis)
    i, j = np.triu_indices(len(m.names), 1)
    names = np.asarray(m.names, dtype=object)
    values = m.values[i, j]
    rules = m.rules[i, j]
    return pa.table(
        {
            "subject": pa.array(np.full(i.size, subject, dtype=object), pa.string()),
            "source": pa.array(names[i], pa.string()),
            "target": pa.array(names[j], pa.string()),
            "distance": pa.array(values, pa.float64(), mask=np.isnan(values)),
            "rule": pa.array(np.where(rules == "", None, rules), pa.string()),
            "status": pa.array(
                np.where(np.isnan(values), distances.STATUS_DISCONNECTED, distances.STATUS_OK).astype(object),
                pa.string(),
            ),
        },
        schema=art.DISTANCES_SCHEMA,
    )


def _class_rows(subject: str, a: Any, n_images: int) -> tuple[dict, pa.Table, pa.Table]:
    """One class's classes.parquet row and its edges/embeddings rows (sorted within the class)."""
    row = {
        "subject": subject,
        "n_subsets": len(a.subsets),
        "n_images": n_images,
        "n_communities": len(set(a.communities.values())),
        "embedding_status": a.embedding_status,
        "embedding_note": a.embedding_note,
    }
    edge_rows = [(subject, s, t, float(w)) for s, t, w in sorted(a.edges)]
    emb_rows = []
    for s in sorted(a.embedding):
        vec = np.asarray(a.embedding[s], dtype=np.float64)
        if np.isfinite(vec).all():
            emb_rows.append((subject, s, vec.tolist(), distances.RULE_SPECTRAL))
    columns = lambda rows, schema: {k: [r[i] for r in rows] for i, k in enumerate(schema.names)}  # noqa: E731
    return (
        row,
        pa.table(columns(edge_rows, art.EDGES_SCHEMA), schema=art.EDGES_SCHEMA),
        pa.table(columns(emb_rows, art.EMBEDDINGS_SCHEMA), schema=art.EMBEDDINGS_SCHEMA),
    )


def _stats(held, kept: KeptSubsets, class_rows: list, n_edges: int, options: BuildOptions) -> dict:
    status_counts: dict[str, int] = {}
    for r in class_rows:
        status_counts[r["embedding_status"]] = status_counts.get(r["embedding_status"], 0) + 1
    return {
        "candidate_keys": len(held),
        "candidate_images": held.distinct_images(kept_only=False),
        "kept_subsets_any_class": held.big(options.min_images_per_subset)[0],
        "classes": len(kept.classes),
        "subsets": int(kept.sid.size),
        "images": held.distinct_images(kept_only=True),
        "subsets_per_class": _summary([r["n_subsets"] for r in class_rows]),
        "images_per_subset": _summary(kept.sizes.tolist()),
        "kinds": held.kind_counts(),
        "embedding_status": dict(sorted(status_counts.items())),
        "edges": n_edges,
        "name_collisions_merged": int(held.collisions),
        "rules": {
            "min_images_per_subset": options.min_images_per_subset,
            "min_subsets_per_class": options.min_subsets_per_class,
        },
    }


def build_artifact(
    candidates: CandidateSubsets | TagCandidates,
    out: str | os.PathLike,
    options: BuildOptions = BuildOptions(),
    *,
    record: InputRecord = InputRecord(),
    source_info: SourceInfo | None = None,
    plots: bool = True,
    workers: int = 1,
    force: bool = False,
) -> "art.Artifact":
    """Apply the rules, analyse every class and write the artifact folder atomically.

    ``candidates``: every candidate subset (kinds not enabled in ``options`` are dropped first).
    ``record``: what was read (input files, provenance, images.parquet rows of scene-graph and COCO
    inputs; ``build_inputs.InputRecord``). Returns the loaded Artifact.
    ``out`` must be new, empty or (with ``force``) an earlier artifact; it never holds an input.
    ``source_info``: the licence, name and homepage of user data (provenance custom only).
    ``workers``: processes that analyse the classes (the same tables for any number); they are
    started with ``spawn``, which re-imports the caller's main script (guard it with
    ``if __name__ == "__main__":``).
    """
    workers = positive_int(workers, "workers")

    options = options.validate()
    source_info = check_source_info(source_info, record.provenance)
    held = _InMemory(candidates) if isinstance(candidates, CandidateSubsets) else candidates
    plot = plots and _can_plot()
    # One writer thread compresses membership.parquet (streamed from the candidates) and the image
    # table while the classes are analysed (pyarrow and DuckDB release the GIL). Leaving the
    # executor waits for it; closing the candidates removes their spill folder; atomic_dir then
    # renames, or removes everything on error.
    input_paths = [i.get("path") for i in record.inputs]
    with atomic_dir(out, kind=art.ARTIFACT_KIND, force=force, inputs=input_paths) as tmp:
        try:
            clock = _Clock()
            held.open(tmp / _SPILL)
            logger.info(f"candidates: {len(held)} subsets in {clock}")
            clock = _Clock()
            kept = _apply_rules(held, options)
            logger.info(f"rules: {len(kept.classes)} classes, {kept.sid.size} subsets in {clock}")
            with ThreadPoolExecutor(max_workers=1) as writer:
                files = _write_tables(held, kept, options, tmp, writer, record.image_meta, plot, workers)
            manifest = art.Manifest(
                format=art.FORMAT,
                format_version=art.FORMAT_VERSION,
                package_version=__version__,
                options=options,
                tables=tuple(sorted(files)),
                content_hash=art.table_hash(tmp, files),
                # per table, checked by Artifact when it reads one (tables of two builds are never mixed)
                table_sha256={f: sha256_file(tmp / f) for f in sorted(files)},
                inputs=tuple(dict(i) for i in record.inputs),
                source=record.provenance,
                synthetic=is_synthetic(record.provenance),
                source_info=source_info,
            )
            art.write_json(tmp / "manifest.json", manifest.to_dict())
        finally:
            held.close()
    return art.Artifact.load(out)


_SPILL = ".spill"  # the out-of-core candidates' database and spill files, inside the build's temp folder


# Fewer classes are analysed here: starting spawned workers (~1-2 s each, numpy/scipy imports) costs
# more than small builds take (the demo world, COCO).
POOL_MIN_CLASSES = 32


def _analyse_classes(
    classes: Iterable[tuple[str, dict[str, np.ndarray]]],
    n_classes: int,
    options: BuildOptions,
    workers: int,
    plots: Path | None,
) -> Iterator[tuple[str, metagraph.ClassAnalysis, int]]:
    """``class_worker.analyse_one`` for every class, in ``workers`` processes (1, or fewer than
    ``POOL_MIN_CLASSES`` classes: here). Each class's analysis is
    a function of its members alone (seeded, LAPACK single-threaded), so the results are the same for
    any number of workers; at most two classes per worker are in flight (memory stays bounded)."""
    params = AnalysisParams(options.edge_threshold, options.community_method, options.spectral_dim, options.seed)
    if workers <= 1 or n_classes < POOL_MIN_CLASSES:
        for subject, members in classes:
            yield analyse_one(subject, members, params, plots)
        return
    # spawn, not fork: the table writer thread (and DuckDB's) must not be copied into a child
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        in_flight: collections.deque = collections.deque()
        for subject, members in classes:
            in_flight.append(pool.submit(analyse_one, subject, members, params, plots))
            if len(in_flight) >= 2 * workers:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()


def _write_tables(
    held,
    kept: KeptSubsets,
    options: BuildOptions,
    tmp: Path,
    writer: ThreadPoolExecutor,
    image_meta,
    plot: bool,
    workers: int,
) -> list[str]:
    """Every table, stats.json and the plots into ``tmp``; the table file names."""
    pending = [
        writer.submit(
            art.write_membership,
            tmp / "membership.parquet",
            held.names_array(),
            held.image_ids,
            held.membership_codes(),
        )
    ]
    files = ["membership.parquet"]
    if image_meta is not None:
        pending.append(writer.submit(lambda: write_parquet(art.image_meta_table(image_meta), tmp / "images.parquet")))
        files.append("images.parquet")

    clock = _Clock()
    if plot:
        (tmp / "plots").mkdir()
    # classes arrive in name order; each one's rows are written as it comes, so only the
    # communities and one row per class stay (distances alone are ~n^2/2 rows per class)
    communities: dict[str, int] = {}
    class_rows: list[dict] = []
    n_edges = 0
    with (
        ParquetRowGroups(tmp / "edges.parquet", art.EDGES_SCHEMA, combine=True) as edges_w,
        ParquetRowGroups(tmp / "embeddings.parquet", art.EMBEDDINGS_SCHEMA, combine=True) as emb_w,
        ParquetRowGroups(tmp / "distances.parquet", art.DISTANCES_SCHEMA) as dist_w,
    ):
        for subject, analysis, n in _analyse_classes(
            held.class_members(kept), len(kept.classes), options, workers, tmp / "plots" if plot else None
        ):
            communities.update(analysis.communities)
            row, edges_t, emb_t = _class_rows(subject, analysis, n)
            class_rows.append(row)
            n_edges += edges_t.num_rows
            edges_w.add(edges_t)
            emb_w.add(emb_t)
            dist_w.add(_distances_rows(subject, analysis))
    logger.info(f"meta-graphs: analysed {len(class_rows)} classes in {clock}")
    for row in class_rows if plot else ():  # a class whose name is no safe file name: say where its picture is
        if plot_name(row["subject"]) != f"{row['subject']}.png":
            logger.warning(
                f"class '{terminal_safe(row['subject'])}' is no safe file name: its meta-graph is "
                f"plots/{plot_name(row['subject'])}"
            )

    clock = _Clock()
    files += ["edges.parquet", "embeddings.parquet", "distances.parquet"]
    # subsets.parquet in row groups as pieces come (as write_parquet of the whole table would write it)
    with ParquetRowGroups(tmp / "subsets.parquet", art.SUBSETS_SCHEMA, combine=True) as subsets_w:
        for piece in held.subsets_pieces(communities, art.SUBSETS_SCHEMA):
            subsets_w.add(piece)
    write_parquet(pa.Table.from_pylist(class_rows, schema=art.CLASSES_SCHEMA), tmp / "classes.parquet")
    files += ["subsets.parquet", "classes.parquet"]
    for job in pending:
        job.result()  # re-raises a writer error here
    art.write_json(tmp / "stats.json", _stats(held, kept, class_rows, n_edges, options))
    logger.info(f"tables: written in {clock}")
    return files


def build_from_inputs(
    out: str | os.PathLike,
    given: BuildInput,
    options: BuildOptions = BuildOptions(),
    *,
    provenance: Provenance | None = None,
    source_info: SourceInfo | None = None,
    plots: bool = True,
    workers: int = 1,
    memory_limit: int | None = None,
    force: bool = False,
) -> "art.Artifact":
    """The ``metashift-hf build`` pipeline: one build input -> artifact.

    ``given`` is one of the registered build inputs (``build_inputs.BUILD_INPUTS``): ``SceneGraphs``
    (GQA scene graphs), ``PublishedPickles``, ``CocoInstances``, ``TagsTable`` (CSV/parquet of
    image_id,tag rows), ``HubMultiLabel`` (a Hub dataset with a multi-label column). The multi-label
    inputs make ``subject(context)`` subsets by co-occurrence (builders/tags.py), restricted by
    ``options.subject_tags/subject_categories``. ``workers=2`` reads large scene-graph files with two
    processes (see read_scene_graphs).
    ``provenance`` is recorded in manifest.json (core.provenance); by default the input's own
    (``demo`` for scene graphs listed by a demo-world summary beside them). ``source_info`` (licence,
    name, homepage) describes user data: it needs provenance ``custom`` (the default of the tags and
    Hub inputs). ``memory_limit`` (bytes; default ``tag_store.DEFAULT_MEMORY_FRACTION`` of physical
    memory) bounds DuckDB, which counts the candidates of the multi-label inputs out of core, spilling
    into the build's temporary folder beyond it.
    """
    if not isinstance(given, BuildInput):
        raise InputFormatError(f"{given!r} is not a build input", BUILD_INPUTS.fix)
    settings = ReadSettings(
        positive_int(workers, "workers"), None if memory_limit is None else byte_size(memory_limit, "memory_limit")
    )
    options = options.validate()
    if provenance is not None and provenance not in PROVENANCES:
        raise InputFormatError(f"unknown provenance {provenance!r}", f"use one of: {', '.join(PROVENANCES)}")
    # before the (long) read: only user data takes a licence and origin from the user
    check_source_info(source_info, provenance or given.provenance)
    # before the (long) read: an --out that may not be replaced fails at once
    check_out(out, art.ARTIFACT_KIND, force=force, inputs=given.paths())
    if not given.multi_label and (options.subject_tags or options.subject_categories):
        raise InputFormatError(
            "--subject-tags/--subject-categories apply to multi-label sources only",
            "use them with --coco-annotations, --tags or --hf-dataset",
        )
    read = given.read(options, settings)
    record = read.record if provenance is None else dataclasses.replace(read.record, provenance=provenance)
    return build_artifact(
        read.candidates,
        out,
        read.options,
        record=record,
        source_info=source_info,
        plots=plots,
        workers=settings.workers,
        force=force,
    )
