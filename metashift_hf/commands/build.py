"""`metashift-hf build`: scene graphs or published pickles -> artifact folder."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time

from metashift_hf.builders.build import BuildOptions, build_from_inputs
from metashift_hf.builders.build_inputs import input_from_flags
from metashift_hf.builders.scene_graphs import default_workers
from metashift_hf.builders.tag_store import DEFAULT_MEMORY_FRACTION
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.options import byte_size, positive_int
from metashift_hf.core.provenance import PROVENANCES, SourceInfo, describe, is_demo_world_summary
from metashift_hf.sources.manifest import resolve_build_inputs

from . import HELP


logger = logging.getLogger(__name__)


def register(subparsers) -> None:

    p = subparsers.add_parser(
        "build",
        help=HELP["build"],
        description="Build from GQA scene graphs (--scene-graphs) or from the published candidate-subset "
        "pickle(s) (--candidate-subsets / --attributes-pickle). Writes parquet tables, stats.json, "
        "manifest.json and one meta-graph PNG per class into --out, atomically.",
    )
    src = p.add_argument_group("inputs (one source)")
    src.add_argument(
        "--source",
        choices=("gqa", "published"),
        help="take the inputs from the data manifest (metashift-hf download / download --register): "
        "gqa = GQA scene graphs, published = the published full-candidate-subsets.pkl",
    )
    src.add_argument(
        "--manifest", metavar="PATH", help="data manifest to read with --source (default: the user cache's)"
    )
    src.add_argument(
        "--scene-graphs",
        nargs="+",
        metavar="FILE",
        default=[],
        help="GQA train_sceneGraphs.json / val_sceneGraphs.json (streamed, never loaded whole)",
    )
    src.add_argument("--candidate-subsets", metavar="PKL", help="published full-candidate-subsets.pkl")
    src.add_argument(
        "--attributes-pickle",
        metavar="PKL",
        help="published attributes-candidate-subsets.pkl (implies --include-attributes)",
    )
    src.add_argument(
        "--coco-annotations",
        nargs="+",
        metavar="FILE",
        default=[],
        help="COCO instances_train2017.json [instances_val2017.json] (or annotations_trainval2017.zip): "
        "subsets subject(context) by co-occurrence of labelled objects, COCO image ids",
    )
    src.add_argument(
        "--tags",
        metavar="FILE",
        help="any multi-label dataset: CSV or parquet with columns image_id, tag (one row per tag; "
        "optional category column)",
    )
    src.add_argument(
        "--hf-dataset",
        metavar="NAME",
        help="a Hub dataset id (or local dataset folder) with a multi-label column, read with "
        "datasets.load_dataset; needs --tag-column",
    )
    src.add_argument(
        "--tag-column", metavar="COL", help="--hf-dataset: the multi-label column (list of names or ClassLabel ids)"
    )
    src.add_argument(
        "--id-column",
        metavar="COL",
        help="--hf-dataset: image id column (default: image_id when present, else the row number)",
    )
    src.add_argument(
        "--image-column",
        metavar="COL",
        help="--hf-dataset: the image column tasks read images from "
        "(default: the one column of Image type, if exactly one)",
    )
    src.add_argument(
        "--hf-split", metavar="SPLIT", default="train", help="--hf-dataset: split to read (default: train)"
    )
    src.add_argument(
        "--provenance",
        choices=PROVENANCES,
        default=None,
        help="where the inputs come from, recorded in manifest.json and shown on every card "
        "(default: demo when the scene graphs are listed by a demo_world.json beside them, "
        "else gqa for scene graphs, published for pickles; synthetic/demo data cannot be "
        "published without --allow-synthetic)",
    )
    own = p.add_argument_group(
        "user data (--tags, --hf-dataset, --provenance custom): stored in manifest.json, stated on every card"
    )
    own.add_argument(
        "--license",
        metavar="ID",
        help="the Hub licence id of the data, e.g. cc-by-4.0 (without it "
        "cards claim no licence and `publish` refuses the export)",
    )
    own.add_argument(
        "--source-name", metavar="TEXT", help="what the data is called, in plain words (shown as its origin)"
    )
    own.add_argument("--homepage", metavar="URL", help="http(s) page that describes the data")
    p.add_argument(
        "--out",
        required=True,
        metavar="ARTIFACT",
        help="artifact folder to write: new, empty, or an earlier artifact with --force (written atomically)",
    )
    p.add_argument(
        "--force", action="store_true", help="replace an earlier artifact in --out (nothing else is ever replaced)"
    )
    opts = p.add_argument_group("build options (stored in manifest.json)")
    for f in dataclasses.fields(BuildOptions):
        flag = "--" + f.name.replace("_", "-")
        help_text = f"{f.metadata.get('help', '')} (default: {f.default})"
        if f.type in (bool, "bool"):
            opts.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help_text
            )
        elif str(f.type).startswith("tuple"):
            opts.add_argument(
                flag,
                dest=f.name,
                type=_names,
                default=f.default,
                metavar="A,B",
                help=f"{f.metadata.get('help', '')} (default: none)",
            )
        else:
            kind = {"int": int, "float": float, "str": str}.get(
                f.type if isinstance(f.type, str) else f.type.__name__, str
            )
            opts.add_argument(
                flag,
                dest=f.name,
                type=kind,
                default=f.default,
                choices=f.metadata.get("choices"),
                metavar=None if f.metadata.get("choices") else {int: "N", float: "X"}.get(kind, "S"),
                help=help_text,
            )
    p.add_argument("--no-plots", action="store_true", help="skip the per-class meta-graph PNGs")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="parallel workers: here processes that read a large scene-graph file, DuckDB threads and "
        "the meta-graph process pool (default: 2 on a machine with 2+ cores)",
    )
    p.add_argument(
        "--memory-limit",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="multi-label sources (--tags, --hf-dataset, --coco-annotations): memory DuckDB may use to "
        "count the candidate subsets out of core, e.g. 2GiB; beyond it, it spills into the build's "
        f"temporary folder (default: {int(DEFAULT_MEMORY_FRACTION * 100)}%% of this machine's memory)",
    )
    p.set_defaults(func=run)


def _names(text: str) -> tuple[str, ...]:
    """'cat, dog' -> ('cat', 'dog')."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def run(args: argparse.Namespace) -> int:

    options = BuildOptions.from_dict({f.name: getattr(args, f.name) for f in dataclasses.fields(BuildOptions)})
    if args.source:
        if args.scene_graphs or args.candidate_subsets or args.coco_annotations or args.tags or args.hf_dataset:
            raise InputFormatError(
                "--source was given together with explicit input files",
                "use either --source gqa|published or --scene-graphs/--candidate-subsets",
            )
        found = resolve_build_inputs(
            args.source, args.manifest, include_attributes=bool(args.attributes_pickle) or options.include_attributes
        )
        args.scene_graphs = found["scene_graphs"]
        args.candidate_subsets = found["candidate_subsets"]
        args.attributes_pickle = args.attributes_pickle or found["attributes_pickle"]
    if args.scene_graphs:
        # `--scene-graphs world/*.json` also names the demo world's summary: it is provenance, not a scene graph
        # (it stays beside the files, where the build finds it and records `source: demo`).
        summaries = [f for f in args.scene_graphs if is_demo_world_summary(f)]
        args.scene_graphs = [f for f in args.scene_graphs if f not in summaries]
        for f in summaries:
            logger.info("%s is the demo world's summary, not a scene-graph file: read for provenance only", f)
        if not args.scene_graphs:
            raise InputFormatError(
                f"--scene-graphs names only the demo world's summary {summaries[0]}",
                "also name the scene graphs: train_sceneGraphs.json val_sceneGraphs.json",
            )
    t0 = time.perf_counter()
    artifact = build_from_inputs(
        args.out,
        input_from_flags(args),
        options,
        plots=not args.no_plots,
        provenance=args.provenance,
        source_info=SourceInfo(license=args.license, name=args.source_name, homepage=args.homepage),
        workers=default_workers() if args.workers is None else args.workers,
        memory_limit=args.memory_limit,
        force=args.force,
    )
    s = artifact.stats
    print(f"built {artifact.root} in {time.perf_counter() - t0:.1f} s")
    print(
        f"  candidate subsets: {s.candidate_keys:,} over {s.candidate_images:,} images "
        f"({s.kept_subsets_any_class:,} with >= {options.min_images_per_subset} images)"
    )
    print(f"  classes: {s.classes:,}   subsets: {s.subsets:,}   images: {s.images:,}")
    status = ", ".join(f"{k}: {v}" for k, v in s.embedding_status.items())
    print(f"  embeddings: {status}")
    print(f"  content hash: {artifact.content_hash[:16]}")
    print(f"  provenance: {artifact.provenance} ({describe(artifact.provenance)})")
    if artifact.provenance == "custom":
        info = artifact.manifest.source_info or SourceInfo()
        print(f"  licence: {info.license or 'none given (cards claim none; publish refuses: pass --license ID)'}")
    return 0
