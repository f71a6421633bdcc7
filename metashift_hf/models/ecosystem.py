"""Models from the ecosystem: transformers (``hf:``), timm, torchvision, and any torch module from Python.

Weights are never downloaded here: ``hf:`` reads a local folder or the Hub cache, ``timm:`` the
Hugging Face cache, ``torchvision:`` the torch hub cache; each error says how to fetch them once.
"""
from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import InputFormatError, MetashiftError, UnknownNameError
from ..core.fsutil import sha256_file
from .base import Classifier, Dtype, Preprocessing, check_device, hash_state_dict, place, require_module, require_torch
from .labels import LabelMap, imagenet_1k_labels, map_labels

_HF_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_HF_CONFIG_FILES = ("config.json", "preprocessor_config.json")


def _hf_folder(ref: str) -> Path:
    """A local model folder, or the Hub cache's snapshot of a repo id (never downloaded)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return path
    if path.exists() or ref.startswith((".", "/", "~")):
        raise InputFormatError(f"hf:{ref} is not a model folder", "give a folder written by save_pretrained, or a Hub repo id")
    from huggingface_hub import snapshot_download  # loads only for hf: models
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(ref, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError) as exc:
        raise MetashiftError(
            f"hf:{ref} is neither a local folder nor a model in the Hugging Face cache (evaluation never downloads)",
            f"download it once where the Hub is reachable: hf download {ref}  (or save_pretrained to a folder and use hf:FOLDER)",
        ) from exc


def _folder_digest(folder: Path) -> str:
    """sha256 over the weight and config files of a model folder (names and contents, sorted)."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.is_file() and (p.suffix in _HF_WEIGHT_SUFFIXES or p.name in _HF_CONFIG_FILES))
    if not any(p.suffix in _HF_WEIGHT_SUFFIXES for p in files):
        raise MetashiftError(f"model folder {folder} holds no weights (*.safetensors or *.bin)", "save the model with save_pretrained")
    for p in files:
        h.update(p.name.encode())
        h.update(sha256_file(p).encode())
    return h.hexdigest()


