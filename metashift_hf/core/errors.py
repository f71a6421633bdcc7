"""One exception family for every bad input, each naming the thing and the fix."""

from __future__ import annotations


class MetashiftError(Exception):
    """A user-facing error: ``what`` went wrong and how to ``fix`` it.

    The command line prints ``error: <what>`` and ``  fix: <fix>`` and exits with status 2,
    never a traceback.
    """

    def __init__(self, what: str, fix: str = "") -> None:
        self.what = what
        self.fix = fix
        super().__init__(what if not fix else f"{what}\n  fix: {fix}")


class InputFormatError(MetashiftError):
    """A file exists but its content is not what we expect (malformed JSON, wrong shape)."""


class UnsafePickleError(MetashiftError):
    """A pickle asked for a global outside the allow-list."""


class ChecksumError(MetashiftError):
    """A file's sha256 differs from the pinned one."""


class UnknownNameError(MetashiftError):
    """An unknown class, subset, task or config name."""


class MissingImagesError(MetashiftError):
    """Images a task needs are absent or unreadable."""

    def __init__(self, what: str, fix: str = "", image_ids: list[str] | None = None) -> None:
        super().__init__(what, fix)
        self.image_ids = list(image_ids or [])


class EmptyResultError(MetashiftError):
    """Thresholds or filters left nothing to work with."""


class EmptyGroupError(EmptyResultError):
    """A task group has no usable image at all: smaller sizes cannot help."""


def did_you_mean(name: str, candidates, n: int = 3) -> str:
    """A short 'did you mean' hint for unknown names."""
    import difflib

    close = difflib.get_close_matches(name, list(candidates), n=n)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


def short_repr(value, limit: int = 60) -> str:
    """A bounded repr of a value read from a file: never walks a large or deeply nested structure."""
    import reprlib

    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlevel = limit, limit, 2
    return r.repr(value)
