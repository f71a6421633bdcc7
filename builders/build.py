"""Orchestration: inputs -> candidate subsets -> rules -> per-class meta-graphs -> artifact folder."""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from metashift_hf.core import __version__
from metashift_hf.core.errors import EmptyResultError, InputFormatError
from metashift_hf.core.fsutil import atomic_dir, check_out, sha256_file, write_parquet
from metashift_hf.core.provenance import (
    PROVENANCES,
    Provenance,
    SourceInfo,
    check_source_info,
    demo_world_summary,
    is_synthetic,
)

from . import artifact as art
from . import distances, metagraph
from .build_options import BuildOptions
from .coco import coco_image_meta, read_coco_annotations
from .pickles import load_candidate_pickle, verify_known
from .plots import plot_class
from .scene_graphs import read_scene_graphs
from .subsets import KINDS, CandidateSubsets, apply_rules, candidates_from_scene_graphs
from .tags import MultiLabelDataset, candidates_from_tags, read_tags_file

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


def _plot_name(subject: str) -> str:
    # class names are free text ('living room', 't-shirt'); keep file names portable
    return re.sub(r"[^\w.\- ]", "_", subject) + ".png"


def _plotter() -> Callable | None:
    try:
        import matplotlib  # noqa: F401

    except ImportError:
        return None
    return plot_class


def _apply_rules(candidates: CandidateSubsets, options: BuildOptions):
    """Drop kinds that are off, apply the rules; EmptyResultError (with the numbers) when nothing is left."""
    enabled = set(options.kinds())
    if not all(k in enabled for k in candidates.kinds):
        candidates = candidates.select(np.fromiter((k in enabled for k in candidates.kinds), dtype=bool,
                                                   count=len(candidates)))
    if len(candidates) == 0:
        raise EmptyResultError(
            f"no candidate subsets of the enabled kinds ({', '.join(sorted(enabled))})",
            "check the inputs, or enable other kinds (--include-attributes / --include-general / --include-objects)",
        )
    rules = apply_rules(candidates, options.min_images_per_subset, options.min_subsets_per_class)
    if not rules.classes:
        per_subject: dict[str, int] = {}
        for s, ok in zip(candidates.subjects, rules.big_enough.tolist()):
            per_subject[s] = per_subject.get(s, 0) + int(ok)
        best = max(per_subject.items(), key=lambda kv: (kv[1], kv[0]))
        raise EmptyResultError(
            f"no class passes the rules: {int(rules.big_enough.sum())} of {len(candidates)} candidate subsets have "
            f">= {options.min_images_per_subset} images (largest: {int(candidates.sizes().max())}), and the best "
            f"subject {best[0]!r} has {best[1]} such subsets but needs more than {options.min_subsets_per_class}",
            "lower --min-images-per-subset and/or --min-subsets-per-class, or give more input data",
        )
    return candidates, rules


def _distances_table(analyses: Mapping[str, Any]) -> pa.Table:
    """distances.parquet: every within-class pair (source < target), classes sorted."""
    cols: dict[str, list] = {k: [] for k in art.DISTANCES_SCHEMA.names}
    for subject in sorted(analyses):
        m = metagraph.class_distances(analyses[subject])
        i, j = np.triu_indices(len(m.names), 1)
        names = np.asarray(m.names, dtype=object)
        values = m.values[i, j]
        rules = m.rules[i, j]
        cols["subject"].append(pa.array(np.full(i.size, subject, dtype=object), pa.string()))
        cols["source"].append(pa.array(names[i], pa.string()))
        cols["target"].append(pa.array(names[j], pa.string()))
        cols["distance"].append(pa.array(values, pa.float64(), mask=np.isnan(values)))
        cols["rule"].append(pa.array(np.where(rules == "", None, rules), pa.string()))
        cols["status"].append(pa.array(np.where(np.isnan(values), distances.STATUS_DISCONNECTED,
                                                distances.STATUS_OK).astype(object), pa.string()))
    return pa.table({k: pa.chunked_array(v, art.DISTANCES_SCHEMA.field(k).type) for k, v in cols.items()},
                    schema=art.DISTANCES_SCHEMA)


