"""Compare a built artifact with the published MetaShift statistics.

The published figures below are facts from the paper and the original repository (the
"published_statistics" the project's reference data lists). Which of them an artifact *must*
match depends on what it was built from:

* the pinned ``full-candidate-subsets.pkl`` alone -> the full-MetaShift figures, exactly
  (rounded to the published precision);
* the pinned ``attributes-candidate-subsets.pkl`` alone -> the MetaShift-Attributes figures;
* GQA scene graphs -> nothing exactly (the published subsets came from an unpublished script);
  the rules and the ontology bounds are checked;
* the demo world, custom or mixed inputs -> no published figure.

Every artifact is also checked for internal consistency: stats.json against its own tables and
the manifest's content hash. ``--verify`` fails when any check fails.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from metashift_hf.builders.artifact import Artifact, ArtifactStats, Manifest, SizeSummary, table_hash
from metashift_hf.builders.build_options import BuildOptions
from metashift_hf.builders.subsets import GENERAL_CATEGORY

from ..core.errors import InputFormatError
from ..core.fsutil import sha256_file
from ..core.provenance import describe, is_synthetic
from ..core.published import PUBLISHED_ATTRIBUTES, PUBLISHED_FULL, PUBLISHED_MATCH, PUBLISHED_RULES
from ..core.sources import KNOWN_FILES


# --- published facts: metashift_hf.core.published ------------------------------------------
# Distinct words in the context ontologies (the attribute lists hold 114 entries, 111 distinct:
# 'dark' and 'short' sit in two categories and 'leather' is listed twice).
ONTOLOGY_BOUNDS = {"general_contexts": 37, "attribute_contexts": 111}

FIGURES = (
    "candidate_keys",
    "kept_subsets_any_class",
    "subjects",
    "classes",
    "subsets",
    "subsets_per_class",
    "images_per_subset",
    "candidate_images",
    "images",
    "distinct_contexts",
    "general_contexts",
    "attribute_contexts",
    "object_contexts",
)

# the figures that depend on how scene graphs are read into subsets (pairing, kinds)
PAIRING_FIGURES = tuple(f for f in FIGURES if f != "subjects" and not f.endswith("_contexts"))

# Decimals the published figure is given with; ours is rounded the same way before comparing.
_DECIMALS = {"subsets_per_class": 1, "images_per_subset": 1}

_UNPUBLISHED_SCRIPT = (
    "the published subsets were made by an unpublished script (72,596 unique images; many "
    "pairs are one-directional, e.g. 'dish(plate)' without 'plate(dish)', which fits "
    "relation pairing)"
)


@dataclass
class CheckRow:
    figure: str
    published: float | None
    ours: float | None
    check: str = ""  # "exact", "<=", "consistency", "rule" or "" (shown only)
    ok: bool | None = None  # None: not checked
    explanation: str = ""

    @property
    def difference(self) -> float | None:
        if self.published is None or self.ours is None:
            return None
        return self.ours - self.published


@dataclass
class StatsReport:
    artifact: str
    provenance: str  # core.provenance (manifest.json `source`)
    reference: str  # "full", "attributes" or "none"
    basis: str  # why this reference / which checks apply
    rows: list[CheckRow] = field(default_factory=list)

    @property
    def failures(self) -> list[CheckRow]:
        return [r for r in self.rows if r.ok is False]

    def to_dict(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "source": self.provenance,
            "reference": self.reference,
            "basis": self.basis,
            "rows": [{**asdict(r), "difference": r.difference} for r in self.rows],
            "failures": [r.figure for r in self.failures],
        }

    def to_text(self) -> str:
        published = [r for r in self.rows if r.check != "consistency"]
        internal = [r for r in self.rows if r.check == "consistency"]
        lines = [
            f"artifact: {self.artifact}",
            f"source: {self.provenance}; compared with: {self.reference}",
            f"  ({self.basis})",
            "",
        ]
        lines += _table(("figure", "published", "ours", "difference", "check", "explanation"), published)
        lines += ["", "internal consistency"]
        lines += _table(("check", "stats.json", "tables", "difference", "result", "note"), internal)
        n_checked = sum(r.ok is not None for r in self.rows)
        lines += [
            "",
            f"{n_checked} checks, {len(self.failures)} failed"
            + (": " + ", ".join(r.figure for r in self.failures) if self.failures else ""),
        ]
        return "\n".join(line.rstrip() for line in lines)


def _table(head: tuple[str, ...], rows: list[CheckRow]) -> list[str]:
    body = [
        (
            r.figure,
            _fmt(r.published),
            _fmt(r.ours),
            _fmt(r.difference, sign=True),
            (r.check + (" ok" if r.ok else " FAIL" if r.ok is False else "")).strip(),
            r.explanation,
        )
        for r in rows
    ]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(5)]
    return [
        "  ".join(c.ljust(w) if i in (0, 4) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        + "  "
        + cells[5]
        for cells in [head, *body]
    ]


def _fmt(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "-"
    x = round(float(x), 3) + 0.0  # + 0.0 turns -0.0 into 0.0
    text = f"{x:+,.3f}" if sign else f"{x:,.3f}"
    return text.rstrip("0").rstrip(".")


def _mean(summary: Any) -> float | None:
    """stats.json gives per-class/per-subset figures as a SizeSummary (min, median, mean, max) or a number."""
    if isinstance(summary, SizeSummary):
        summary = summary.mean
    return None if summary is None else float(summary)


# --- what the artifact was built from ---------------------------------------------------------
def _pinned_inputs(manifest: Manifest) -> tuple[set[str], int]:
    """Keys of the known files among the build inputs (by sha256; hashed here when the manifest has
    no digest but the file is still there with a known size), and the number of other inputs."""
    by_sha = {k.sha256: k.key for k in KNOWN_FILES.values()}
    by_size = {k.size: k for k in KNOWN_FILES.values() if k.key != "images"}
    pinned, other = set(), 0
    for inp in manifest.inputs:
        digest = inp.get("sha256")
        path = Path(inp.get("path", ""))
        # Images never change the figures (the build reads no pixels): they do not decide the reference.
        if "image" in str(inp.get("role", "")) or digest == KNOWN_FILES["images"].sha256:
            continue
        if not digest and path.is_file() and path.stat().st_size in by_size:
            digest = sha256_file(path)
        if digest in by_sha:
            pinned.add(by_sha[digest])
        else:
            other += 1
    return pinned, other


def _reference(provenance: str, pinned: set[str], other: int) -> tuple[str, str, bool]:
    """(published figures to show, why, whether they must match exactly)."""
    if is_synthetic(provenance):
        return "none", f"{describe(provenance)}: synthetic data, no published GQA/MetaShift figure applies", False
    if pinned == {"subsets"} and not other:
        return (
            "full",
            "built from the pinned full-candidate-subsets.pkl: published full-MetaShift figures must match",
            True,
        )
    if pinned == {"attributes"} and not other:
        return (
            "attributes",
            (
                "attribute-only build from the pinned attributes-candidate-subsets.pkl: "
                "published MetaShift-Attributes figures must match"
            ),
            True,
        )
    if provenance == "gqa":
        return "full", f"built from GQA scene graphs: shown for comparison only; {_UNPUBLISHED_SCRIPT}", False
    if pinned:
        return (
            "full",
            (
                "mixed inputs ("
                + ", ".join(sorted(pinned))
                + (" + other files" if other else "")
                + "): no published figure describes this combination; shown for comparison only"
            ),
            False,
        )
    return "full", "custom inputs: shown for comparison only", False


# --- figures measured from the tables ---------------------------------------------------------
def measure(root: str | os.PathLike, options: BuildOptions) -> dict[str, float]:
    """Every figure of ``FIGURES`` recomputed from the artifact's parquet tables."""

    root = Path(root)
    subsets = pq.read_table(
        root / "subsets.parquet", columns=["subset", "subject", "context", "kind", "n_images", "kept"]
    ).to_pandas()
    members = pq.read_table(root / "membership.parquet")
    kept = subsets[subsets["kept"]]
    min_images = options.min_images_per_subset
    n_classes = kept["subject"].nunique()
    kept_names = kept["subset"].tolist()
    kept_ids = pc.filter(members["image_id"], pc.is_in(members["subset"], value_set=_as_array(kept_names)))

    general: set[str] = set()
    for s, c in subsets.loc[subsets["kind"] == "general", ["subject", "context"]].itertuples(index=False):
        general.add(s if s in GENERAL_CATEGORY else c)
    attrs = set(subsets.loc[subsets["kind"] == "attribute", "context"])
    objects = set(subsets.loc[subsets["kind"] == "object", "context"])
    return {
        "candidate_keys": len(subsets),
        "kept_subsets_any_class": int((subsets["n_images"] >= min_images).sum()),
        "subjects": subsets["subject"].nunique(),
        "classes": n_classes,
        "subsets": len(kept),
        "subsets_per_class": len(kept) / n_classes if n_classes else 0.0,
        "images_per_subset": float(kept["n_images"].mean()) if len(kept) else 0.0,
        "candidate_images": len(pc.unique(members["image_id"])),
        "images": len(pc.unique(kept_ids)),
        "distinct_contexts": len(general | attrs | objects),
        "general_contexts": len(general),
        "attribute_contexts": len(attrs),
        "object_contexts": len(objects),
    }


