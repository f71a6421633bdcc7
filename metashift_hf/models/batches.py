"""Batched inference with decoding and preprocessing overlapped with the model (logits and features alike)."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from PIL import UnidentifiedImageError
from tqdm.auto import tqdm

from ..core.errors import MissingImagesError
from .runtime import decode_workers, overlap_rule, phase_workers


PREFETCH_BATCHES = 2  # batches decoded ahead of the one being run: enough to hide decode time


@dataclass(frozen=True)
class RunConfig:
    """How images go through a model: ``batch_size`` per forward pass, ``workers`` decode threads (None:
    :func:`decode_workers`' rule for the model's device), a progress bar labelled ``desc``."""

    batch_size: int = 32
    workers: int | None = None
    progress: bool = True
    desc: str = ""
    # decode the next batches while the model runs (True), or decode each batch with every core while the model
    # waits (False); None: :func:`overlap_rule` for the device
    overlap: bool | None = None


def map_batches(
    prepare: Callable[[bytes], Any],
    run: Callable[[list], np.ndarray],
    image_ids: Sequence[str],
    read: Callable[[str], bytes],
    *,
    width: int,
    settings: RunConfig = RunConfig(),
    device: str = "cpu",
) -> np.ndarray:
    """``run`` over the ``prepare``d images, ``settings.batch_size`` at a time -> float32 (n, ``width``), in order.

    Overlapped (a GPU, or a CPU with cores torch's threads leave free: :func:`overlap_rule`): a thread pool decodes
    and preprocesses the next ``PREFETCH_BATCHES`` batches while the model runs (PIL and torch both release the
    GIL), so the model rarely waits for JPEG decoding; decode threads ``settings.workers``, default
    :func:`decode_workers`' rule for ``device`` (the device ``run`` computes on). In phases (a CPU whose every core
    runs a torch thread): every core decodes a batch, then the model runs on it (no thread steals a core from the
    forward pass's threads, which wait for each other at every operator); ``settings.overlap`` overrides the rule.
    Called by :func:`metashift_hf.models.outputs.compute`, the one model pass.
    """
    batch_size = settings.batch_size
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids = list(image_ids)
    workers = decode_workers(settings.workers, device)

    def load(iid: str):
        data = read(iid)
        try:
            return prepare(data)
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise MissingImagesError(
                f"image {iid!r} cannot be decoded ({exc})", "replace the corrupt file in the image source", [iid]
            ) from exc
        except (
            MissingImagesError
        ) as exc:  # refused by the decoder (models.open_rgb: too many pixels), which knows no id
            if exc.image_ids:
                raise
            raise MissingImagesError(f"image {iid!r}: {exc.what}", exc.fix, [iid]) from exc

    batches = [ids[i : i + batch_size] for i in range(0, len(ids), batch_size)]
    out = np.empty((len(ids), width), dtype=np.float32)
    bar = tqdm(total=len(ids), desc=settings.desc or "images", unit="img", disable=not settings.progress)
    overlap = overlap_rule(device) if settings.overlap is None else settings.overlap
    if not overlap:  # phases: every core decodes a batch, then every core runs the model on it; no thread waits
        with ThreadPoolExecutor(max_workers=phase_workers(settings.workers), thread_name_prefix="decode") as pool:
            try:
                for start, batch in enumerate(batches):
                    prepared = list(pool.map(load, batch))
                    out[start * batch_size : start * batch_size + len(prepared)] = run(prepared)
                    bar.update(len(prepared))
            finally:
                bar.close()
        return out
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decode") as pool:
        queue: deque[list[Future]] = deque()
        next_batch = 0
        try:
            for start in range(len(batches)):
                while next_batch < len(batches) and next_batch <= start + PREFETCH_BATCHES:
                    queue.append([pool.submit(load, iid) for iid in batches[next_batch]])
                    next_batch += 1
                prepared = [f.result() for f in queue.popleft()]
                lo = start * batch_size
                out[lo : lo + len(prepared)] = run(prepared)
                bar.update(len(prepared))
        finally:
            for futures in queue:
                for f in futures:
                    f.cancel()
            bar.close()
    return out


__all__ = ["map_batches", "PREFETCH_BATCHES", "RunConfig"]