def _class_tables(analyses: Mapping[str, Any], members_of: Mapping[str, dict]) -> tuple[list, pa.Table, pa.Table, pa.Table]:
    """classes/edges/embeddings tables (classes sorted, rows sorted within a class)."""
    class_rows, edge_rows, emb_rows = [], [], []
    for subject in sorted(analyses):
        a = analyses[subject]
        idx = np.concatenate(list(members_of[subject].values()))
        class_rows.append({
            "subject": subject, "n_subsets": len(a.subsets), "n_images": int(np.unique(idx).size),
            "n_communities": len(set(a.communities.values())), "embedding_status": a.embedding_status,
            "embedding_note": a.embedding_note,
        })
        for s, t, w in sorted(a.edges):
            edge_rows.append((subject, s, t, float(w)))
        for s in sorted(a.embedding):
            vec = np.asarray(a.embedding[s], dtype=np.float64)
            if np.isfinite(vec).all():
                emb_rows.append((subject, s, vec.tolist(), distances.RULE_SPECTRAL))
    columns = lambda rows, schema: {k: [r[i] for r in rows] for i, k in enumerate(schema.names)}  # noqa: E731
    return (class_rows, pa.Table.from_pylist(class_rows, schema=art.CLASSES_SCHEMA),
            pa.table(columns(edge_rows, art.EDGES_SCHEMA), schema=art.EDGES_SCHEMA),
            pa.table(columns(emb_rows, art.EMBEDDINGS_SCHEMA), schema=art.EMBEDDINGS_SCHEMA))


def _stats(candidates: CandidateSubsets, rules, class_rows: list, n_edges: int, options: BuildOptions) -> dict:
    kept_rows = np.flatnonzero(rules.kept).tolist()
    kept_idx = np.concatenate([candidates.indices[candidates.indptr[i]:candidates.indptr[i + 1]] for i in kept_rows])
    status_counts: dict[str, int] = {}
    for r in class_rows:
        status_counts[r["embedding_status"]] = status_counts.get(r["embedding_status"], 0) + 1
    kind_counts = {k: {"candidates": int(sum(1 for x in candidates.kinds if x == k)),
                       "kept": int(sum(1 for x, ok in zip(candidates.kinds, rules.kept.tolist()) if x == k and ok))}
                   for k in KINDS}
    return {
        "candidate_keys": len(candidates),
        "candidate_images": int(np.unique(candidates.indices).size),
        "kept_subsets_any_class": int(rules.big_enough.sum()),
        "classes": len(rules.classes),
        "subsets": int(rules.kept.sum()),
        "images": int(np.unique(kept_idx).size),
        "subsets_per_class": _summary([r["n_subsets"] for r in class_rows]),
        "images_per_subset": _summary(candidates.sizes()[rules.kept].tolist()),
        "kinds": kind_counts,
        "embedding_status": dict(sorted(status_counts.items())),
        "edges": n_edges,
        "name_collisions_merged": int(candidates.collisions),
        "rules": {"min_images_per_subset": options.min_images_per_subset,
                  "min_subsets_per_class": options.min_subsets_per_class},
    }