def _as_array(values: list[str]):
    import pyarrow as pa

    return pa.array(values, pa.string())


def _consistency_rows(
    root: Path, manifest: Manifest, stats: ArtifactStats, measured: dict[str, float], options: BuildOptions
) -> list[CheckRow]:
    """stats.json and the manifest's content hash against the tables themselves."""

    rows = []
    for key in (
        "candidate_keys",
        "kept_subsets_any_class",
        "classes",
        "subsets",
        "candidate_images",
        "images",
        "subsets_per_class",
        "images_per_subset",
    ):
        written = _mean(getattr(stats, key))
        ok = written is not None and math.isclose(
            written, measured[key], rel_tol=0, abs_tol=5e-4 * max(1, abs(written))
        )
        rows.append(
            CheckRow(
                f"stats.json {key}",
                written,
                measured[key],
                "consistency",
                ok,
                "" if ok else "stats.json disagrees with the tables: the artifact was altered or mis-built",
            )
        )
    classes = pq.read_table(root / "classes.parquet", columns=["subject", "n_subsets"]).to_pandas()
    need = options.min_subsets_per_class
    ok = len(classes) == measured["classes"] and bool((classes["n_subsets"] > need).all())
    rows.append(
        CheckRow(
            "classes.parquet = kept subjects",
            measured["classes"],
            len(classes),
            "consistency",
            ok,
            "" if ok else f"classes.parquet must list exactly the subjects with more than {need} kept subsets",
        )
    )
    if (root / "images.parquet").is_file():
        # Scene-graph builds: every image of a candidate subset came from a scene graph, so it has metadata.
        have = pq.read_table(root / "images.parquet", columns=["image_id"])["image_id"]
        ids = pc.unique(pq.read_table(root / "membership.parquet", columns=["image_id"])["image_id"])
        lacking = len(ids) - int(pc.sum(pc.is_in(ids, value_set=have.combine_chunks())).as_py() or 0)
        rows.append(
            CheckRow(
                "images.parquet covers candidate images",
                len(ids),
                len(ids) - lacking,
                "consistency",
                lacking == 0,
                "" if lacking == 0 else f"{lacking} candidate images have no metadata row",
            )
        )
    tables = manifest.tables
    if tables:
        ok = table_hash(root, tables) == manifest.content_hash
        rows.append(
            CheckRow(
                "content_hash",
                None,
                None,
                "consistency",
                ok,
                "tables match manifest.json"
                if ok
                else "tables differ from manifest.json's content_hash: "
                "the artifact was modified after it was built; rebuild it",
            )
        )
    return rows


