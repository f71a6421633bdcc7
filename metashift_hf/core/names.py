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
    return _hashed_if_changed(name, id_slug(name).strip("._-")[:limit] or "name")


_NOT_IN_FILE = re.compile(r"[^\w.\- ]")


def file_stem(name: str, limit: int = 120) -> str:
    """A class name (free text: ``living room``, ``t-shirt``, ``自転車``) as one file name without its suffix
    (``plots/<stem>.png``): letters, digits, ``.``, ``-``, ``_`` and spaces kept, anything else (``/``, ``\\``,
    ``:``) as ``_``, never a leading dot (no hidden file, no ``..``), cut to ``limit`` characters, plus 8 hex of
    the name's sha256 whenever it had to change, so ``../../pwn``, ``.._.._pwn`` and ``a/b``, ``a_b`` never
    share a file (issue 46 D14)."""
    stem = _NOT_IN_FILE.sub("_", name)
    stem = ("_" + stem[1:] if stem.startswith(".") else stem)[:limit]
    return _hashed_if_changed(name, stem or "name")


def _hashed_if_changed(name: str, slug: str) -> str:
    if slug == name:
        return slug
    return f"{slug}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


# The refused characters, as code-point ranges: what a terminal acts on instead of showing — C0/C1 controls and DEL
# (escape sequences, carriage return, newline), the line/paragraph separators, the bidirectional marks and overrides
# that reorder text — and what it shows as nothing: every format character (Unicode category Cf: zero-width space
# and joiners, soft hyphen, BOM, word joiner, tag characters) and the other default-ignorable code points (variation
# selectors, Hangul fillers, combining grapheme joiner), with which two different names print alike ('cat' and
# 'cat\u200b'). Category Cf of Unicode 14 (Python 3.11) is covered whole: tests/test_tag_names.py checks it.
# Last, every space but ' ' (Unicode category Zs: no-break, ogham, en/em/thin/hair, narrow no-break, medium
# mathematical, ideographic): 'so fa' and 'so\u00a0fa' were two subsets printed alike (issue 46 D9, case T-09).
CONTROL_RANGES = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
    (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
    (0x00A0, 0x00A0), (0x1680, 0x1680), (0x2000, 0x200A), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
)  # fmt: skip
_CONTROL = re.compile("[" + "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in CONTROL_RANGES) + "]")
# The same class in RE2 syntax, for Arrow's regex kernels (pyarrow.compute.match_substring_regex) over whole columns.
CONTROL_RE2 = "[" + "".join(f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in CONTROL_RANGES) + "]"


def control_char(text: str) -> str | None:
    """The first control character in ``text`` (see :func:`terminal_safe`), or None."""
    m = _CONTROL.search(text)
    return m.group(0) if m else None


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" if c < 0x10000 else f"\\U{c:08x}"


def terminal_safe(text: object) -> str:
    """``text`` for a terminal: every control character written as an escape (``\\x1b``, ``\\n``
    as ``\\x0a``, ``\\u202e``, a zero-width space as ``\\u200b``, a no-break space as ``\\xa0``), so a name
    can neither move the cursor, recolour nor split a line, and two names that differ only by an invisible
    character or a look-alike space do not print alike.
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
