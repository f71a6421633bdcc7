"""An `experiment compare` --out folder: one writer at a time, and the earlier comparison it holds (its runs must be
covered by a new call, and merge with it). Beside :mod:`train_runs`, which does the same for one training run."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Iterator, Sequence


try:
    import fcntl  # POSIX advisory locks: released by the kernel when the holder exits, however it ends
except ImportError:  # Windows: no lock (two comparisons into one --out are not guarded there)
    fcntl = None  # type: ignore[assignment]

from ..core.fsutil import MARKER, OutputExistsError
from ..hub.task_data import TaskData
from .algorithms import METHODS, SELECTIONS
from .train_config import TrainConfig
from .train_runs import earlier_run, run_key, settings_differ


@contextlib.contextmanager
def writer_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder`` (a comparison's --out) for this run, before anything is checked or trained: a second
    comparison into the same folder is refused at once (two writers would race on the same run folders).
    The lock is an advisory ``flock`` on the folder's marker file, so a killed run leaves no stale lock."""
    if fcntl is None:
        yield
        return
    with open(folder / MARKER, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputExistsError(
                f"another experiment compare is writing into {folder} right now",
                "wait until it has finished and run this command again (its runs are merged), or name a new --out",
            ) from None
        yield


def _earlier_pairs(folder: Path) -> set[tuple[str, str]]:
    """(task, method) of every run folder an earlier comparison left under ``folder/runs/``."""
    runs = folder / "runs"
    if not runs.is_dir():
        return set()
    return {(t.name, m.name) for t in runs.iterdir() if t.is_dir() for m in t.iterdir() if m.is_dir()}


def _arm_method(folder: str) -> str:
    """The method of an arm folder (``erm``, ``erm-worst-group``, ``dfr-h2-t0``): the longest method name it starts
    with (the folder itself when none: a run folder the user made)."""
    return max((m for m in METHODS if folder == m or folder.startswith(m + "-")), key=len, default=folder)


def _arm_rule(folder: str) -> str | None:
    """The rule an arm folder names (``erm-worst-group`` -> worst-group; ``erm``: None, the method's own)."""
    rest = folder[len(_arm_method(folder)) + 1 :]
    return next((r for r in SELECTIONS if rest == r or rest.startswith(r + "-")), None)


def _earlier_flags(folder: Path, earlier: Sequence[str]) -> list[str]:
    """The flags that reproduce the earlier comparison's arms (its rules and its random search), from its run
    folders' names and compare.json."""
    flags = ["--select all"] if any(_arm_rule(f) is not None for f in earlier) else []
    try:
        sweep = json.loads((folder / "compare.json").read_text(encoding="utf-8")).get("sweep") or {}
    except (OSError, ValueError, AttributeError):  # an interrupted comparison: no card yet
        sweep = {}
    draws = [int(m.group(1)) for f in earlier if (m := re.search(r"-h(\d+)(?:-t\d+)?$", f))]
    n_hparams = sweep.get("n_hparams") if isinstance(sweep.get("n_hparams"), int) else max(draws, default=0) + 1
    if n_hparams > 1:
        flags.append(f"--n-hparams {n_hparams}")
        if isinstance(sweep.get("hparams_seed"), int) and sweep["hparams_seed"]:
            flags.append(f"--hparams-seed {sweep['hparams_seed']}")
    return flags


def check_covers_earlier(folder: Path, arms: Sequence[tuple[str, str]], tasks: Sequence[str]) -> None:
    """results.csv/md/png cover every run in the folder: a call whose arms (methods, rules, draws) leave out an
    earlier run is refused (it would drop their rows while their runs stay). The fix names methods as methods
    (review cases C-04..C-06, C-30: it named arm folders such as ``erm-average``) and the flags of the earlier
    comparison's rules and search."""
    names = {f for _m, f in arms}
    earlier = _earlier_pairs(folder)
    left_out = sorted(p for p in earlier if p[0] not in tasks or p[1] not in names)
    if not left_out:
        return
    methods = list(dict.fromkeys(m for m, _f in arms))
    all_m = methods + sorted({_arm_method(f) for _, f in earlier} - set(methods))
    all_t = list(tasks) + sorted({t for t, _ in earlier} - set(tasks))
    shown = ", ".join(f"{f} on {t}" for t, f in left_out[:4]) + (" ..." if len(left_out) > 4 else "")
    flags = _earlier_flags(folder, sorted({f for _, f in earlier}))
    raise OutputExistsError(
        f"--out {folder} holds earlier runs this call does not train (runs/<task>/<method>[-<rule>][-h<draw>]: "
        f"{shown}); its results always cover every run in the folder",
        f"add to the earlier comparison with --methods {','.join(all_m)} --tasks {','.join(all_t)}"
        + (f" {' '.join(flags)}" if flags else " (each method under its own rule: no --select all, no --n-hparams)")
        + " and its other settings (compare.json), or name a new --out to start a new comparison",
    )


def check_mergeable(folder: Path, task: str, method: str, data: TaskData, config: TrainConfig, backbone) -> None:
    """An earlier run of ``method`` on ``task`` in ``folder`` must have the same settings (its seeds merge)."""
    run = folder / "runs" / task / method
    card = earlier_run(run)
    if card is not None and card.get("run_key") != run_key(data.plan, config, backbone):
        differ = settings_differ(card, config)
        raise OutputExistsError(
            f"--out {folder} holds a run of {method} on {task} with other settings"
            + (f" ({', '.join(differ)} differ)" if differ else " (task, backbone or package version differ)"),
            f"repeat the earlier comparison's settings (see {folder / 'compare.json'}) to add seeds to it, "
            "or name a new --out to start a new comparison",
        )


__all__ = ["writer_lock", "check_covers_earlier", "check_mergeable"]