def _match_rows(root: Path, exact: bool) -> list[CheckRow]:
    """ImageNet-matching figures when ``metashift-hf match`` wrote ``match/match.json`` into the artifact."""
    path = root / "match" / "match.json"
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFormatError(
            f"{path} is unreadable ({exc})", "re-run `metashift-hf match --artifact ARTIFACT`"
        ) from exc
    hierarchy = str(doc.get("hierarchy", ""))
    pub = PUBLISHED_MATCH.get(hierarchy, {})
    # Exact only for the published vocabulary over the pinned full pickle.
    check = exact and bool(pub) and doc.get("vocabulary_names") == pub.get("vocabulary_names")
    note = {
        "paper": "published ImageNet matching (tree imagenet1k_node_names.json)",
        "wordnet": "WordNet hypernym closure of the 1,000 classes: reference figures, not published",
    }.get(hierarchy, f"hierarchy {hierarchy!r}: no published figures")
    if pub and doc.get("vocabulary_names") != pub["vocabulary_names"]:
        note += (
            "; not comparable: the published matching used the 1,262 names of class_hierarchy.json and "
            "counted subsets without a size rule"
        )
    rows = []
    for fig in ("vocabulary_names", "matched_names", "subsets", "classes", "imagenet_leaves_covered"):
        ours = doc.get(fig)
        row = CheckRow(
            f"match {fig}",
            pub.get(fig),
            float(ours) if isinstance(ours, (int, float)) else None,
            explanation=note if fig == "vocabulary_names" else "",
        )
        if check:
            row.check, row.ok = "exact", row.ours == row.published
        rows.append(row)
    return rows


