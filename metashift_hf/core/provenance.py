"""Where an artifact's data comes from: recorded at build (manifest ``source``), shown on every card.

Synthetic data (the demo world, benchmark worlds) must never be presented as Visual Genome / GQA:
``stats`` does not compare it with published figures, cards say so at the top, and ``publish``
refuses it unless told ``--allow-synthetic``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, Sequence, get_args

Provenance = Literal["gqa", "published", "coco", "demo", "synthetic", "custom"]
PROVENANCES: tuple[str, ...] = get_args(Provenance)
SYNTHETIC: frozenset[str] = frozenset({"demo", "synthetic"})
DESCRIPTIONS = {
    "gqa": "GQA scene graphs of Visual Genome images",
    "published": "the published MetaShift candidate-subset pickles (Visual Genome images)",
    "coco": "MS-COCO object annotations (instances_*.json) and COCO images",
    "demo": "the seeded metashift-hf demo world: drawn shapes, not photographs",
    "synthetic": "synthetic scene graphs/images, not Visual Genome",
    "custom": "user-supplied inputs of unknown origin",
}

# The demo world writes this summary beside its scene graphs (metashift_hf.demo_world).
DEMO_WORLD_SUMMARY = "demo_world.json"
DEMO_WORLD_FORMAT = "metashift-hf-demo-world"


def is_synthetic(provenance: str | None) -> bool:
    return provenance in SYNTHETIC


def describe(provenance: str | None) -> str:
    return DESCRIPTIONS.get(str(provenance), f"unknown ({provenance})")


def _read_summary(path: Path) -> dict | None:
    """The demo-world summary at ``path``, or None when there is none (missing, not JSON, another format)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("format") == DEMO_WORLD_FORMAT else None


def is_demo_world_summary(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a demo world's summary file (`build --scene-graphs world/*.json` globs it in)."""
    path = Path(path)
    return path.name == DEMO_WORLD_SUMMARY and _read_summary(path) is not None


def demo_world_summary(files: Sequence[str | os.PathLike], digests: Sequence[str]) -> Path | None:
    """The demo-world summary that lists every one of ``files`` with its sha256, else None.

    Matching digests (not just the file name) means a GQA file copied next to a summary is not
    mistaken for demo data, and a demo file renamed or moved with its summary still is.
    """
    found = None
    for path, digest in zip(files, digests):
        summary_path = Path(path).resolve().parent / DEMO_WORLD_SUMMARY
        summary = _read_summary(summary_path)
        if summary is None or digest not in set((summary.get("sha256") or {}).values()):
            return None
        found = summary_path
    return found
