"""Where an artifact's data comes from: recorded at build (manifest ``source``), shown on every card.

Synthetic data (the demo world, benchmark worlds) must never be presented as Visual Genome / GQA:
``stats`` does not compare it with published figures, cards say so at the top, and ``publish``
refuses it unless told ``--allow-synthetic``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence, get_args

from .errors import InputFormatError
from .names import control_char


Provenance = Literal["gqa", "published", "coco", "demo", "synthetic", "custom"]
PROVENANCES: tuple[str, ...] = get_args(Provenance)
SYNTHETIC: frozenset[str] = frozenset({"demo", "synthetic"})
DESCRIPTIONS = {
    "gqa": "GQA scene graphs of Visual Genome images",
    "published": "the published MetaShift candidate-subset pickles (Visual Genome images)",
    "coco": "MS-COCO object annotations (instances_*.json) and COCO images",
    "demo": "the seeded metashift-hf demo world: drawn shapes, not photographs",
    "synthetic": "synthetic scene graphs/images, not Visual Genome",
    "custom": "user-supplied data (a tags table, a Hub dataset or other inputs; licence and origin as the builder gave them)",
}

# Hub licence ids (https://huggingface.co/docs/hub/repositories-licenses): lowercase, e.g. cc-by-4.0, mit, other
_LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")
# Card text is Markdown: a source name holds no markup (tags, table pipes, links, code, emphasis)
_MARKUP = re.compile(r"[<>|\[\]`*\\&]")
_URL = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/?=&%+,;:@!$-]*)?")
_SOURCE_FLAGS = "--license, --source-name and --homepage"


@dataclass(frozen=True)
class SourceInfo:
    """What the builder of an artifact from user data (source ``custom``) says about that data:
    ``build --license ID --source-name TEXT --homepage URL``. Cards state it (and claim no licence
    without it); ``publish`` refuses a custom export without a licence. Stored in manifest.json."""

    license: str | None = None  # a Hub licence id
    name: str | None = None  # what the data is called, e.g. "Open Images V7 (a 5k-image sample)"
    homepage: str | None = None  # where it is described (http/https)

    def validate(self) -> "SourceInfo":
        if self.license is not None and not (isinstance(self.license, str) and _LICENSE_ID.fullmatch(self.license)):
            raise InputFormatError(
                f"--license {self.license!r} is not a Hub licence id",
                "use the id the Hub lists for your data's licence, in lowercase, e.g. --license "
                "cc-by-4.0, mit, odc-by or other",
            )
        if self.name is not None:
            bad = control_char(self.name) if isinstance(self.name, str) else None
            markup = _MARKUP.search(self.name) if isinstance(self.name, str) else None
            if (
                not isinstance(self.name, str)
                or not self.name.strip()
                or self.name != self.name.strip()
                or len(self.name) > 120
                or bad
                or markup
            ):
                raise InputFormatError(
                    f"--source-name {str(self.name)[:60]!r} is not a plain one-line name of at most "
                    "120 characters (no control characters or Markdown/HTML markup)",
                    "name the data in plain words, e.g. --source-name 'Open Images V7 sample'",
                )
        if self.homepage is not None and not (
            isinstance(self.homepage, str) and len(self.homepage) <= 300 and _URL.fullmatch(self.homepage)
        ):
            raise InputFormatError(
                f"--homepage {str(self.homepage)[:80]!r} is not an http(s) address",
                "give the page that describes the data, e.g. --homepage https://example.org/data",
            )
        return self

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.license, self.name, self.homepage))


def check_source_info(info: SourceInfo | None, provenance: str | None) -> SourceInfo | None:
    """``info`` validated for an artifact of ``provenance``; only user data (``custom``) takes it,
    since every other source's licence and origin are known (cards state them)."""
    if not info:
        return None
    if provenance != "custom":
        raise InputFormatError(
            f"{_SOURCE_FLAGS} describe user data (source custom); this build's source is "
            f"{provenance}, whose licence and origin are known",
            "drop them, or build from --tags / --hf-dataset (or pass --provenance custom)",
        )
    return info.validate()


# The demo world writes this summary beside its scene graphs (metashift_hf.sources.demo_world).
DEMO_WORLD_SUMMARY = "demo_world.json"
DEMO_WORLD_FORMAT = "metashift-hf-demo-world"


def is_synthetic(provenance: str | None) -> bool:
    return provenance in SYNTHETIC


def describe(provenance: str | None) -> str:
    return DESCRIPTIONS.get(str(provenance), f"unknown ({provenance})")


# The licence (Hub id) of data built from each source, and what it covers. Synthetic data carries the
# generator's licence (MIT, like the code); user data only what `build --license` recorded, else none.
# An artifact without a recorded source predates provenance and was built from GQA / the pickles.
SOURCE_LICENSES = {
    "gqa": "cc-by-4.0",
    "published": "cc-by-4.0",
    "coco": "cc-by-4.0",
    "demo": "mit",
    "synthetic": "mit",
}
_LICENSE_SCOPE = {
    "gqa": "images and annotations: Visual Genome / GQA",
    "published": "images and annotations: Visual Genome / GQA",
    "coco": "COCO's annotations; the images are Flickr photographs under their uploaders' licences",
    "demo": "synthetic images drawn by the metashift-hf generator",
    "synthetic": "synthetic images drawn by the metashift-hf generator",
}


def license_id(provenance: str | None, source_info: SourceInfo | None = None) -> str | None:
    """The Hub licence id of data from ``provenance`` (cards' ``license:``); None: none is known."""
    if provenance == "custom":
        return source_info.license if source_info else None
    return SOURCE_LICENSES.get(str(provenance), SOURCE_LICENSES["gqa"])


def license_statement(provenance: str | None, source_info: SourceInfo | None = None) -> str:
    """The licence in words (a ``datasets.DatasetInfo.license``), consistent with :func:`license_id`."""
    given = license_id(provenance, source_info)
    if provenance == "custom":
        if given is None:
            return "none given when the artifact was built: check the source's terms"
        return f"{given} (as declared for {source_info.name or 'the source data'} at build)"
    return f"{given} ({_LICENSE_SCOPE.get(str(provenance), _LICENSE_SCOPE['gqa'])})"


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
