"""A classifier's head outputs over a task's images (batched by :func:`metashift_hf.models.map_batches`)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..models import Classifier, map_batches
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
    logits = map_batches(
        classifier.prepare,
        classifier.logits,
        image_ids,
        read,
        width=classifier.labels.size,
        batch_size=batch_size,
        workers=workers,
        progress=progress,
        desc=f"evaluate {classifier.name}",
        device=classifier.device,
    )
    return HeadOutputs(list(image_ids), logits.argmax(axis=1).astype(np.int64), logits)
