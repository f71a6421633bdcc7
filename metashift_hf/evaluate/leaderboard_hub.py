"""Push a zoo's leaderboard to the Hub as a results dataset repo with a card (``evaluate --publish NS/NAME``).

The repo holds ``leaderboard.csv`` (the dataset: ``load_dataset(repo)`` reads it), ``leaderboard.md``,
``leaderboard.png``, ``zoo.json`` (models' cards, tasks, settings) and a README card saying what was
evaluated and how. The per-task reports stay local.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from ..core.errors import InputFormatError
from ..core.fsutil import read_marker
from ..core.names import markdown_safe, terminal_safe
from ..hub.publish import DEFAULT_TIMEOUT, writable_hub
from ..hub.repo_files import looks_like_repo_id
from .zoo import BASELINE, ZOO_KIND, leaderboard_markdown, public_model_name, public_model_names


logger = logging.getLogger(__name__)

PUBLISHED_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.png", "zoo.json")


def check_publish(
    repo_id: str, *, token: str | None = None, endpoint: str | None = None, timeout: float = DEFAULT_TIMEOUT
):
    """Before the zoo's work: ``repo_id`` is a repo id, a token exists, the Hub accepts it, it may write, and
    under the repo's namespace. Returns the checked Hub client for :func:`publish_leaderboard`."""
    if not isinstance(repo_id, str) or not looks_like_repo_id(repo_id):
        raise InputFormatError(
            f"--publish {terminal_safe(repr(repo_id))} is not a Hub repo id",
            "use NAMESPACE/NAME, e.g. my-user/metashift-leaderboard",
        )
    return writable_hub(
        token, repo_id.split("/")[0], endpoint=endpoint, timeout=timeout, flag="--publish NAMESPACE/NAME"
    )


def public_board(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as published: model names without local absolute folders (:func:`zoo.public_model_name`),
    and no local report paths (the per-task reports stay local; their folder names derive from the model's name)."""
    public = public_model_names(board["model"])  # two local folders of one name stay two rows
    return board.assign(
        model=[public[m] for m in board["model"]],
        report=[r if m == BASELINE else None for m, r in zip(board["model"], board["report"])],
    )


def leaderboard_card(zoo_dir: Path) -> str:
    """README.md of the results repo: YAML (one config over leaderboard.csv), the table, models, tasks, method.
    Every name in it is escaped (markdown_safe): a model's name is what a user typed."""
    card = json.loads((zoo_dir / "zoo.json").read_text(encoding="utf-8"))
    board = public_board(pd.read_csv(zoo_dir / "leaderboard.csv"))
    models = "\n".join(
        f"| {markdown_safe(public_model_name(m['name']))} | {markdown_safe(m.get('kind'))} | "
        f"{markdown_safe((m.get('fingerprint') or '-')[:16])} | {markdown_safe(m.get('dtype', 'float32'))} |"
        for m in card["models"]
    )
    picture = "![headline per model and task](leaderboard.png)\n\n" if (zoo_dir / "leaderboard.png").is_file() else ""
    return (
        "---\nconfigs:\n- config_name: default\n  data_files: leaderboard.csv\n"
        "tags:\n- metashift\n- leaderboard\n- image-classification\npretty_name: MetaShift model leaderboard\n---\n\n"
        "# MetaShift model leaderboard\n\n"
        f"{len(card['models'])} model(s) evaluated by `metashift-hf evaluate` (package {markdown_safe(card.get('package_version'))}) "
        f"on {len(card['tasks'])} MetaShift task(s), {card['images']:,} distinct images; scoring {markdown_safe(card.get('mode'))} "
        f"under the {markdown_safe(card.get('hierarchy'))} hierarchy. Accuracy with its Wilson 95% interval; worst context = "
        f"the context subset with the lowest accuracy among those with at least {card.get('min_subset_size')} images; context "
        f"bugs = subsets significantly below the rest of their class (one-sided two-proportion z-test, Benjamini-Hochberg at "
        f"{card.get('alpha')}). `{BASELINE}` rows are the majority-class constant predictor.\n\n"
        f"{picture}{leaderboard_markdown(board, links=False)}\n"
        "## Models\n\n| model | kind | fingerprint | dtype |\n|---|---|---|---|\n" + models + "\n\n"
        "`zoo.json` holds every model's card (weights checksum, preprocessing, head labels) and the run's settings.\n\n"
        '```python\nfrom datasets import load_dataset\nboard = load_dataset(REPO_ID, split="train").to_pandas()\n```\n'
    )


def publish_leaderboard(
    zoo_dir: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    endpoint: str | None = None,
    dry_run: bool = False,
    hub=None,
) -> list[str]:
    """Create (or update) the dataset repo ``repo_id`` with the zoo's leaderboard; returns the files pushed.

    ``hub``: the client :func:`check_publish` returned (the command checks before the zoo's work); checked here
    when absent. Hub errors are one error/fix line (publish._Hub), never a traceback."""
    folder = Path(zoo_dir)
    marker = read_marker(folder)
    if marker is None or marker.get("kind") != ZOO_KIND:
        raise InputFormatError(
            f"{folder} is not a zoo folder written by `metashift-hf evaluate --tasks ...`",
            "pass the --out folder of a zoo run (it holds leaderboard.csv and zoo.json)",
        )
    if not looks_like_repo_id(repo_id):
        raise InputFormatError(
            f"{repo_id!r} is not a Hub repo id", "use NAMESPACE/NAME, e.g. my-user/metashift-leaderboard"
        )
    files = [f for f in PUBLISHED_FILES if (folder / f).is_file()]
    readme = leaderboard_card(folder).replace("REPO_ID", json.dumps(repo_id))
    if dry_run:
        return ["README.md", *files]
    hub = hub if hub is not None else check_publish(repo_id, token=token, endpoint=endpoint)
    hub.call(
        f"creating the dataset repo {repo_id}",
        hub.api.create_repo,
        repo_id,
        repo_type="dataset",
        private=private,
        exist_ok=True,
    )
    stage = Path(tempfile.mkdtemp(prefix="metashift-leaderboard-"))
    try:
        for f in files:
            shutil.copyfile(folder / f, stage / f)
        board = public_board(pd.read_csv(folder / "leaderboard.csv"))  # no local absolute folder leaves the machine
        board.to_csv(stage / "leaderboard.csv", index=False, float_format="%.10g")
        (stage / "leaderboard.md").write_text(
            "# Leaderboard\n\n" + leaderboard_markdown(board, links=False) + "\n", encoding="utf-8"
        )
        (stage / "README.md").write_text(readme, encoding="utf-8")
        hub.call(
            f"uploading the leaderboard to {repo_id}",
            hub.api.upload_folder,
            folder_path=str(stage),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message="metashift-hf evaluate: model leaderboard",
        )
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    logger.info("published the leaderboard to dataset repo %s", repo_id)
    return ["README.md", *files]
