"""One set of checks for the numbers and names a user passes, shared by the command line and the Python API.

Each check takes the value (a string from the command line, or a Python value) and, for messages,
the option's name; it returns the value converted or raises :class:`OptionError`. As argparse
``type=`` callables they get only the string, and argparse names the option itself::

    p.add_argument("--epochs", type=positive_int)
    epochs = positive_int(config.epochs, "epochs")

Every check runs before any work starts: a 0, a NaN or a negative seed never reaches numpy, torch
or a long feature computation. Integers are integers (``1.5`` and ``True`` are refused, never
rounded); reals are finite.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from typing import Any, Callable, Iterable, Literal

import numpy as np

from .errors import MetashiftError, short_repr


SEED_MAX = 2**32 - 1  # numpy, torch and scikit-learn all take seeds up to here
INT_MAX = 2**63 - 1  # what an int64 column or array holds
# The most training seeds one call may ask for (`train --seeds`, compare, experiments): each seed is a whole
# training run, so more is a typo (10**23, 0-1000000000) that would otherwise fill memory before any output.
SEEDS_MAX = 1000
# evaluate --image-size: classifiers take 224-600 px and stride 32 (below 32 px the last feature map is empty);
# past 1024 px a typo (2240 for 224) costs ~20x the compute per image before anything is shown.
IMAGE_SIZE_MIN, IMAGE_SIZE_MAX = 32, 1024
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,30}")
# What to do with a task image that is missing or corrupt in its image source (materialising a task, export,
# evaluate): stop and list them, or leave them out (the spec records what was skipped).
OnMissing = Literal["error", "skip"]
ON_MISSING: tuple[OnMissing, ...] = ("error", "skip")


class OptionError(MetashiftError, argparse.ArgumentTypeError):
    """An option or argument is of the wrong type or out of range (raised before any work).

    Also an ``argparse.ArgumentTypeError``, so a check used as ``type=`` is reported by argparse
    with the option's name and exit status 2.
    """


def _label(name: str | None) -> str:
    return f"{name}=" if name else ""


def _integer(value: Any, name: str | None) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not _INT_TEXT.fullmatch(text):
            raise OptionError(f"{_label(name)}{short_repr(value)} is not an integer", "write a whole number such as 3")
        return int(text)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OptionError(
            f"{_label(name)}{short_repr(value)} is a {type(value).__name__}, not an integer",
            "pass a whole number such as 3 (values are never rounded)",
        )
    return int(value)


def _real(value: Any, name: str | None) -> float:
    if isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            raise OptionError(
                f"{_label(name)}{short_repr(value)} is not a number", "write a number such as 0.05"
            ) from None
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise OptionError(
            f"{_label(name)}{short_repr(value)} is a {type(value).__name__}, not a number",
            "pass a number such as 0.05",
        )
    else:
        try:
            x = float(value)
        except OverflowError:
            x = math.inf
    if not math.isfinite(x):
        raise OptionError(f"{_label(name)}{short_repr(value)} is not a finite number", "pass a finite number")
    return x


def _int_range(value: Any, name: str | None, low: int, high: int, what: str) -> int:
    n = _integer(value, name)
    if not low <= n <= high:
        raise OptionError(f"{_label(name)}{n} is out of range: it must be {what}", f"pass {what}")
    return n


def _real_range(
    value: Any,
    name: str | None,
    low: float,
    high: float,
    what: str,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    x = _real(value, name)
    if x < low or (low_open and x == low) or x > high or (high_open and x == high):
        raise OptionError(f"{_label(name)}{x:g} is out of range: it must be {what}", f"pass {what}")
    return x


def positive_int(value: Any, name: str | None = None) -> int:
    """An integer >= 1 (epochs, batch sizes, counts)."""
    return _int_range(value, name, 1, INT_MAX, "a positive integer (1 or more)")


def non_negative_int(value: Any, name: str | None = None) -> int:
    """An integer >= 0 (retries, thresholds that may be off)."""
    return _int_range(value, name, 0, INT_MAX, "a non-negative integer (0 or more)")


_SIZE_TEXT = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?", re.IGNORECASE)
_SIZE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
MIN_BYTE_SIZE = 64 * 2**20  # below this an engine's own buffers do not fit


def image_size(value: Any, name: str | None = None) -> int:
    """A model's input side in pixels for ``evaluate --image-size``: an integer in IMAGE_SIZE_MIN..IMAGE_SIZE_MAX."""
    return _int_range(
        value,
        name,
        IMAGE_SIZE_MIN,
        IMAGE_SIZE_MAX,
        f"an integer number of pixels from {IMAGE_SIZE_MIN} to {IMAGE_SIZE_MAX} (e.g. 128 or 224)",
    )


