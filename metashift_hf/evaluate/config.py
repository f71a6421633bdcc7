"""``EvalConfig``: how one evaluation (or a zoo of them) runs, as ``TrainConfig`` is for training.

    from metashift_hf import TaskRef
    from metashift_hf.evaluate import EvalConfig, evaluate
    evaluate("efficientnet-lite0", TaskRef("imagenet-5", artifact="ARTIFACT", images="images.zip"), "eval",
             settings=EvalConfig(mode="restricted", sample=200, progress=False))

The settings are checked once, when the config is made (typed, finite, in range), so a bad number
fails before a model loads or an image is read; ``evaluate`` and ``evaluate_zoo`` take the same type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import options as opt
from ..core.errors import UnknownNameError
from .options import DEFAULT_ALPHA, DEFAULT_BATCH_SIZE, DEFAULT_MIN_SUBSET_SIZE
from .scoring import MODES


@dataclass(frozen=True)
class EvalConfig:
    """The run settings of ``evaluate`` / ``evaluate_zoo`` (the task and the model are their arguments)."""

    hierarchy: str = "wordnet"  # wordnet | paper | tree:PATH: which ImageNet leaves count for a class
    mode: str = "hierarchy"  # hierarchy: top-1 over all 1,000 classes; restricted: argmax over the task's classes
    coverage: Mapping[str, Any] | None = None  # class -> ImageNet-1k indices; overrides the matching under hierarchy
    batch_size: int = DEFAULT_BATCH_SIZE  # images per forward pass
    device: str = "cpu"  # cpu | cuda | cuda:N
    workers: int | None = None  # threads that decode/preprocess images (None: the cores torch leaves free)
    seed: int = 0  # plans a task id on an artifact and draws ``sample``
    min_subset_size: int = DEFAULT_MIN_SUBSET_SIZE  # smaller context subsets are neither ranked worst nor tested
    alpha: float = DEFAULT_ALPHA  # Benjamini-Hochberg level of the context-bug test
    dtype: str = "float32"  # float32 | bfloat16: the model's weights and inputs (recorded in the run card)
    sample: int | None = (
        None  # score at most this many images per split, stratified by class (scored_task.SAMPLE_RULE)
    )
    on_missing: str = "error"  # error | skip: task images absent or corrupt in the image source (a single evaluate)
    save_logits: bool = False  # also write logits.parquet into the report folder
    plots: bool | None = None  # per-class charts in each report; None: evaluate draws them, the zoo does not
    progress: bool = True  # a progress bar over the forward passes
    force: bool = False  # replace an earlier report (or zoo) in ``out``, never anything else (core.fsutil.check_out)
    splits: Sequence[str] | None = None  # score only these splits (--splits test); None: every split
    # feed the model image_size x image_size inputs (its preprocessing scaled: Classifier.at_image_size); None: its own
    image_size: int | None = None

    def __post_init__(self) -> None:
        checked = {
            "batch_size": opt.positive_int(self.batch_size, "batch_size"),
            "min_subset_size": opt.positive_int(self.min_subset_size, "min_subset_size"),
            "alpha": opt.level(self.alpha, "alpha"),
            "seed": opt.seed(self.seed, "seed"),
            "workers": opt.optional(opt.positive_int, self.workers, "workers"),
            "sample": opt.optional(opt.positive_int, self.sample, "sample"),
            "image_size": opt.optional(opt.image_size, self.image_size, "image_size"),
            "splits": None if self.splits is None else opt.names(self.splits, "splits"),  # a bare 'test' is refused
            "on_missing": opt.on_missing(self.on_missing),
        }
        if self.mode not in MODES:
            raise UnknownNameError(f"unknown scoring mode {self.mode!r}", f"use one of {', '.join(MODES)}")
        for name, value in checked.items():  # the checked (normalised) values replace the given ones
            object.__setattr__(self, name, value)
