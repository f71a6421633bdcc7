"""The Leaderboard view's data: zoo results (``leaderboard.csv``; a run folder's per-task ``per_group.csv``) from a
results folder (``metashift-hf evaluate --out``) or a results dataset repo (``evaluate --publish NS/NAME``).

The headline is the project's: each task's test balanced accuracy, the majority baseline beside it. A drill-down
shows one model's per-group accuracy with Wilson intervals (``metashift_hf.scoring``, the one scoring core) and the
context bugs the run found.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from ..core.errors import InputFormatError
from ..evaluate.zoo import BASELINE
from ..hub.repo_files import looks_like_repo_id
from ..scoring.per_group import PER_GROUP_COLUMNS
from ..scoring.stats import wilson_interval


BOARD_FILE = "leaderboard.csv"
PER_GROUP_FILE = "per_group.csv"
MAX_BYTES = 64 * 2**20  # a results file past this is not a zoo's and is refused before parsing
NEEDED = ("task", "model", "split", "balanced_accuracy", "worst_group", "worst_group_accuracy", "report")
RESULTS_FIX = "pass the --out folder of `metashift-hf evaluate` (a zoo) or a results repo NS/NAME it published"


@dataclass(frozen=True)
class Results:
    """Every results source's leaderboard rows, each row tagged with the source it came from."""

    board: pd.DataFrame  # the leaderboard.csv columns + "source"
    sources: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return self.board.empty

    def models(self) -> list[str]:
        return sorted(set(self.board["model"]) - {BASELINE})

    def tasks(self) -> list[str]:
        return sorted(set(self.board["task"]))


def _bounded_csv(path: Path, where: str) -> pd.DataFrame:
    if path.is_symlink() or not path.is_file():
        raise InputFormatError(f"{where} is not a regular file", RESULTS_FIX)
    if path.stat().st_size > MAX_BYTES:
        raise InputFormatError(f"{where} is over {MAX_BYTES} bytes", RESULTS_FIX)
    try:
        return pd.read_csv(path, dtype={"model": str, "task": str, "report": str, "worst_group": str})
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise InputFormatError(f"{where} does not parse as CSV ({exc})", RESULTS_FIX) from None


def _board_file(source: str) -> tuple[Path, str]:
    """(local leaderboard.csv, where) of a results folder or a results repo (downloaded)."""
    if Path(source).is_dir():
        return Path(source) / BOARD_FILE, f"{BOARD_FILE} of results folder {source}"
    if looks_like_repo_id(source):
        from huggingface_hub import hf_hub_download  # heavy optional import: only a Hub source needs it

        try:
            local = hf_hub_download(source, BOARD_FILE, repo_type="dataset")
        except Exception as exc:  # any Hub or network error: name the repo and the file
            raise InputFormatError(f"{BOARD_FILE} of results repo {source} could not be read ({exc})", RESULTS_FIX)
        return Path(os.path.realpath(local)), f"{BOARD_FILE} of results repo {source}"
    raise InputFormatError(f"--results {source!r} is neither a results folder nor a Hub repo id", RESULTS_FIX)


def load_results(sources: Sequence[str]) -> Results:
    """The leaderboards of ``sources`` together (none: an empty board the view says is empty)."""
    frames = []
    for source in sources:
        path, where = _board_file(str(source))
        df = _bounded_csv(path, where)
        missing = [c for c in NEEDED if c not in df.columns]
        if missing:
            raise InputFormatError(f"{where} lacks column(s) {', '.join(missing)}", RESULTS_FIX)
        frames.append(df.assign(source=str(source)))
    board = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*NEEDED, "source"])
    return Results(board, tuple(str(s) for s in sources))


def board_by_task(
    results: Results, *, search: str = "", models: str = "", max_models: int = 30
) -> tuple[pd.DataFrame, int]:
    """The headline (test balanced accuracy) with tasks as rows (``search`` in the task id) and models as columns
    (``models`` in the name), the majority baseline first, then the models by their mean over tasks (best first);
    at most ``max_models`` model columns. Returns the table and how many models matched (0 when all are shown)."""
    board = results.board
    if search.strip():
        board = board[board["task"].str.contains(search.strip(), case=False, regex=False)]
    # the columns are chosen before the pivot: a board of thousands of models never becomes a wide table (D3)
    means = pd.to_numeric(board["balanced_accuracy"], errors="coerce").groupby(board["model"]).mean()
    order = means.sort_values(ascending=False, kind="stable", na_position="last").index
    wanted = [m for m in order if m != BASELINE and models.strip().casefold() in str(m).casefold()]
    columns = ([BASELINE] if BASELINE in means.index else []) + wanted[:max_models]
    shown = board[board["model"].isin(columns)]
    table = shown.pivot_table(index="task", columns="model", values="balanced_accuracy", aggfunc="first")
    out = table.reindex(index=sorted(set(board["task"])), columns=columns).round(3).reset_index()
    out.columns.name = None
    return out, (len(wanted) if len(wanted) > max_models else 0)


SUMMARY_COLUMNS = ("model", "tasks", "headline", "worst group", "ID", "OOD", "gap", "mean rank", "≤ baseline")


