"""Batched prediction with decoding and preprocessing overlapped with inference."""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np
from PIL import UnidentifiedImageError

from ..core.errors import MissingImagesError
from .models import Classifier
from .predictions import Predictions

PREFETCH_BATCHES = 2  # batches decoded ahead of the one being run: enough to hide decode time


def predict(
    classifier: Classifier,
    image_ids: Sequence[str],
    read: Callable[[str], bytes],
    batch_size: int = 32,
    workers: int | None = None,
    progress: bool = True,
) -> Predictions:
    """Run ``classifier`` over ``image_ids`` (bytes from ``read``), in order, ``batch_size`` at a time.

    A thread pool decodes and preprocesses the next ``PREFETCH_BATCHES`` batches while the model runs
    (PIL and torch both release the GIL), so inference rarely waits for JPEG decoding.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids = list(image_ids)
    workers = workers or max(1, min(4, os.cpu_count() or 1))

    def load(iid: str):
        data = read(iid)
        try:
            return classifier.prepare(data)
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise MissingImagesError(f"image {iid!r} cannot be decoded ({exc})", "replace the corrupt file in the image source", [iid]) from exc

    batches = [ids[i:i + batch_size] for i in range(0, len(ids), batch_size)]
    top1 = np.empty(len(ids), dtype=np.int64)
    logits = np.empty((len(ids), 1000), dtype=np.float32)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(ids), desc=f"evaluate {classifier.name}", unit="img", disable=not progress)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode") as pool:
        queue: deque[list[Future]] = deque()
        next_batch = 0
        try:
            for start in range(len(batches)):
                while next_batch < len(batches) and next_batch <= start + PREFETCH_BATCHES:
                    queue.append([pool.submit(load, iid) for iid in batches[next_batch]])
                    next_batch += 1
                prepared = [f.result() for f in queue.popleft()]
                out = classifier.logits(prepared)
                lo = start * batch_size
                logits[lo:lo + len(prepared)] = out
                top1[lo:lo + len(prepared)] = out.argmax(axis=1)
                bar.update(len(prepared))
        finally:
            for futures in queue:
                for f in futures:
                    f.cancel()
            bar.close()
    return Predictions(ids, top1, logits)