def byte_size(value: Any, name: str | None = None) -> int:
    """An amount of memory in bytes, at least 64 MiB: an integer, or text such as ``2GiB``,
    ``1.5GB``, ``500MB`` (SI and binary units; a bare number is bytes)."""
    if isinstance(value, str):
        m = _SIZE_TEXT.fullmatch(value.strip())
        if not m:
            raise OptionError(
                f"{_label(name)}{short_repr(value)} is not an amount of memory",
                "write a size such as 2GiB, 1.5GB or 500MB",
            )
        size = float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "B").upper()]
        n = int(size) if math.isfinite(size) else INT_MAX + 1  # 400 nines: inf, too large (not a traceback)
    else:
        n = _integer(value, name)
    if n < MIN_BYTE_SIZE:
        raise OptionError(
            f"{_label(name)}{n} bytes is out of range: it must be at least 64 MiB",
            "pass a size such as 2GiB (at least 64MiB)",
        )
    if n > INT_MAX:  # 8 EiB: not a machine's memory (a typo, e.g. 99999999999TB)
        raise OptionError(
            f"{_label(name)}{n} bytes is too large: it must be at most {INT_MAX} bytes (8 EiB)",
            "pass a size such as 2GiB, at most this machine's memory",
        )
    return n


def shard(value: Any, name: str | None = None) -> tuple[int, int]:
    """``i/n`` (a job array's share, 0 <= i < n; ``(i, n)`` from Python) -> ``(i, n)``."""
    parts = value.split("/") if isinstance(value, str) else list(value) if isinstance(value, (tuple, list)) else None
    if parts is None or len(parts) != 2:
        raise OptionError(
            f"{_label(name)}{short_repr(value)} is not a shard i/n",
            "write i/n with 0 <= i < n, e.g. 0/4 .. 3/4 (Slurm: --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)",
        )
    count = positive_int(parts[1], f"{name or 'shard'} count")
    return _int_range(parts[0], f"{name or 'shard'} index", 0, count - 1, f"0 to {count - 1} (0 <= i < n)"), count


def seed(value: Any, name: str | None = None) -> int:
    """A seed: an integer in [0, 2**32 - 1], the range numpy, torch and scikit-learn share."""
    return _int_range(value, name, 0, SEED_MAX, f"a seed: an integer in [0, {SEED_MAX}]")


def seed_count(value: Any, name: str | None = None) -> int:
    """A number of training seeds: an integer in [1, :data:`SEEDS_MAX`]."""
    return _int_range(value, name, 1, SEEDS_MAX, f"a number of seeds from 1 to {SEEDS_MAX}")


def positive_float(value: Any, name: str | None = None) -> float:
    """A finite real > 0 (learning rates, timeouts)."""
    return _real_range(value, name, 0.0, math.inf, "a finite number > 0", low_open=True)


def non_negative_float(value: Any, name: str | None = None) -> float:
    """A finite real >= 0 (weight decay)."""
    return _real_range(value, name, 0.0, math.inf, "a finite number >= 0")


def finite_float(value: Any, name: str | None = None) -> float:
    """Any finite real (a normalisation mean, an offset)."""
    return _real(value, name)


def probability(value: Any, name: str | None = None) -> float:
    """A real in [0, 1]."""
    return _real_range(value, name, 0.0, 1.0, "a probability in [0, 1]")


def fraction(value: Any, name: str | None = None) -> float:
    """A share of something in (0, 1] (e.g. JTT's first-stage share of the epochs)."""
    return _real_range(value, name, 0.0, 1.0, "a fraction in (0, 1]", low_open=True)


def proper_fraction(value: Any, name: str | None = None) -> float:
    """A share strictly between 0 and 1 (a split of rows into two non-empty parts)."""
    return _real_range(value, name, 0.0, 1.0, "a fraction in (0, 1), e.g. 0.5", low_open=True, high_open=True)


