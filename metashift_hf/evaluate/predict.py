"""A classifier's head outputs over a task's images, computed by the one model-output path
(:mod:`metashift_hf.models.outputs`, shared with the zoo and training's features)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..models import Classifier, outputs
from .predictions import HeadOutputs


def predict(
    classifier: Classifier,
    image_ids: Sequence[str],
    read: Callable[[str], bytes],
    batch_size: int = 32,
    workers: int | None = None,
    progress: bool = True,
) -> HeadOutputs:
    """Run ``classifier`` over ``image_ids`` (bytes from ``read``), in order, ``batch_size`` at a time."""
    settings = outputs.RunConfig(batch_size, workers, progress, f"evaluate {classifier.name}")
    logits = outputs.compute(outputs.logits(classifier), list(image_ids), read, settings)
    return HeadOutputs(list(image_ids), logits.argmax(axis=1).astype(np.int64), logits)
