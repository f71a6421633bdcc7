"""Training conflicts (MetaShift section 4.3): which training subsets help or hurt which evaluation subsets.

A linear softmax head is trained by SGD on cached features drawn from a list of training subsets.
Every ``every`` steps (a window) we record each evaluation subset's validation loss and the
window's batch composition (share of examples from each training subset). Each window draws its
batches from a random mixture of the training subsets (Dirichlet(1) weights), so compositions vary
enough to regress on. For each evaluation subset e, -delta loss_e over windows is regressed (least
squares, no intercept, shares sum to 1) on the composition: coefficient (t, e) = loss decrease of e
per window spent entirely on t. The matrix is divided by its largest absolute value: [-1, 1],
positive = helps (green), negative = hurts (red).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core import options as opt
from ..core.errors import EmptyResultError, InputFormatError
from ..core.fsutil import FileKind, atomic_out_file, check_out_file


@dataclass(frozen=True)
class Subset:
    """Features and integer labels of one named subset."""

    name: str
    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        if self.x.ndim != 2 or self.x.shape[0] != self.y.shape[0] or self.x.shape[0] == 0:
            raise InputFormatError(
                f"subset {self.name}: features {self.x.shape} and labels {self.y.shape} do not match",
                "pass one feature row and one label per image, at least one image",
            )


@dataclass(frozen=True)
class ConflictConfig:
    steps: int = 2000
    every: int = 20
    batch_size: int = 32
    lr: float = 0.05
    seed: int = 0


@dataclass
class ConflictRun:
    train_names: list[str]
    eval_names: list[str]
    composition: np.ndarray  # windows x train subsets (shares)
    loss_before: np.ndarray  # windows x eval subsets
    loss_after: np.ndarray
    config: ConflictConfig

    def history(self) -> pd.DataFrame:
        """One row per (window, evaluation subset): step, losses and the window's composition."""
        rows = []
        for w in range(self.composition.shape[0]):
            for j, e in enumerate(self.eval_names):
                row = {
                    "window": w,
                    "step": (w + 1) * self.config.every,
                    "eval_subset": e,
                    "loss_before": float(self.loss_before[w, j]),
                    "loss_after": float(self.loss_after[w, j]),
                }
                row.update({f"share:{t}": float(self.composition[w, i]) for i, t in enumerate(self.train_names)})
                rows.append(row)
        return pd.DataFrame(rows)


