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
from ..specs import looks_like_repo_id
from .zoo import ZOO_KIND, leaderboard_markdown

logger = logging.getLogger(__name__)

PUBLISHED_FILES = ("leaderboard.csv", "leaderboard.md", "leaderboard.png", "zoo.json")


def leaderboard_card(zoo_dir: Path) -> str:
    """README.md of the results repo: YAML (one config over leaderboard.csv), the table, models, tasks, method."""
    card = json.loads((zoo_dir / "zoo.json").read_text(encoding="utf-8"))
    board = pd.read_csv(zoo_dir / "leaderboard.csv")
    models = "\n".join(f"| `{m['name']}` | {m.get('kind')} | `{(m.get('fingerprint') or '-')[:16]}` | {m.get('dtype', 'float32')} |"
                       for m in card["models"])
    picture = "![accuracy per model and task](leaderboard.png)\n\n" if (zoo_dir / "leaderboard.png").is_file() else ""
    return (
        "---\nconfigs:\n- config_name: default\n  data_files: leaderboard.csv\n"
        "tags:\n- metashift\n- leaderboard\n- image-classification\npretty_name: MetaShift model leaderboard\n---\n\n"
        "# MetaShift model leaderboard\n\n"
        f"{len(card['models'])} model(s) evaluated by `metashift-hf evaluate` (package {card.get('package_version')}) on "
        f"{len(card['tasks'])} MetaShift task(s), {card['images']:,} distinct images; scoring `{card.get('mode')}` under the "
        f"`{card.get('hierarchy')}` hierarchy. Accuracy with its Wilson 95% interval; worst context = the context subset "
        f"with the lowest accuracy among those with at least {card.get('min_subset_size')} images; context bugs = subsets "
        f"significantly below the rest of their class (one-sided two-proportion z-test, Benjamini-Hochberg at "
        f"{card.get('alpha')}).\n\n"
        f"{picture}{leaderboard_markdown(board, links=False)}\n"
        "## Models\n\n| model | kind | fingerprint | dtype |\n|---|---|---|---|\n" + models + "\n\n"
        "`zoo.json` holds every model's card (weights checksum, preprocessing, head labels) and the run's settings.\n\n"
        "```python\nfrom datasets import load_dataset\nboard = load_dataset(REPO_ID, split=\"train\").to_pandas()\n```\n"
    )


def publish_leaderboard(zoo_dir: str | Path, repo_id: str, *, token: str | None = None, private: bool = False,
                        endpoint: str | None = None, dry_run: bool = False) -> list[str]:
    """Create (or update) the dataset repo ``repo_id`` with the zoo's leaderboard; returns the files pushed."""
    folder = Path(zoo_dir)
    marker = read_marker(folder)
    if marker is None or marker.get("kind") != ZOO_KIND:
        raise InputFormatError(f"{folder} is not a zoo folder written by `metashift-hf evaluate --tasks ...`",
                               "pass the --out folder of a zoo run (it holds leaderboard.csv and zoo.json)")
    if not looks_like_repo_id(repo_id):
        raise InputFormatError(f"{repo_id!r} is not a Hub repo id", "use NAMESPACE/NAME, e.g. my-user/metashift-leaderboard")
    files = [f for f in PUBLISHED_FILES if (folder / f).is_file()]
    readme = leaderboard_card(folder).replace("REPO_ID", json.dumps(repo_id))
    if dry_run:
        return ["README.md", *files]
    from huggingface_hub import HfApi  # network client: loaded only when pushing

    api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="metashift-leaderboard-"))
    try:
        for f in files:
            shutil.copyfile(folder / f, stage / f)
        (stage / "README.md").write_text(readme, encoding="utf-8")
        api.upload_folder(folder_path=str(stage), repo_id=repo_id, repo_type="dataset",
                          commit_message="metashift-hf evaluate: model leaderboard")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    logger.info("published the leaderboard to dataset repo %s", repo_id)
    return ["README.md", *files]