def build_artifact(
    candidates: CandidateSubsets,
    out: str | os.PathLike,
    options: BuildOptions = BuildOptions(),
    *,
    image_meta: pa.Table | Iterable[Mapping[str, Any]] | None = None,
    inputs: Sequence[Mapping[str, Any]] = (),
    source: Provenance = "custom",
    source_info: SourceInfo | None = None,
    plots: bool = True,
    force: bool = False,
) -> "art.Artifact":
    """Apply the rules, analyse every class and write the artifact folder atomically.

    ``candidates``: every candidate subset (kinds not enabled in ``options`` are dropped first).
    ``image_meta``: optional images.parquet rows (scene-graph sources). Returns the loaded Artifact.
    ``out`` must be new, empty or (with ``force``) an earlier artifact; it never holds an input.
    ``source_info``: the licence, name and homepage of user data (``source`` custom only).
    """


    options = options.validate()
    source_info = check_source_info(source_info, source)
    clock = _Clock()
    candidates, rules = _apply_rules(candidates, options)
    logger.info(f"rules: {len(rules.classes)} classes, {int(rules.kept.sum())} subsets in {clock}")

    # One writer thread compresses the tables that do not depend on the meta-graphs while the
    # classes are analysed (pyarrow releases the GIL). Leaving the `with` waits for it; atomic_dir
    # then renames, or removes everything on error.
    input_paths = [i.get("path") for i in inputs]
    with atomic_dir(out, kind=art.ARTIFACT_KIND, force=force, inputs=input_paths) as tmp, \
            ThreadPoolExecutor(max_workers=1) as writer:
        pending = [writer.submit(art.write_membership, candidates, tmp / "membership.parquet")]
        files = ["membership.parquet"]
        if image_meta is not None:
            pending.append(writer.submit(
                lambda: write_parquet(art.image_meta_table(image_meta), tmp / "images.parquet")))
            files.append("images.parquet")

        clock = _Clock()
        kept_rows: dict[str, list[int]] = {c: [] for c in rules.classes}
        for i in np.flatnonzero(rules.kept).tolist():
            kept_rows[candidates.subjects[i]].append(i)
        analyses, members_of = {}, {}
        for subject in rules.classes:
            members = {candidates.names[i]: candidates.indices[candidates.indptr[i]:candidates.indptr[i + 1]]
                       for i in kept_rows[subject]}
            members_of[subject] = members
            analyses[subject] = metagraph.analyse_class(
                subject, members, edge_threshold=options.edge_threshold, community_method=options.community_method,
                spectral_dim=options.spectral_dim, seed=options.seed,
            )
        logger.info(f"meta-graphs: analysed {len(analyses)} classes in {clock}")

        clock = _Clock()
        communities = {n: c for a in analyses.values() for n, c in a.communities.items()}
        class_rows, classes_t, edges_t, emb_t = _class_tables(analyses, members_of)
        for name, table in (("subsets", art.subsets_table(candidates, rules.kept, communities)),
                            ("classes", classes_t), ("edges", edges_t), ("embeddings", emb_t),
                            ("distances", _distances_table(analyses))):
            write_parquet(table, tmp / f"{name}.parquet")
            files.append(f"{name}.parquet")
        for job in pending:
            job.result()  # re-raises a writer error here
        manifest = art.Manifest(
            format=art.FORMAT, format_version=art.FORMAT_VERSION, package_version=__version__, options=options,
            tables=tuple(sorted(files)), content_hash=art.table_hash(tmp, files),
            # per table, checked by Artifact when it reads one (tables of two builds are never mixed)
            table_sha256={f: sha256_file(tmp / f) for f in sorted(files)},
            inputs=tuple(dict(i) for i in inputs), source=source, synthetic=is_synthetic(source),
            source_info=source_info)
        art.write_json(tmp / "manifest.json", manifest.to_dict())
        art.write_json(tmp / "stats.json", _stats(candidates, rules, class_rows, len(edges_t), options))
        logger.info(f"tables: written in {clock}")
        plot = _plotter() if plots else None
        if plot is not None:
            clock = _Clock()
            (tmp / "plots").mkdir()
            for subject in rules.classes:
                plot(analyses[subject], members_of[subject], tmp / "plots" / _plot_name(subject))
            logger.info(f"plots: {len(rules.classes)} PNGs in {clock}")
    return art.Artifact.load(out)


