"""The match output folder (default ``ARTIFACT/match/``): written atomically, read back by ``load_match``.

match.json            figures, hierarchy, source, task thresholds and counts
match_table.parquet   one row per vocabulary name (why it did or did not match)
subsets.parquet       the selected subsets (subject and context matched; kept on an artifact)
classes.parquet       one row per class: synset, wnid, n_subsets, n_images, covered ImageNet indices
tasks.parquet         the task registry (binary tasks + multiclass presets)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from metashift_hf.core import __version__
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.fsutil import atomic_dir, write_parquet

from .match import MatchResult, MatchRow, SubsetRecord
from .tasks import TaskEntry


FORMAT = "metashift-hf-match"
FORMAT_VERSION = 1
MATCH_KIND = "match"  # the marker kind of a match --out folder (core.fsutil)

_TABLE_SCHEMA = pa.schema(
    [
        ("name", pa.string()),
        ("matched", pa.bool_()),
        ("synset", pa.string()),
        ("wnid", pa.string()),
        ("definition", pa.string()),
        ("depth", pa.int64()),
        ("imagenet_indices", pa.list_(pa.int64())),
        ("sense_indices", pa.list_(pa.int64())),
        ("leaves", pa.list_(pa.string())),
        ("reason", pa.string()),
    ]
)
_SUBSETS_SCHEMA = pa.schema(
    [
        ("subset", pa.string()),
        ("subject", pa.string()),
        ("context", pa.string()),
        ("n_images", pa.int64()),
        ("kept", pa.bool_()),
        ("selected", pa.bool_()),
    ]
)
_CLASSES_SCHEMA = pa.schema(
    [
        ("class", pa.string()),
        ("synset", pa.string()),
        ("wnid", pa.string()),
        ("n_subsets", pa.int64()),
        ("n_images", pa.int64()),
        ("imagenet_indices", pa.list_(pa.int64())),
    ]
)
_TASKS_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("kind", pa.string()),
        ("classes", pa.list_(pa.string())),
        ("synsets", pa.list_(pa.string())),
        ("lca", pa.string()),
        ("lca_name", pa.string()),
        ("lca_depth", pa.int64()),
        ("path_similarity", pa.float64()),
        ("n_subsets", pa.list_(pa.int64())),
        ("n_images", pa.list_(pa.int64())),
        ("subset_rule", pa.string()),
        ("available", pa.bool_()),
        ("reason", pa.string()),
    ]
)


def _write(rows: list[dict], schema: pa.Schema, path: Path) -> None:
    write_parquet(pa.Table.from_pylist(rows, schema=schema), path)


def match_dir(path: str | os.PathLike) -> Path:
    """A match folder, or an artifact folder holding one under ``match/``."""
    path = Path(path)
    if (path / "match.json").is_file():
        return path
    if (path / "match" / "match.json").is_file():
        return path / "match"
    raise InputFormatError(
        f"no match output in {path} (no match.json there or in {path / 'match'})",
        f"run `metashift-hf match --artifact {path} --hierarchy wordnet` (or with --out) first",
    )


def write_match(
    result: MatchResult, out: str | os.PathLike, extra: dict | None = None, *, force: bool = False
) -> Path:
    """Write the whole match folder in one atomic rename."""

    out = Path(out)
    n_subsets: dict[str, int] = {}
    for s in result.selected():
        n_subsets[s.subject] = n_subsets.get(s.subject, 0) + 1
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
        **result.figures,
        "source": result.read_from,
        "kept_images": dict(sorted(result.kept_images.items())),
        **(extra or {}),
    }
    with atomic_dir(out, kind=MATCH_KIND, force=force) as tmp:
        (tmp / "match.json").write_text(json.dumps(header, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        _write(
            [
                {
                    **r.__dict__,
                    "imagenet_indices": list(r.imagenet_indices),
                    "sense_indices": list(r.sense_indices),
                    "leaves": list(r.leaves),
                }
                for r in result.table.values()
            ],
            _TABLE_SCHEMA,
            tmp / "match_table.parquet",
        )
        _write([s.__dict__ for s in result.subsets], _SUBSETS_SCHEMA, tmp / "subsets.parquet")
        _write(
            [
                {
                    "class": c,
                    "synset": result.table[c].synset,
                    "wnid": result.table[c].wnid,
                    "n_subsets": n_subsets[c],
                    "n_images": result.class_images.get(c),
                    "imagenet_indices": list(result.table[c].imagenet_indices),
                }
                for c in result.classes()
            ],
            _CLASSES_SCHEMA,
            tmp / "classes.parquet",
        )
        _write(
            [
                {
                    **t.__dict__,
                    "classes": list(t.classes),
                    "synsets": list(t.synsets),
                    "n_subsets": list(t.n_subsets),
                    "n_images": None if t.n_images is None else list(t.n_images),
                }
                for t in result.tasks
            ],
            _TASKS_SCHEMA,
            tmp / "tasks.parquet",
        )
    return out


def _read(path: Path, schema: pa.Schema) -> list[dict]:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputFormatError(f"cannot read {path}: {exc}", "re-run `metashift-hf match` to rewrite it") from exc
    missing = [n for n in schema.names if n not in table.column_names]
    if missing:
        raise InputFormatError(f"{path} lacks columns {missing}", "re-run `metashift-hf match` to rewrite it")
    return table.select(schema.names).to_pylist()


def read_tasks(path: str | os.PathLike) -> list[TaskEntry]:
    folder = match_dir(path)
    tasks = []
    for row in _read(folder / "tasks.parquet", _TASKS_SCHEMA):
        sim = row["path_similarity"]
        tasks.append(
            TaskEntry(
                **{
                    **row,
                    "classes": tuple(row["classes"]),
                    "synsets": tuple(row["synsets"]),
                    "n_subsets": tuple(row["n_subsets"]),
                    "path_similarity": float("nan") if sim is None else sim,
                    "n_images": None if row["n_images"] is None else tuple(row["n_images"]),
                }
            )
        )
    return tasks


def load_match(path: str | os.PathLike) -> MatchResult:
    """Read a match folder (or an artifact's ``match/``) back into a :class:`MatchResult`."""
    folder = match_dir(path)
    try:
        header = json.loads((folder / "match.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"{folder / 'match.json'} is not JSON: {exc}", "re-run `metashift-hf match`") from exc
    if header.get("format") != FORMAT:
        raise InputFormatError(f"{folder / 'match.json'} is not a {FORMAT} file", "re-run `metashift-hf match`")
    table = {}
    for row in _read(folder / "match_table.parquet", _TABLE_SCHEMA):
        table[row["name"]] = MatchRow(
            **{
                **row,
                "imagenet_indices": tuple(row["imagenet_indices"]),
                "sense_indices": tuple(row["sense_indices"]),
                "leaves": tuple(row["leaves"]),
            }
        )
    subsets = [SubsetRecord(**row) for row in _read(folder / "subsets.parquet", _SUBSETS_SCHEMA)]
    classes = _read(folder / "classes.parquet", _CLASSES_SCHEMA)
    figure_keys = (
        "vocabulary_names",
        "matched_names",
        "subsets",
        "classes",
        "imagenet_leaves_covered",
        "imagenet_classes_covered",
        "hierarchy",
        "hierarchy_nodes",
        "hierarchy_source",
        "hidden_subtrees",
    )
    return MatchResult(
        hierarchy=header.get("hierarchy", ""),
        table=table,
        subsets=subsets,
        class_images={c["class"]: c["n_images"] for c in classes},
        kept_images=header.get("kept_images", {}),
        read_from=header.get("source", {}),
        figures={k: header[k] for k in figure_keys if k in header}
        | {k: v for k, v in header.items() if k.startswith("tasks")},
        tasks=read_tasks(folder),
    )