def _explain(fig: str, reference: str, provenance: str, options: BuildOptions) -> str:
    if reference == "attributes" or is_synthetic(provenance):
        return ""
    notes = {
        "distinct_contexts": "paper's count (37 general + 114 attribute entries + 1,702 object contexts); "
        "its definition is not published",
        "general_contexts": "size of the general-context ontology",
        "attribute_contexts": "entries of the attribute ontology (114 listed, 111 distinct words)",
        "object_contexts": "paper's count; the published full pickle's own keys use 835 distinct contexts",
    }
    if fig in notes:
        return notes[fig]
    if provenance == "gqa" and fig in PAIRING_FIGURES:
        bits = [f"pairing={options.pairing} on GQA scene graphs"]
        if options.pairing == "cooccurrence":
            bits.append(
                "co-occurrence gives both directions of every pair, the published keys are often one-directional"
            )
        if options.include_attributes:
            bits.append("attribute subsets included (the published full pickle has none)")
        if options.general_context_as == "context":
            bits.append("general contexts written as 'dog(ocean)', the published keys write 'ocean(dog)'")
        if fig == "candidate_images":
            bits.append("the published pickle covers 72,596 images chosen by an unpublished script")
        return "; ".join(bits)
    return ""


def compare(artifact: str | os.PathLike) -> StatsReport:
    """The comparison table for one artifact folder (see the module docstring for the checks)."""

    art = Artifact.load(artifact)
    manifest, stats, options = art.manifest, art.stats, art.options
    provenance = art.provenance
    pinned, other = _pinned_inputs(manifest)
    reference, basis, exact = _reference(provenance, pinned, other)
    published = {"full": PUBLISHED_FULL, "attributes": PUBLISHED_ATTRIBUTES}.get(reference, {})
    measured = measure(art.root, options)

    rows: list[CheckRow] = []
    for fig in FIGURES:
        pub = published.get(fig)
        ours = measured[fig]
        if fig in _DECIMALS:
            ours = round(ours, _DECIMALS[fig])
        row = CheckRow(fig, pub, ours, explanation=_explain(fig, reference, provenance, options))
        if (
            exact
            and pub is not None
            and fig not in ("distinct_contexts", "general_contexts", "attribute_contexts", "object_contexts")
        ):
            row.check, row.ok = "exact", ours == pub
        elif provenance == "gqa" and fig in ONTOLOGY_BOUNDS:
            row.check, row.ok = "<=", ours <= ONTOLOGY_BOUNDS[fig]
            row.explanation = f"at most {ONTOLOGY_BOUNDS[fig]} distinct ontology words; " + row.explanation
        if reference == "none":
            row.published = None
        rows.append(row)

    if reference != "none":
        # The published figures hold only under the published rules; say so where they differ.
        for key, pub in PUBLISHED_RULES.items():
            ours = getattr(options, key)
            ours_f = float(ours) if isinstance(ours, (int, float)) else None
            row = CheckRow(f"rule {key}", pub, ours_f)
            if exact or provenance == "gqa":
                if key in ("min_images_per_subset", "min_subsets_per_class"):
                    row.check, row.ok = "rule", ours_f == pub
                    if not row.ok:
                        row.explanation = "published figures assume the published rules; rebuild with the defaults"
            if key == "edge_threshold" and ours_f == 0.1:
                row.explanation = "the paper's text value; the original code used 0.2"
            rows.append(row)
    rows += _match_rows(art.root, exact and reference == "full")
    rows += _consistency_rows(art.root, manifest, stats, measured, options)
    return StatsReport(str(art.root), provenance, reference, basis, rows)