def build_from_inputs(
    out: str | os.PathLike,
    *,
    scene_graphs: Sequence[str | os.PathLike] = (),
    candidate_subsets: str | os.PathLike | None = None,
    attributes_pickle: str | os.PathLike | None = None,
    coco_annotations: Sequence[str | os.PathLike] = (),
    tags: str | os.PathLike | None = None,
    hf_dataset: MultiLabelDataset | None = None,
    options: BuildOptions = BuildOptions(),
    source: Provenance | None = None,
    source_info: SourceInfo | None = None,
    plots: bool = True,
    workers: int = 1,
    force: bool = False,
) -> "art.Artifact":
    """The ``metashift-hf build`` pipeline: one source -> artifact.

    Sources: GQA scene graphs; the published pickle(s); COCO instance files (``coco_annotations``);
    a tags table (``tags``: CSV/parquet of image_id,tag rows); a Hub dataset with a multi-label
    column (``hf_dataset``). The multi-label sources make ``subject(context)`` subsets by
    co-occurrence (builders/tags.py), restricted by ``options.subject_tags/subject_categories``.
    Passing ``attributes_pickle`` turns ``include_attributes`` on (it is the only thing it holds).
    ``workers=2`` reads large scene-graph files with two processes (see read_scene_graphs).
    ``source`` is the provenance recorded in manifest.json (core.provenance); by default it is
    ``demo`` for files listed by a demo-world summary beside them, else ``gqa`` / ``published`` /
    ``coco`` / ``custom``. ``source_info`` (licence, name, homepage) describes user data: it needs
    source ``custom`` (the default of ``tags`` and ``hf_dataset``).
    """


    options = options.validate()
    if source is not None and source not in PROVENANCES:
        raise InputFormatError(f"unknown provenance {source!r}", f"use one of: {', '.join(PROVENANCES)}")
    # before the (long) read: only user data takes a licence and origin from the user
    check_source_info(source_info, source or ("custom" if tags or hf_dataset else "coco" if coco_annotations else
                                              "published" if candidate_subsets or attributes_pickle else "gqa"))
    # before the (long) read: an --out that may not be replaced fails at once
    check_out(out, art.ARTIFACT_KIND, force=force,
              inputs=[*scene_graphs, candidate_subsets, attributes_pickle, *coco_annotations, tags])
    given = [name for name, v in (("--scene-graphs", scene_graphs),
                                  ("--candidate-subsets/--attributes-pickle", candidate_subsets or attributes_pickle),
                                  ("--coco-annotations", coco_annotations), ("--tags", tags),
                                  ("--hf-dataset", hf_dataset)) if v]
    if len(given) != 1:
        raise InputFormatError(
            f"{len(given)} sources given ({', '.join(given) or 'none'})" if given else "no input given",
            "build from one source: --scene-graphs FILE [FILE ...], --candidate-subsets PKL [--attributes-pickle PKL], "
            "--coco-annotations FILE [FILE ...], --tags FILE, or --hf-dataset NAME --tag-column COL",
        )
    multi_label = bool(coco_annotations or tags or hf_dataset)
    if not multi_label and (options.subject_tags or options.subject_categories):
        raise InputFormatError("--subject-tags/--subject-categories apply to multi-label sources only",
                               "use them with --coco-annotations, --tags or --hf-dataset")
    clock = _Clock()
    image_meta = None
    if scene_graphs:
        sg = read_scene_graphs(scene_graphs, workers=workers)
        logger.info(f"read: {len(sg.image_ids)} images, {len(sg.obj_names)} objects, {len(sg.rel_subjects)} relations "
                    f"from {len(scene_graphs)} file(s) in {clock}")
        clock = _Clock()
        candidates = candidates_from_scene_graphs(
            sg, pairing=options.pairing, general_context_as=options.general_context_as, kinds=options.kinds())
        logger.info(f"candidates: {len(candidates)} subsets ({options.pairing} pairing) in {clock}")
        inputs = [{"path": str(Path(p).resolve()), "sha256": d, "role": "scene_graphs"}
                  for p, d in zip(scene_graphs, sg.sha256)]
        image_meta = sg.meta
        # The demo world is GQA-shaped but drawn: recognise it by its summary file listing these
        # exact files, so `build --scene-graphs world/*.json` does not label drawn shapes as GQA.
        default_source = "demo" if demo_world_summary(scene_graphs, sg.sha256) else "gqa"
        del sg
    elif multi_label:
        if coco_annotations:
            coco = read_coco_annotations(coco_annotations)
            table = coco.tags
            inputs = [{"path": str(Path(p).resolve()), "sha256": d, "role": "coco_annotations"}
                      for p, d in zip(coco_annotations, coco.sha256)]
            image_meta = coco_image_meta(coco)
            default_source = "coco"
            logger.info(f"read: {len(coco.images)} images, {coco.n_annotations} annotations, {len(table.tags)} categories "
                        f"from {len(coco_annotations)} file(s) in {clock}")
        elif tags:
            table = read_tags_file(tags)
            inputs = [{"path": str(Path(tags).resolve()), "sha256": sha256_file(tags), "role": "tags"}]
            default_source = "custom"
            logger.info(f"read: {len(table)} image-tag rows, {len(table.image_ids)} images, {len(table.tags)} tags in {clock}")
        else:
            ds = hf_dataset.load()
            hf_dataset = hf_dataset.resolved(ds)
            table = hf_dataset.tag_table(ds)
            inputs = [hf_dataset.input_record()]
            default_source = "custom"
            logger.info(f"read: {len(table)} image-tag rows from {hf_dataset.name} in {clock}")
        clock = _Clock()
        candidates = candidates_from_tags(table, subjects=options.subject_tags,
                                          subject_categories=options.subject_categories)
        logger.info(f"candidates: {len(candidates)} subsets (tag co-occurrence) in {clock}")
    else:
        parts, inputs = [], []
        if attributes_pickle:
            options = dataclasses.replace(options, include_attributes=True)
        for path, role, is_attr in ((candidate_subsets, "candidate_subsets", False),
                                    (attributes_pickle, "attributes_pickle", True)):
            swapped = {False: "attributes-candidate-subsets.pkl", True: "full-candidate-subsets.pkl"}[is_attr]
            if path and Path(path).name == swapped:
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
        logger.info(f"candidates: loaded {len(candidates)} subsets in {clock}")
        default_source = "published"
    return build_artifact(candidates, out, options, image_meta=image_meta, inputs=inputs,
                          source=source or default_source, source_info=source_info, plots=plots, force=force)
