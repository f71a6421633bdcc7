"""A task in place (the Task tab): what its published card says about its data (licence, provenance, whether it is
synthetic, the attribution paragraph, its figures), its Hub pages (dataset page, viewer, card) for a Hub source,
and a few images of each group for a gallery.

The card is read as published (``README.md`` of the task repo, through :mod:`metashift_hf.hub.repo_files`: size
checked before parsing). Images are the parquet's own bytes (never decoded or re-encoded), written once into this
process's temporary folder so Gradio serves them from there (it serves no file of the export itself).
"""

from __future__ import annotations

import functools
import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..core import provenance
from ..core.errors import InputFormatError
from ..hub import repo_files
from .graphs import mime_of, task_data
from .index import IndexedTask


CARD = "README.md"
PER_GROUP = 2  # gallery images per group
MAX_GALLERY = 24  # gallery images per task
_EXT = {"image/jpeg": ".jpg", "image/png": ".png", "image/gif": ".gif", "image/webp": ".webp"}
_FIGURE = re.compile(r"!\[([^\]\n]*)\]\((images/[A-Za-z0-9._-]+\.png)\)")


@dataclass(frozen=True)
class CardFacts:
    """What a task's published card says about its data."""

    license: str | None  # the card's ``license:`` (a Hub licence id)
    provenance: str | None  # the artifact source the card records (``| provenance | ... |``)
    attribution: str  # the card's "Source and licence" paragraph (Markdown: links and bold only are shown)
    figures: tuple[tuple[str, str], ...]  # (alt text, repo path) of each figure the card shows

    @property
    def synthetic(self) -> bool:
        return provenance.is_synthetic(self.provenance)

    @property
    def license_words(self) -> str:
        if self.provenance is None:
            return self.license or "not stated by the card"
        return provenance.license_statement(self.provenance)


def is_hub(e: IndexedTask) -> bool:
    return not Path(e.repo).is_dir() and repo_files.looks_like_repo_id(e.repo)


def hub_links(e: IndexedTask) -> dict[str, str]:
    """The task's Hub pages (none for a local export): the dataset page, its viewer on this config, its card."""
    if not is_hub(e):
        return {}
    from huggingface_hub import constants  # heavy optional import: only a Hub source needs it

    page = f"{constants.ENDPOINT}/datasets/{e.repo}"
    return {"dataset page": page, "viewer": f"{page}/viewer/{e.config}", "card": f"{page}/blob/main/{CARD}"}


def _card_text(e: IndexedTask) -> str:
    if is_hub(e):
        files = repo_files.hub_files(e.repo)
        if CARD not in files:
            raise InputFormatError(f"Hub dataset repo {e.repo} has no {CARD}", "publish the task again")
        return repo_files.hub_text(e.repo, CARD, None, files[CARD])
    return repo_files.read_text_file(Path(e.repo) / CARD)


def _section(text: str, title: str) -> str:
    """The first paragraph under the card's ``## title`` heading ("" when the card has none)."""
    m = re.search(rf"^## {re.escape(title)}\s*\n+(.+?)(?:\n\s*\n|\Z)", text, re.M | re.S)
    return m.group(1).strip() if m else ""


@functools.lru_cache(maxsize=64)
def _card_facts(repo: str, config: str, text: str) -> CardFacts:
    front = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    lic = re.search(r"^license:\s*(\S+)\s*$", front.group(1), re.M) if front else None
    prov = re.search(r"^\| provenance \| ([a-z]+) \|", text, re.M)
    figures = tuple(dict.fromkeys(_FIGURE.findall(text)))
    return CardFacts(
        lic.group(1) if lic else None, prov.group(1) if prov else None, _section(text, "Source and licence"), figures
    )


def card_facts(e: IndexedTask) -> CardFacts:
    return _card_facts(e.repo, e.config, _card_text(e))


@functools.lru_cache(maxsize=1)
def _served() -> Path:
    """This process's folder of images to show (Gradio serves files from the temporary folder)."""
    return Path(tempfile.mkdtemp(prefix="metashift-space-"))


def serve_bytes(data: bytes, suffix: str) -> str:
    """``data`` as a file Gradio may serve (this process's temporary folder), named by its hash."""
    path = _served() / (hashlib.sha256(data).hexdigest()[:32] + suffix)
    if not path.exists():
        path.write_bytes(data)
    return str(path)


def figures(e: IndexedTask, facts: CardFacts) -> list[tuple[str, str]]:
    """(file or URL, caption) of each figure of the card: a Hub repo's by URL, a folder's copied to be served."""
    out = []
    for alt, rel in facts.figures:
        if is_hub(e):
            from huggingface_hub import constants  # heavy optional import: only a Hub source needs it

            out.append((f"{constants.ENDPOINT}/datasets/{e.repo}/resolve/main/{PurePosixPath(rel)}", alt))
            continue
        path = Path(e.repo) / rel
        if path.is_symlink() or not path.is_file():
            continue  # never followed, and a figure the card names but the folder lacks is not shown
        data = path.read_bytes()
        if mime_of(data) == "image/png":
            out.append((serve_bytes(data, ".png"), alt))
    return out


def gallery(e: IndexedTask, per_group: int = PER_GROUP, limit: int = MAX_GALLERY) -> list[tuple[str, str]]:
    """(file, caption) of up to ``per_group`` images of each group of each split (by image id), at most ``limit``."""
    td = task_data(e)
    picked = []
    for split, rows in td.plan.splits.items():
        by_group: dict[str, list[str]] = {}
        for r in sorted(rows, key=lambda r: r.image_id):
            ids = by_group.setdefault(r.group, [])
            if len(ids) < per_group:
                ids.append(r.image_id)
        picked += [(split, group, i) for group, ids in sorted(by_group.items()) for i in ids]
    source = td.images()
    out = []
    for split, group, image_id in picked[:limit]:
        data = source.read(image_id)
        mime = mime_of(data)
        if mime is not None:
            out.append((serve_bytes(data, _EXT.get(mime, ".img")), f"{split} · {group} · {image_id}"))
    return out
