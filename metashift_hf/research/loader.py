"""A WILDS-style loader for your own training loop: batches of (image tensor, label, group id, row index).

    import metashift_hf
    from torchvision import transforms
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor()])
    dl = metashift_hf.loader(ds, "train", batch_size=32, sampling="group-balanced", seed=0, transform=tf)
    for epoch in range(10):
        dl.set_epoch(epoch)     # the epoch is explicit, as DistributedSampler's: same seed and epoch, same batches
        for x, y, g, i in dl:
            ...
    ev = metashift_hf.Evaluator(ds)
    test = metashift_hf.eval_loader(ds, "test", batch_size=64, transform=tf)   # every row once, in order
    preds = torch.cat([model(x).argmax(1) for x, _y, _g, _i in test])
    print(ev.eval(preds, split="test"))

``ds`` is anything :func:`metashift_hf.open_task` accepts. Training batches come from the training loop's own
sampler (:func:`metashift_hf.research.fitting.epoch_batches`), so ``train --sampling`` and this loader
balance the same way. Group ids index ``dl.dataset.group_names`` (every group of the task, sorted;
``metashift_hf.Evaluator(ds).grouping("group", split)`` gives the same ids). ``i`` is each row's position in
the split, in the Evaluator's row order (``ev.eval(y, split, rows=i)`` scores those rows; ``dl.dataset.ids[i]``
is the row's image id). A ``transform`` receives a decoded RGB ``PIL.Image`` (torchvision's and timm's
transforms take one), or the original image bytes with ``image_input="bytes"``; a
:class:`~metashift_hf.models.Preprocessing` decodes the bytes itself, as ``evaluate`` does. It must return a
(C, H, W) tensor (or array), C 1 or 3, every image at one size: anything else (a PIL image, None, a list, an
HWC array) is refused with the transform and what it returned named, the first row when the loader is made.
Batches depend on (seed, epoch) alone, never on ``num_workers`` or on how often the loader was iterated:
``dl.set_epoch(e)`` chooses the epoch (0 until set).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, Literal, get_args

import numpy as np

from metashift_hf.builders.images import ImageSource

from ..core import options as opt
from ..core.errors import InputFormatError, MissingImagesError, UnknownNameError, short_repr
from ..models import Preprocessing, open_rgb, require_torch
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


ImageInput = Literal["pil", "bytes"]  # what a transform receives: a decoded RGB PIL image, or the original bytes


class TaskImages:
    """A map-style dataset over one split: ``ds[i]`` = (image tensor, label, group id, i), ``i`` the row's
    position in the split (``ids[i]`` its image id)."""

    def __init__(
        self,
        ids: list[str],
        labels: np.ndarray,
        groups: np.ndarray,
        group_names: list[str],
        classes: list[str],
        source: ImageSource,
        transform: Callable[[Any], Any],
        image_input: ImageInput = "pil",
    ) -> None:
        self.ids, self.labels, self.groups = ids, labels, groups
        self.group_names, self.classes, self.source, self.transform = group_names, classes, source, transform
        self.image_input = image_input
        self.shape: tuple[int, ...] | None = None  # the first image's (C, H, W): every later one must match

    def __len__(self) -> int:
        return len(self.ids)

    def _image(self, i: int) -> Any:
        data = self.source.read(self.ids[i])
        if self.image_input == "bytes":
            return data
        try:
            return open_rgb(data)
        except MissingImagesError as exc:  # open_rgb does not know the row: name it here
            raise MissingImagesError(f"image_id {self.ids[i]}: {exc.what}", exc.fix, image_ids=[self.ids[i]]) from None

    def __getitem__(self, i: int) -> tuple[Any, int, int, int]:
        x = self.transformed(i)
        shape = tuple(x.shape)
        if self.shape is None:
            self.shape = shape
        elif shape != self.shape:  # torch's collate would fail with a bare 'stack expects each tensor...'
            raise InputFormatError(
                f"the transform {_name(self.transform)} returned a {shape} tensor for image_id {self.ids[i]} "
                f"after a {self.shape} one: a batch needs every image at one size",
                "end the transform with a fixed size (torchvision: transforms.Resize(256), "
                "transforms.CenterCrop(224), transforms.ToTensor())",
            )
        return x, int(self.labels[i]), int(self.groups[i]), i

    def transformed(self, i: int) -> Any:
        """Row ``i``'s image through the transform, checked: a (C, H, W) tensor, C 1 or 3 (D8)."""
        image = self._image(i)
        try:
            x = self.transform(image)
        except (TypeError, AttributeError, ValueError) as exc:
            raise InputFormatError(
                f"the transform {_name(self.transform)} failed on image_id {self.ids[i]} "
                f"given {'the image bytes' if self.image_input == 'bytes' else 'a decoded RGB PIL image'}: "
                f"{type(exc).__name__}: {exc}",
                "a torchvision or timm transform takes a PIL image: pass image_input='pil' (the default)"
                if self.image_input == "bytes"
                else "pass a transform that takes a PIL image (image_input='bytes' gives it the original bytes)",
            ) from exc
        return _checked_tensor(x, self.transform, self.ids[i])