def _mean(board: pd.DataFrame, column: str) -> pd.Series:
    if column not in board.columns:
        return pd.Series(dtype=float)
    return pd.to_numeric(board[column], errors="coerce").groupby(board["model"]).mean()


def models_summary(results: Results) -> pd.DataFrame:
    """One row per model over the tasks it ran: the headline (mean test balanced accuracy), the mean worst-group
    accuracy, ID and OOD accuracy and their gap (ID - OOD), the mean rank over tasks (1 = best on a task; the
    baseline ranked too) and on how many tasks it is at or below ``baseline:majority`` (flagged: not better than
    predicting the majority class). Sorted by mean rank."""
    board = results.board
    if board.empty:
        return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
    acc = pd.to_numeric(board["balanced_accuracy"], errors="coerce")
    ranks = acc.groupby(board["task"]).rank(ascending=False, method="min")
    base = acc[board["model"] == BASELINE].groupby(board["task"][board["model"] == BASELINE]).first()
    below = (acc <= board["task"].map(base)) & (board["model"] != BASELINE)
    out = pd.DataFrame(
        {
            "tasks": board.groupby("model")["task"].nunique(),
            "headline": acc.groupby(board["model"]).mean(),
            "worst group": _mean(board, "worst_group_accuracy"),
            "ID": _mean(board, "id_accuracy"),
            "OOD": _mean(board, "ood_accuracy"),
            "mean rank": ranks.groupby(board["model"]).mean(),
            "≤ baseline": below.groupby(board["model"]).sum().astype(int),
        }
    )
    out["gap"] = out["ID"] - out["OOD"]
    out = out.sort_values(["mean rank", "headline"], ascending=[True, False], kind="stable")
    return out.rename_axis("model").reset_index()[list(SUMMARY_COLUMNS)].round(3)


@dataclass(frozen=True)
class Drilldown:
    """One model on one task: its leaderboard row, per-group accuracy with Wilson intervals, its context bugs."""

    model: str
    task: str
    row: dict
    groups: pd.DataFrame  # split, level, class, name, n, correct, accuracy, ci_low, ci_high, bug
    bugs: pd.DataFrame  # the context rows flagged as bugs
    note: str  # why no per-group table is shown, when none is


def _per_group(source: str, report: str) -> tuple[pd.DataFrame | None, str]:
    """The run's per_group.csv (a results folder's ``<report>/per_group.csv``, never outside the folder)."""
    if not Path(source).is_dir():
        return None, "the published results repo holds the leaderboard only (per-task reports stay local)"
    root = Path(source).resolve()
    path = (root / report / PER_GROUP_FILE).resolve()
    if root not in path.parents:
        raise InputFormatError(f"{BOARD_FILE} of {source}: report {report!r} is outside the folder", RESULTS_FIX)
    if not path.exists():
        return None, f"no {PER_GROUP_FILE} in {report}"
    df = _bounded_csv(path, f"{PER_GROUP_FILE} of {report} in {source}")
    missing = [c for c in ("split", "level", "class", "name", "n", "correct") if c not in df.columns]
    if missing:
        raise InputFormatError(f"{PER_GROUP_FILE} of {report} lacks column(s) {', '.join(missing)}", RESULTS_FIX)
    return df.reindex(columns=list(PER_GROUP_COLUMNS)), ""


def _row_interval(row: pd.Series) -> tuple[float, float]:
    n, correct = row["n"], row["correct"]
    if pd.isna(n) or pd.isna(correct):
        return (math.nan, math.nan)
    try:
        return wilson_interval(int(correct), int(n))
    except ValueError:
        raise InputFormatError(
            f"{PER_GROUP_FILE}: group {row['name']!r} has {correct} correct of {n}", RESULTS_FIX
        ) from None


def drilldown(results: Results, model: str, task: str) -> Drilldown:
    rows = results.board[(results.board["model"] == model) & (results.board["task"] == task)]
    if rows.empty:
        raise InputFormatError(
            f"no result of model {model!r} on task {task!r}", "pick a model and a task of the board"
        )
    row = rows.iloc[0].to_dict()
    report = row.get("report")
    if model == BASELINE or not isinstance(report, str) or not report:
        empty = pd.DataFrame(columns=list(PER_GROUP_COLUMNS))
        return Drilldown(model, task, row, empty, empty, "the baseline has no per-group report")
    groups, note = _per_group(str(row["source"]), report)
    if groups is None:
        empty = pd.DataFrame(columns=list(PER_GROUP_COLUMNS))
        return Drilldown(model, task, row, empty, empty, note)
    groups = groups[groups["level"].isin(["group", "class", "context"])].reset_index(drop=True)
    # the intervals come from the scoring core, not from the file: a row whose counts do not give its
    # interval is shown with the core's (the counts are what was measured)
    ci = [_row_interval(r) for _, r in groups.iterrows()]
    groups = groups.assign(ci_low=[c[0] for c in ci], ci_high=[c[1] for c in ci])
    bug = groups["bug"].astype(str).str.lower().isin(["true", "1"])
    keep = ["split", "level", "class", "name", "n", "correct", "accuracy", "ci_low", "ci_high", "q_value", "bug"]
    return Drilldown(model, task, row, groups[keep], groups[bug][keep].reset_index(drop=True), "")