def level(value: Any, name: str | None = None) -> float:
    """A significance or false-discovery level in (0, 1)."""
    return _real_range(value, name, 0.0, 1.0, "a level in (0, 1), e.g. 0.05", low_open=True, high_open=True)


def int_at_least(low: int) -> Callable[..., int]:
    """A check for integers >= ``low`` (e.g. k-means' k >= 2), usable as argparse ``type=``."""
    what = f"an integer >= {low}"

    def check(value: Any, name: str | None = None) -> int:
        return _int_range(value, name, low, INT_MAX, what)

    check.__name__ = f"int_at_least_{low}"
    return check


def int_in(low: int, high: int) -> Callable[..., int]:
    """A check for integers in [``low``, ``high``]: a count with an upper bound (epochs, DFR re-fits, search draws),
    so a typo (10**8) is refused before it runs for days; usable as argparse ``type=``."""
    what = f"an integer from {low} to {high}"

    def check(value: Any, name: str | None = None) -> int:
        return _int_range(value, name, low, high, what)

    check.__name__ = f"int_in_{low}_{high}"
    return check


def optional(check: Callable[..., Any], value: Any, name: str | None = None) -> Any:
    """``None`` (the default) or ``check(value)``."""
    return None if value is None else check(value, name)


def on_missing(value: Any, name: str | None = "on_missing") -> OnMissing:
    """``"error"`` or ``"skip"`` (:data:`ON_MISSING`): the one check of ``on_missing`` / ``--on-missing``."""
    if not isinstance(value, str) or value not in ON_MISSING:
        raise OptionError(
            f"{_label(name)}{short_repr(value)} is neither 'error' nor 'skip'",
            "pass 'error' (stop on a missing or corrupt image, listing them) or 'skip' (leave them out, recorded in "
            "the task's spec); CLI: --on-missing error|skip",
        )
    return value  # type: ignore[return-value]


def text(value: Any, name: str) -> str:
    """A non-empty string (a task id, a class name)."""
    if not isinstance(value, str):
        raise OptionError(
            f"{name} must be a string, not a {type(value).__name__} ({short_repr(value)})", f"pass {name} as a string"
        )
    if not value.strip():
        raise OptionError(f"{name} is empty", f"pass a non-empty {name}")
    return value


def path(value: Any, name: str) -> str | os.PathLike:
    """A path: a non-empty string or an ``os.PathLike``."""
    if isinstance(value, os.PathLike):
        return value
    return text(value, name) if isinstance(value, str) else _not(value, name, "a path (str or pathlib.Path)")


def _not(value: Any, name: str, what: str):
    raise OptionError(f"{name} must be {what}, not a {type(value).__name__} ({short_repr(value)})", f"pass {what}")


def names(value: Any, name: str, *, at_least: int = 1) -> tuple[str, ...]:
    """A list of distinct names (classes, subsets, splits) in the order given.

    A bare string is refused (it would be read letter by letter); a name given twice is refused,
    naming it, since a repeated class or subset is a mistake rather than a request.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable) or isinstance(value, dict):
        _not(
            value,
            name,
            f"a list of names, e.g. {name}=[{short_repr(value)}]" if isinstance(value, str) else "a list of names",
        )
    items = list(value)
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise OptionError(
                f"{name} holds {short_repr(item)}, which is not a name", f"pass {name} as non-empty strings"
            )
    seen: set[str] = set()
    twice = sorted({x for x in items if x in seen or seen.add(x)})  # type: ignore[func-returns-value]
    if twice:
        raise OptionError(f"{name} names {', '.join(map(repr, twice))} more than once", f"give each of {name} once")
    if len(items) < at_least:
        raise OptionError(
            f"{name} needs at least {at_least} name(s), got {len(items)}", f"pass at least {at_least} distinct names"
        )
    return tuple(items)


__all__ = [
    "OptionError",
    "SEED_MAX",
    "SEEDS_MAX",
    "int_at_least",
    "positive_int",
    "non_negative_int",
    "seed",
    "seed_count",
    "positive_float",
    "non_negative_float",
    "probability",
    "fraction",
    "proper_fraction",
    "level",
    "optional",
    "text",
    "path",
    "names",
]
