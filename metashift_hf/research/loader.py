"""A WILDS-style loader for your own training loop: batches of (image tensor, label, group id).

    import metashift_hf
    dl = metashift_hf.loader(ds, "train", batch_size=32, sampling="group-balanced", seed=0)
    for epoch in range(10):
        for x, y, g in dl:   # each pass over ``dl`` is the next epoch (new batches, same for the same seed)
            ...

``ds`` is anything :func:`metashift_hf.open_task` accepts. Batches come from the training loop's own
sampler (:func:`metashift_hf.research.fitting.epoch_batches`), so ``train --sampling`` and this loader
balance the same way. Group ids index ``dl.dataset.group_names`` (every group of the task, sorted;
``metashift_hf.Evaluator(ds).grouping("group", split)`` gives the same ids).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from metashift_hf.builders.images import ImageSource

from ..core import options as opt
from ..core.errors import UnknownNameError
from ..models import Preprocessing, require_torch
from .algorithms import SAMPLINGS
from .evaluator import Evaluator
from .fitting import epoch_batches


# torchvision's ImageNet evaluation transform, the default when no ``transform`` is given
IMAGENET_PREPROCESSING = Preprocessing(
    resize=256,
    crop=224,
    interpolation="bilinear",
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    source="ImageNet: resize 256, centre crop 224",
)


class TaskImages:
    """A map-style dataset over one split: ``ds[i]`` = (float32 tensor (3, H, W), label, group id)."""

    def __init__(
        self,
        ids: list[str],
        labels: np.ndarray,
        groups: np.ndarray,
        group_names: list[str],
        classes: list[str],
        source: ImageSource,
        transform: Callable[[bytes], Any],
    ) -> None:
        self.ids, self.labels, self.groups = ids, labels, groups
        self.group_names, self.classes, self.source, self.transform = group_names, classes, source, transform

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[Any, int, int]:
        torch = require_torch()
        x = torch.as_tensor(np.asarray(self.transform(self.source.read(self.ids[i])), dtype=np.float32))
        return x, int(self.labels[i]), int(self.groups[i])


class EpochBatches:
    """The batch sampler: each iteration is the next epoch's batches, drawn from (seed, epoch)."""

    def __init__(self, sampling: str, groups: np.ndarray, envs: np.ndarray, batch_size: int, seed: int) -> None:
        self.sampling, self.groups, self.envs, self.batch_size, self.seed = sampling, groups, envs, batch_size, seed
        self.epoch = 0

    def batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        return epoch_batches(self.sampling, self.groups, self.envs, self.batch_size, rng)

    def __len__(self) -> int:
        return -(-len(self.groups) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        epoch, self.epoch = self.epoch, self.epoch + 1
        return iter([b.tolist() for b in self.batches(epoch)])


def loader(
    ds: Any,
    split: str = "train",
    *,
    batch_size: int = 32,
    sampling: str = "shuffle",
    seed: int = 0,
    transform: "Preprocessing | Callable[[bytes], Any] | None" = None,
    num_workers: int = 0,
) -> Any:
    """A ``torch.utils.data.DataLoader`` over ``split`` of ``ds`` yielding (images, labels, group ids).

    ``sampling``: ``shuffle``, ``group-balanced`` (equal rows per group in every batch) or
    ``domain-balanced`` (equal rows per context), as ``train --sampling``. ``transform``: image bytes ->
    (3, H, W) array (default: ImageNet's resize 256 / crop 224). ``ds``: anything :class:`Evaluator` takes
    (a :class:`~metashift_hf.hub.task_data.TaskRef` for a task id on an artifact or a repo's config).
    """
    if sampling not in SAMPLINGS:
        raise UnknownNameError(f"unknown sampling {sampling!r}", f"use one of: {', '.join(SAMPLINGS)}")
    batch_size = opt.positive_int(batch_size, "batch_size")
    seed = opt.seed(seed, "seed")
    num_workers = opt.non_negative_int(num_workers, "num_workers")
    if transform is not None and not callable(transform):
        raise UnknownNameError(
            f"transform {transform!r} is not callable",
            "pass a Preprocessing or a function image bytes -> (3, H, W) array",
        )
    torch = require_torch()
    ev = Evaluator(ds)
    groups = ev.grouping("group", split)
    data = TaskImages(
        ev.image_ids(split),
        ev.labels(split),
        groups.ids,
        list(groups.names.names),
        ev.classes,
        ev.task.images(),
        transform or IMAGENET_PREPROCESSING,
    )
    sampler = EpochBatches(sampling, groups.ids, ev.grouping("context", split).ids, batch_size, seed)
    return torch.utils.data.DataLoader(data, batch_sampler=sampler, num_workers=num_workers)


__all__ = ["loader", "TaskImages", "EpochBatches", "IMAGENET_PREPROCESSING"]
