"""Models to evaluate, from one registry: EfficientNet-Lite0 (offline default), ``hf:``, ``timm:``,
``torchvision:``, any ``torch.nn.Module`` or callable from Python.

    from metashift_hf.models import load_model, from_module
    clf = load_model("hf:./my-vit")          # Classifier: prepare(bytes), logits(batch), labels, card()

Every run of a model over images (evaluate, the zoo, training's features) goes through :mod:`.outputs`.
"""

from __future__ import annotations

from . import outputs
from .base import DTYPES, MAX_INPUT_SIDE, Classifier, Preprocessing, module_facts, open_rgb, require_torch
from .batches import map_batches
from .ecosystem import from_callable, from_module, hf_model, timm_model, torchvision_model
from .labels import LabelMap, imagenet_1k_labels, map_labels
from .lite0 import TF_CROP_PADDING, TF_LITE_MEAN, TF_LITE_STD, efficientnet_lite0
from .outputs import CacheConfig, ModelOutputs, OutputCache, RunConfig
from .registry import MODEL_SOURCES, ModelSource, extended, find_source, load_model, model_forms
from .runtime import decode_workers, runtime_card, tune_allocator


__all__ = [
    "CacheConfig",
    "Classifier",
    "Preprocessing",
    "LabelMap",
    "ModelOutputs",
    "ModelSource",
    "OutputCache",
    "RunConfig",
    "MODEL_SOURCES",
    "DTYPES",
    "MAX_INPUT_SIDE",
    "TF_CROP_PADDING",
    "TF_LITE_MEAN",
    "TF_LITE_STD",
    "decode_workers",
    "efficientnet_lite0",
    "extended",
    "find_source",
    "from_callable",
    "from_module",
    "hf_model",
    "imagenet_1k_labels",
    "load_model",
    "map_batches",
    "map_labels",
    "model_forms",
    "module_facts",
    "outputs",
    "open_rgb",
    "require_torch",
    "runtime_card",
    "timm_model",
    "torchvision_model",
    "tune_allocator",
]