def _name(transform: Any) -> str:
    return short_repr(transform, 80)


CHANNELS = (1, 3)  # an image tensor's channels: grey or RGB


def _checked_tensor(x: Any, transform: Any, image_id: str) -> Any:
    """``x`` as a (C, H, W) float or uint8 tensor, or an error naming the transform and what it returned (L-05..L-13):
    a PIL image, None, a list, a 2-D or HWC array would otherwise be batched into something that is no image."""
    torch = require_torch()
    if isinstance(x, np.ndarray) and x.dtype.kind in "fiu":
        x = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if isinstance(x, torch.Tensor) and x.ndim == 3 and x.shape[0] in CHANNELS and min(x.shape[1:]) > 0:
        return x
    if isinstance(x, (torch.Tensor, np.ndarray)):
        got = f"a {type(x).__name__} of shape {tuple(x.shape)} ({x.dtype})"
    else:
        got = f"{short_repr(x)} (a {type(x).__name__})" if x is not None else "None"
    raise InputFormatError(
        f"the transform {_name(transform)} returned {got} for image_id {image_id}; "
        f"the loader needs a (C, H, W) image tensor with C one of {', '.join(map(str, CHANNELS))}",
        "end the transform with transforms.ToTensor() (a PIL image -> a (3, H, W) float tensor), or return a "
        "(3, H, W) tensor or array (an HWC array: arr.transpose(2, 0, 1))",
    )