def hf_model(ref: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A transformers image classifier (AutoModelForImageClassification + AutoImageProcessor).

    The head's ``id2label`` is mapped to WordNet ids (labels.map_labels): ImageNet-1k heads are scored
    as usual, other heads (ImageNet-21k wnids) through WordNet; unmapped labels are in the card.
    """
    torch = require_torch()
    transformers = require_module("transformers", f"--model hf:{ref}", "hf")
    device = check_device(torch, device)
    folder = _hf_folder(ref)
    digest = _folder_digest(folder)
    try:
        model = transformers.AutoModelForImageClassification.from_pretrained(str(folder), local_files_only=True)
        processor = transformers.AutoImageProcessor.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise MetashiftError(f"hf:{ref}: transformers cannot load an image classifier from {folder} ({exc})",
                             "give a model saved with save_pretrained together with its image processor") from exc
    place(torch, model, device, dtype)
    labels = map_labels(model.config.id2label)

    def forward(batch):
        return model(pixel_values=batch).logits

    def preprocess(image):
        return processor(images=image, return_tensors="np")["pixel_values"][0]

    proc = processor.to_dict()
    return Classifier(f"hf:{ref}", "hf", forward, preprocess, digest, device,
                      {"folder": str(folder), "architecture": type(model).__name__,
                       "preprocessing": {"image_processor": type(processor).__name__,
                                         **{k: proc[k] for k in sorted(proc) if k in _PROCESSOR_KEYS}}},
                      labels=labels, dtype=dtype)


_PROCESSOR_KEYS = {"size", "crop_size", "crop_pct", "resample", "do_resize", "do_center_crop", "do_rescale",
                   "rescale_factor", "do_normalize", "image_mean", "image_std"}


def torchvision_model(name: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A torchvision classifier by name, only from weights already in the torch hub cache."""
    torch = require_torch()
    tv = require_module("torchvision", f"--model torchvision:{name}", "torchvision")
    device = check_device(torch, device)
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
    place(torch, model, device, dtype)
    t = weights.transforms()
    prep = Preprocessing(
        resize=int(t.resize_size[0]), crop=int(t.crop_size[0]),
        interpolation=str(getattr(t.interpolation, "value", t.interpolation)), mean=tuple(t.mean), std=tuple(t.std),
        source=f"torchvision {weights} transforms()",
    )
    return Classifier(f"torchvision:{name}", "torchvision", model, prep, sha256_file(cached), device,
                      {"weights": str(weights)}, labels=_head_labels(weights.meta.get("categories"), name), dtype=dtype)


def _head_labels(categories, name: str) -> LabelMap:
    if categories is None or len(categories) == 1000:
        return imagenet_1k_labels()  # torchvision's ImageNet heads list the 1,000 classes in index order
    raise UnknownNameError(f"torchvision:{name} has a {len(categories)}-class head, not ImageNet-1k",
                           "use an ImageNet-1k classifier (torchvision.models.list_models(module=torchvision.models))")


def timm_model(name: str, device: str = "cpu", dtype: Dtype = "float32") -> Classifier:
    """A timm classifier by name, only from weights already in the Hugging Face cache."""
    torch = require_torch()
    timm = require_module("timm", f"--model timm:{name}", "timm")
    device = check_device(torch, device)
    os.environ["HF_HUB_OFFLINE"] = "1"  # never download during an evaluation
    try:
        model = timm.create_model(name, pretrained=True)
    except Exception as exc:  # timm raises RuntimeError/OSError/LocalEntryNotFoundError variants
        raise MetashiftError(
            f"could not load timm:{name} from the local cache ({type(exc).__name__}: {exc})",
            f"download once where the internet is reachable: python -c \"import timm; timm.create_model('{name}', pretrained=True)\"",
        ) from exc
    place(torch, model, device, dtype)
    cfg = importlib.import_module("timm.data").resolve_data_config({}, model=model)
    size = int(cfg["input_size"][-1])
    prep = Preprocessing(
        resize=int(round(size / cfg.get("crop_pct", 0.875))), crop=size, interpolation=str(cfg.get("interpolation", "bicubic")),
        mean=tuple(cfg["mean"]), std=tuple(cfg["std"]), source=f"timm resolve_data_config for {name}",
    )
    n_out = int(getattr(model, "num_classes", 1000))
    if n_out != 1000:
        raise UnknownNameError(f"timm:{name} has a {n_out}-class head, not ImageNet-1k",
                               "use an ImageNet-1k timm model, or an hf: model whose id2label names its classes")
    return Classifier(f"timm:{name}", "timm", model, prep, hash_state_dict(model), device,
                      {"weights_sha256_of": "state_dict tensors"}, dtype=dtype)


def from_module(module: Any, preprocessing: Preprocessing | Callable[[Any], Any], *, name: str | None = None,
                labels: Mapping[int, str] | LabelMap | None = None, device: str = "cpu",
                dtype: Dtype = "float32") -> Classifier:
    """Any ``torch.nn.Module`` mapping a float batch (n, 3, H, W) to logits, with its preprocessing.

    ``preprocessing``: a :class:`Preprocessing` or a callable RGB PIL image -> (3, H, W) array/tensor.
    ``labels``: the head's id2label (mapped like ``hf:`` heads) or a LabelMap; None = ImageNet-1k order.
    The weights checksum is taken over the state dict, so cached logits follow the weights.
    """
    torch = require_torch()
    if not isinstance(module, torch.nn.Module):
        raise InputFormatError(f"from_module needs a torch.nn.Module, got {type(module).__name__}",
                               "pass the model itself; plain callables go through from_callable")
    if not callable(preprocessing):
        raise InputFormatError("from_module needs a preprocessing callable (RGB PIL image -> array) or a Preprocessing",
                               "e.g. Preprocessing(resize=256, crop=224, interpolation='bilinear', mean=..., std=...)")
    device = check_device(torch, device)
    place(torch, module, device, dtype)
    label_map = labels if isinstance(labels, LabelMap) else map_labels(labels) if labels is not None else imagenet_1k_labels()
    label = name or type(module).__name__
    return Classifier(f"module:{label}", "module", module, preprocessing, hash_state_dict(module), device,
                      {"module_class": f"{type(module).__module__}.{type(module).__qualname__}"}, labels=label_map, dtype=dtype)


def from_callable(fn: Callable[[list], Any], name: str | None = None) -> Classifier:
    """Wrap any callable mapping a list of RGB PIL images to (n, 1000) ImageNet logits."""
    if not callable(fn):
        raise InputFormatError(f"model {fn!r} is not callable", "pass a model name string or a callable(list[PIL.Image]) -> (n, 1000) logits")
    label = name or getattr(fn, "__name__", type(fn).__name__)
    return Classifier(f"callable:{label}", "callable", fn, None, None, "cpu")
