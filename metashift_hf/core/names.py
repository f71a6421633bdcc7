"""Subset names: the one grammar for ``subject(context)``, parsed and formatted by :class:`SubsetName`;
and the one rule for showing names on a terminal (:func:`terminal_safe`)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .errors import InputFormatError


_NAME = re.compile(r"^([^()]+)\(([^()]+)\)$")
_NAME_FIX = "write subset names as 'subject(context)', e.g. 'dog(frisbee)' (spaces allowed, no extra parentheses)"


@dataclass(frozen=True, order=True)
class SubsetName:
    """A subset ``subject(context)``: ``SubsetName.parse("dog(frisbee)").context == "frisbee"``.

    Both parts are non-empty, carry no leading/trailing spaces and contain no parentheses; ``str()``
    gives the canonical text back, so ``str(SubsetName.parse(s)) == s`` for every valid ``s``.
    """

    subject: str
    context: str

    def __post_init__(self) -> None:
        for part in (self.subject, self.context):
            if not isinstance(part, str) or not part or part != part.strip() or "(" in part or ")" in part:
                raise InputFormatError(
                    f"subset name parts {self.subject!r}, {self.context!r} are not valid "
                    "(empty, padded with spaces, or containing parentheses)",
                    _NAME_FIX,
                )

    @classmethod
    def parse(cls, name: str) -> "SubsetName":
        """``'subject(context)'`` -> SubsetName; InputFormatError naming the text if malformed."""
        if not isinstance(name, str):
            raise InputFormatError(f"subset name {name!r} is not a string", _NAME_FIX)
        m = _NAME.match(name)
        if m is None:
            raise InputFormatError(f"subset name {name!r} is not of the form 'subject(context)'", _NAME_FIX)
        subject, context = m.group(1), m.group(2)
        if subject != subject.strip() or context != context.strip() or not subject.strip() or not context.strip():
            raise InputFormatError(f"subset name {name!r} has leading/trailing spaces or an empty part", _NAME_FIX)
        return cls(subject, context)

    def __str__(self) -> str:
        return f"{self.subject}({self.context})"


def subset_name(subject: str, context: str) -> str:
    """The canonical text of ``subject(context)`` (validated)."""
    return str(SubsetName(subject, context))


def parse_subset_name(name: str) -> tuple[str, str]:
    """``'subject(context)'`` -> ``(subject, context)``; InputFormatError if malformed."""
    parsed = SubsetName.parse(name)
    return parsed.subject, parsed.context


def usable_image_id(image_id: str) -> bool:
    """Whether an image id can name its file (``<id>.jpg``): not empty, not padded with spaces, no
    path character or NUL."""
    return bool(image_id.strip()) and image_id == image_id.strip() and not any(c in image_id for c in "/\\\0")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def id_slug(name: str) -> str:
    """A name as it appears inside a task id: characters the Hub refuses in config and folder names
    (spaces, apostrophes, ...) become ``_``, so ``living room`` gives ``class-living_room``."""
    return _UNSAFE.sub("_", name)


def path_component(name: str, limit: int = 48) -> str:
    """``name`` (a model's ``hf:PATH``, ``torchvision:NAME``) as one safe folder name: the :func:`id_slug`
    of it (no ``:``, ``/``, ``\\``, control characters or spaces), without leading/trailing dots, cut to
    ``limit`` characters, plus 8 hex of the name's sha256 whenever it had to change, so two names never
    share a folder. ``efficientnet-lite0`` stays ``efficientnet-lite0``."""
    slug = id_slug(name).strip("._-")[:limit] or "name"
    if slug == name:
        return slug
    return f"{slug}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


# Characters a terminal acts on instead of showing: C0/C1 controls and DEL (escape sequences, carriage
# return, newline), the line/paragraph separators, and the bidirectional overrides that reorder text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def control_char(text: str) -> str | None:
    """The first control character in ``text`` (see :func:`terminal_safe`), or None."""
    m = _CONTROL.search(text)
    return m.group(0) if m else None


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_safe(text: object) -> str:
    """``text`` for a terminal: every control character written as an escape (``\\x1b``, ``\\n``
    as ``\\x0a``, ``\\u202e``), so a name can neither move the cursor, recolour nor split a line.
    Every name a listing command prints goes through it; files (CSV, JSON) keep names as they are."""
    return _CONTROL.sub(_escape, str(text))


# Characters Markdown (CommonMark + GitHub tables) acts on inside a line: emphasis, code, links/images,
# table cells, strikethrough, and the backslash that escapes them. HTML's three go as entities.
_MARKDOWN = re.compile(r"[\\`*_\[\]|~]")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def markdown_safe(text: object) -> str:
    """``text`` as literal Markdown/HTML: control characters escaped as :func:`terminal_safe` does
    (no newline can end a table row, no OSC/CSI reaches a terminal that shows the file), ``& < >`` as
    HTML entities, and every Markdown punctuation that would act (`` ` * _ [ ] | ~ \\ ``) behind a
    backslash. A renderer shows ``terminal_safe(text)`` back, character for character; every name a
    Markdown file or card writes goes through it."""
    safe = "".join(_HTML.get(c, c) for c in terminal_safe(text))
    return _MARKDOWN.sub(lambda m: "\\" + m.group(0), safe)