class EpochBatches:
    """The batch sampler: the batches of epoch ``epoch``, drawn from (seed, epoch) alone.

    The epoch is explicit, as ``torch.utils.data.DistributedSampler``'s: :meth:`set_epoch` before each pass.
    Iterating never advances it (torch iterates a batch sampler once per single-process pass but twice per
    multi-worker one, and a ``next(iter(dl))`` peek is a pass too), so any ``num_workers`` gives the same batches."""

    def __init__(self, sampling: str, groups: np.ndarray, envs: np.ndarray, batch_size: int, seed: int) -> None:
        self.sampling, self.groups, self.envs, self.batch_size, self.seed = sampling, groups, envs, batch_size, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = opt.non_negative_int(epoch, "epoch")

    def batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        return epoch_batches(self.sampling, self.groups, self.envs, self.batch_size, rng)

    def __len__(self) -> int:
        return -(-len(self.groups) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        return iter([b.tolist() for b in self.batches(self.epoch)])


def _images(ds: Any, split: str, transform: Any, image_input: str) -> tuple[Evaluator, TaskImages, Any]:
    """The split's rows as a :class:`TaskImages` (checks first: the transform, what it receives, the split)."""
    if image_input not in get_args(ImageInput):
        raise UnknownNameError(
            f"image_input={image_input!r} is not one of {', '.join(get_args(ImageInput))}",
            "pass image_input='pil' (a decoded RGB PIL image, for torchvision/timm transforms) or 'bytes'",
        )
    if transform is not None and not callable(transform):
        raise UnknownNameError(
            f"transform {transform!r} is not callable",
            "pass a function PIL image -> (3, H, W) tensor or array (e.g. a torchvision transforms.Compose), "
            "or a metashift_hf.models.Preprocessing",
        )
    ev = Evaluator(ds)
    groups = ev.grouping("group", split)
    transform = transform or IMAGENET_PREPROCESSING
    # our Preprocessing decodes the original bytes itself (the same pixels as evaluate), whatever image_input says
    given: ImageInput = "bytes" if isinstance(transform, Preprocessing) else image_input  # type: ignore[assignment]
    data = TaskImages(
        ev.image_ids(split),
        ev.labels(split),
        groups.ids,
        list(groups.names.names),
        ev.classes,
        ev.task.images(),
        transform,
        given,
    )
    if len(data):  # the first row through the transform now: a wrong output is refused before any batch
        data.shape = tuple(data.transformed(0).shape)
    return ev, data, groups


def loader(
    ds: Any,
    split: str = "train",
    *,
    batch_size: int = 32,
    sampling: str = "shuffle",
    seed: int = 0,
    transform: "Preprocessing | Callable[[Any], Any] | None" = None,
    image_input: ImageInput = "pil",
    num_workers: int = 0,
) -> Any:
    """A ``torch.utils.data.DataLoader`` over ``split`` of ``ds`` yielding (images, labels, group ids, row indices).

    ``sampling``: ``shuffle``, ``group-balanced`` (equal rows per group in every batch) or
    ``domain-balanced`` (equal rows per context), as ``train --sampling``. ``transform``: a decoded RGB
    ``PIL.Image`` -> (3, H, W) tensor or array, e.g. a torchvision ``transforms.Compose`` (``image_input="bytes"``:
    it gets the original image bytes instead); a :class:`~metashift_hf.models.Preprocessing` (default: ImageNet's
    resize 256 / crop 224) reads the bytes itself. ``dl.set_epoch(e)`` before each pass: the batches are epoch
    ``e``'s, the same for any ``num_workers`` (0 until set; iterating never advances it). ``ds``: anything :class:`Evaluator` takes (a
    :class:`~metashift_hf.hub.task_data.TaskRef` for a task id on an artifact or a repo's config).
    For evaluation (every row once, in order) use :func:`eval_loader`.
    """
    if sampling not in SAMPLINGS:
        raise UnknownNameError(f"unknown sampling {sampling!r}", f"use one of: {', '.join(SAMPLINGS)}")
    batch_size = opt.positive_int(batch_size, "batch_size")
    seed = opt.seed(seed, "seed")
    num_workers = opt.non_negative_int(num_workers, "num_workers")
    torch = require_torch()
    ev, data, groups = _images(ds, split, transform, image_input)
    sampler = EpochBatches(sampling, groups.ids, ev.grouping("context", split).ids, batch_size, seed)
    return _epoch_loader(torch)(data, batch_sampler=sampler, num_workers=num_workers)


@functools.cache
def _epoch_loader(torch: Any) -> type:
    """torch's DataLoader with ``set_epoch`` (torch is imported lazily, so the class is made on first use)."""

    class EpochLoader(torch.utils.data.DataLoader):
        """A DataLoader whose batches are those of the epoch last set (:meth:`EpochBatches.set_epoch`)."""

        def set_epoch(self, epoch: int) -> None:
            self.batch_sampler.set_epoch(epoch)

    return EpochLoader


def eval_loader(
    ds: Any,
    split: str = "test",
    *,
    batch_size: int = 32,
    transform: "Preprocessing | Callable[[Any], Any] | None" = None,
    image_input: ImageInput = "pil",
    num_workers: int = 0,
) -> Any:
    """WILDS' ``get_eval_loader``: a ``DataLoader`` over every row of ``split`` once, in the Evaluator's row order
    (so the concatenated predictions go straight to ``Evaluator(ds).eval(preds, split)``), batches of
    (images, labels, group ids, row indices). ``transform``/``image_input``: as :func:`loader`."""
    batch_size = opt.positive_int(batch_size, "batch_size")
    num_workers = opt.non_negative_int(num_workers, "num_workers")
    torch = require_torch()
    _ev, data, _groups = _images(ds, split, transform, image_input)
    return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=False, num_workers=num_workers)


__all__ = ["loader", "eval_loader", "TaskImages", "EpochBatches", "IMAGENET_PREPROCESSING", "ImageInput"]
