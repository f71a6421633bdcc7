"""One class's meta-graph analysis and picture: the unit of work of the build's process pool.

A module of its own so that a spawned worker imports only this, the meta-graph and the plots
modules (numpy, scipy), not build.py's readers, DuckDB and Arrow: about 45 MiB less per worker
(issue 28: the peak of `build --tags` is the main process plus its workers).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from . import metagraph
from .plots import plot_class, plot_name


@dataclass(frozen=True)
class AnalysisParams:
    """The build options a class's analysis reads, named as :func:`metagraph.analyse_class`'s keywords
    (``BuildOptions`` itself would import more)."""

    edge_threshold: int
    community_method: str
    spectral_dim: int
    seed: int


def analyse_one(
    subject: str, members: dict[str, np.ndarray], params: AnalysisParams, plots: Path | None
) -> tuple[str, metagraph.ClassAnalysis, int]:
    """One class: its meta-graph analysis, its image count, its picture (in a worker process or here)."""
    analysis = metagraph.analyse_class(subject, members, **asdict(params))  # its fields are the keywords
    if plots is not None:
        plot_class(analysis, members, plots / plot_name(subject))
    return subject, analysis, int(np.unique(np.concatenate(list(members.values()))).size)