def _loss(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    z = x @ w + b
    z = z - z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


# The most SGD steps of one conflicts run (500x the default): past it a typo would run for days (the class of
# review case N-H05, issue 37: counts are bounded like --seeds).
STEPS_MAX = 1_000_000


def check_config(config: ConflictConfig) -> ConflictConfig:
    """Every field typed and in range (lr finite and > 0, seed a seed), and at least two windows."""
    checked = ConflictConfig(
        steps=opt.int_in(1, STEPS_MAX)(config.steps, "steps"),
        every=opt.positive_int(config.every, "every"),
        batch_size=opt.positive_int(config.batch_size, "batch_size"),
        lr=opt.positive_float(config.lr, "lr"),
        seed=opt.seed(config.seed, "seed"),
    )
    if checked.steps < 2 * checked.every:
        raise InputFormatError(
            f"steps={checked.steps}, every={checked.every}: need at least two windows",
            "pass steps >= 2 * every (--steps, --every)",
        )
    return checked


def record(
    train: Sequence[Subset], evaluate: Sequence[Subset], n_classes: int, config: ConflictConfig = ConflictConfig()
) -> ConflictRun:
    """Train the head and record every window (see the module docstring)."""
    if not train or not evaluate:
        raise EmptyResultError(
            "conflicts need at least one training and one evaluation subset", "pass subsets with images"
        )
    config = check_config(config)
    dims = {s.x.shape[1] for s in [*train, *evaluate]}
    if len(dims) != 1:
        raise InputFormatError(f"subsets have feature widths {sorted(dims)}", "use features of one backbone")
    d = dims.pop()
    # standardise with the training images' statistics so one learning rate suits any backbone
    allx = np.concatenate([s.x for s in train]).astype(np.float64)
    mu, sd = allx.mean(0), allx.std(0) + 1e-6
    tx = [(s.x - mu) / sd for s in train]
    ex = [((s.x - mu) / sd, s.y.astype(np.int64)) for s in evaluate]
    rng = np.random.default_rng(config.seed)
    w = np.zeros((d, n_classes))
    b = np.zeros(n_classes)
    windows = config.steps // config.every
    comp = np.zeros((windows, len(train)))
    before = np.zeros((windows, len(evaluate)))
    after = np.zeros((windows, len(evaluate)))
    for win in range(windows):
        before[win] = [_loss(w, b, x, y) for x, y in ex]
        mix = rng.dirichlet(np.ones(len(train)))
        counts = np.zeros(len(train))
        for _ in range(config.every):
            pick = rng.choice(len(train), size=config.batch_size, p=mix)
            idx = [rng.integers(0, len(tx[t])) for t in pick]
            xb = np.stack([tx[t][i] for t, i in zip(pick, idx)])
            yb = np.array([train[t].y[i] for t, i in zip(pick, idx)], dtype=np.int64)
            counts += np.bincount(pick, minlength=len(train))
            z = xb @ w + b
            z = z - z.max(1, keepdims=True)
            pr = np.exp(z)
            pr /= pr.sum(1, keepdims=True)
            pr[np.arange(len(yb)), yb] -= 1.0
            g = pr / len(yb)
            w -= config.lr * (xb.T @ g)
            b -= config.lr * g.sum(0)
        comp[win] = counts / counts.sum()
        after[win] = [_loss(w, b, x, y) for x, y in ex]
    return ConflictRun([s.name for s in train], [s.name for s in evaluate], comp, before, after, config)


def conflict_matrix(run: ConflictRun) -> pd.DataFrame:
    """Training subset x evaluation subset coefficients of -delta loss on composition, in [-1, 1]."""
    y = -(run.loss_after - run.loss_before)
    coef, *_ = np.linalg.lstsq(run.composition, y, rcond=None)
    scale = np.abs(coef).max()
    m = coef / scale if scale > 0 else coef
    return pd.DataFrame(m, index=pd.Index(run.train_names, name="train_subset"), columns=run.eval_names)


MATRIX_CSV = FileKind("conflict matrix CSV", b"train_subset,")  # the index column's name (conflict_matrix)
MATRIX_PNG = FileKind("conflict matrix PNG", b"\x89PNG\r\n\x1a\n")


def write_matrix(
    matrix: pd.DataFrame,
    csv_path: str | Path,
    png_path: str | Path | None = None,
    title: str = "",
    *,
    force: bool = False,
) -> None:
    """CSV, and a heatmap PNG (RdYlGn: green helps, red hurts; fixed scale -1..1). Both are user-named files
    (core.fsutil.atomic_out_file): written where nothing exists, or with ``force`` over an earlier matrix of ours;
    never through a link, over a folder, a device or someone else's file. Both are checked before either is written."""
    check_out_file(csv_path, MATRIX_CSV, force=force, flag="csv_path")
    if png_path is not None:
        check_out_file(png_path, MATRIX_PNG, force=force, flag="png_path")
    if matrix.index.name != "train_subset":
        raise InputFormatError(
            f"write_matrix: the matrix's index is {matrix.index.name!r}, not 'train_subset'",
            "pass the DataFrame conflict_matrix returns",
        )
    with atomic_out_file(csv_path, MATRIX_CSV, force=force, flag="csv_path") as f:
        matrix.to_csv(f)
    if png_path is None:
        return
    import matplotlib  # heavy optional dependency, loaded only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_r, n_c = matrix.shape
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * n_c, 1.0 + 0.4 * n_r))
    im = ax.imshow(matrix.to_numpy(), cmap="RdYlGn", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(n_c), matrix.columns, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n_r), matrix.index, fontsize=8)
    ax.set_xlabel("evaluation subset")
    ax.set_ylabel("training subset")
    ax.set_title(title or "training conflicts (green helps, red hurts)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    try:
        with atomic_out_file(png_path, MATRIX_PNG, force=force, mode="wb", flag="png_path") as f:
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)


def subsets_from(
    features: Mapping[str, np.ndarray], members: Mapping[str, Sequence[str]], label_of: Mapping[str, int]
) -> list[Subset]:
    """Named subsets from cached features (image id -> vector), image ids per subset and labels."""
    out = []
    for name, ids in members.items():
        ids = [i for i in ids if i in features]
        if not ids:
            raise EmptyResultError(f"subset {name} has no image with features", "compute features for its images")
        out.append(Subset(name, np.stack([features[i] for i in ids]), np.array([label_of[i] for i in ids])))
    return out
