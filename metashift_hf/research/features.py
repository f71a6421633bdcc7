"""Frozen backbone features per image, computed once and cached on disk by image content and model hash.

    from metashift_hf.research.features import image_features
    fs = image_features(["3000001", "3000002"], "images/")      # EfficientNet-Lite0, 1280 floats each
    fs.features.shape, fs.computed, fs.cached

The cache folder is ``<cache>/features/<backbone>-<key>/`` where ``key`` hashes the weights' sha256
and the preprocessing; rows are keyed by the sha256 of each image's bytes, so any task over the same
images (and backbone settings) reuses the same rows, and two datasets that share image ids never do. Each call that computes new images adds one shard file (written atomically), so concurrent
runs never corrupt each other; shards are plain ``.npz`` (no pickles), written and checked by
:class:`metashift_hf.core.parts.PartStore` as the logits cache's parts are: a damaged shard (or one of another
backbone key, width, with NaN, not a regular file) is skipped with a warning, removed, and its rows computed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from metashift_hf.builders.images import ImageSource, open_images

from ..core import options as opt
from ..core.errors import MetashiftError, UnknownNameError
from ..core.names import path_component
from ..core.parts import PartStore
from ..core.paths import cache_root
from ..models import (
    Classifier,
    Preprocessing,
    efficientnet_lite0,
    load_model,
    map_batches,
    require_torch,
)


BACKBONES = ("efficientnet-lite0",)  # by name, offline; any other model of the registry by its form (below)
BACKBONE_FORMS = (
    "efficientnet-lite0 | hf:FOLDER_OR_REPO | timm:NAME | timm:local-dir:FOLDER | torchvision:NAME "
    "(or a Classifier from metashift_hf.models.from_module)"
)
FEATURE_DIM = 1280  # EfficientNet-Lite0's pooled head output (the input of its ImageNet classifier)
FEATURE_FORMAT = 2  # 2: rows keyed by the image's sha256 (1 keyed them by image id, which two datasets can share)


@dataclass(frozen=True)
class Backbone:
    """A loaded backbone: the torch module, its preprocessing and the hash that keys its features."""

    name: str
    classifier: Classifier
    preprocessing: Preprocessing | None  # None: the classifier's own (a registry model)
    key: str  # sha256 of weights + preprocessing + feature format
    dim: int = FEATURE_DIM
    extract: "Callable[[Any], Any] | None" = None  # batch -> (n, dim) features (None: Lite0's pool)
    how: str = "global average pool of the last convolution (extract_features), BatchNorm folded"

    @property
    def weights_sha256(self) -> str | None:
        return self.classifier.weights_sha256

    def card(self) -> dict[str, Any]:
        prep = self.preprocessing.as_dict() if self.preprocessing is not None else self.classifier.preprocessing_card()
        return {
            "name": self.name,
            "weights_sha256": self.weights_sha256,
            "feature_key": self.key,
            "feature_dim": self.dim,
            "preprocessing": prep,
            "features": self.how,
        }

    def prepare(self, data: bytes) -> Any:
        return self.preprocessing(data) if self.preprocessing is not None else self.classifier.prepare(data)

    def embed(self, prepared: list) -> np.ndarray:
        """Preprocessed images -> (n, dim) float32 features."""
        torch = require_torch()
        batch = torch.from_numpy(np.stack([np.asarray(p) for p in prepared])).to(self.classifier.device)
        with torch.inference_mode():
            if self.extract is None:
                feats = self.classifier.forward.extract_features(batch.contiguous(memory_format=torch.channels_last))
                return feats.mean(dim=(2, 3)).float().cpu().numpy()
            return self.extract(batch).reshape(len(prepared), -1).float().cpu().numpy()


def _head_input(torch: Any, module: Any, head: Any) -> Callable[[Any], Any]:
    """A function batch -> the input of ``head`` (a Linear of ``module``) when ``module`` runs on the batch:
    the penultimate layer, as if the head were replaced by the identity."""
    dtype = next(module.parameters()).dtype

    def extract(batch):
        seen: list = []
        hook = head.register_forward_pre_hook(lambda _m, inputs: seen.append(inputs[0].detach()))
        try:
            module(batch.to(dtype))
        finally:
            hook.remove()
        return seen[-1]

    return extract


def head_linear(torch: Any, clf: Classifier) -> tuple[Any, str]:
    """(the torch module of ``clf``, the qualified name of its head: the last Linear layer, inside the
    ``classifier`` of a transformers model). MetashiftError when it has none (a plain callable)."""
    module = clf.module if clf.module is not None else clf.forward
    scope = "classifier" if clf.kind == "hf" and hasattr(module, "classifier") else ""
    found = (module.get_submodule(scope) if scope else module) if isinstance(module, torch.nn.Module) else None
    heads = [n for n, m in found.named_modules() if isinstance(m, torch.nn.Linear)] if found is not None else []
    if not heads or clf.weights_sha256 is None:
        raise MetashiftError(
            f"backbone {clf.name}: no torch module with a final Linear layer and a weights checksum "
            "to take penultimate features from",
            f"use {BACKBONE_FORMS}, or wrap your network with metashift_hf.models.from_module",
        )
    return module, ".".join(p for p in (scope, heads[-1]) if p)


def _registry_backbone(spec: "str | Classifier", device: str) -> Backbone:
    """Any model of the evaluation registry that is a torch module: its pre-logits features. timm:
    ``forward_head(forward_features(x), pre_logits=True)``; hf: the input of the last Linear of the
    model's ``classifier`` (transformers' pooled output, the CLS token, ...); torchvision and modules: the
    input of the last Linear layer (the final fc/classifier replaced by the identity)."""
    torch = require_torch()
    clf = load_model(spec, device)
    module, head_name = head_linear(torch, clf)
    head = module.get_submodule(head_name)
    module.eval()
    if clf.kind == "timm" and hasattr(module, "forward_head"):
        dtype = next(module.parameters()).dtype
        layer, how = "timm-pre-logits", "timm forward_head(forward_features(x), pre_logits=True)"
        dim = int(getattr(module, "head_hidden_size", None) or module.num_features)

        def extract(batch):
            return module.forward_head(module.forward_features(batch.to(dtype)), pre_logits=True)
    else:
        layer, how, dim = (
            "last-linear-input",
            "the input of the model's last Linear layer (its penultimate layer)",
            int(head.in_features),
        )
        extract = _head_input(torch, module, head)
    digest = hashlib.sha256(
        json.dumps(
            {
                "weights": clf.weights_sha256,
                "preprocessing": clf.preprocessing_card(),
                "format": FEATURE_FORMAT,
                "name": clf.name,
                "layer": layer,
            },
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()
    return Backbone(clf.name, clf, None, digest, dim, extract, how)


def load_backbone(
    name: "str | Classifier" = "efficientnet-lite0", *, image_size: int | None = None, device: str = "cpu"
) -> Backbone:
    """The backbone with its standard preprocessing, or centre crops of ``image_size`` pixels (Lite0).

    A smaller ``image_size`` suits small images (the demo world's are 96-128 px): the network is fully
    convolutional with a global pool, and upsampling such images to 224 adds no information.
    ``name``: ``efficientnet-lite0`` (the offline default), another model of the evaluation registry
    (``hf:FOLDER_OR_REPO``, ``timm:NAME``, ``timm:local-dir:FOLDER``, ``torchvision:NAME``) or a loaded
    ``metashift_hf.models`` Classifier (``from_module(nn_module, preprocessing)``): its pre-logits features
    (:func:`_registry_backbone`), with the model's own preprocessing.
    """
    if not isinstance(name, str) or name not in BACKBONES:
        if not isinstance(name, (str, Classifier)) or (isinstance(name, str) and ":" not in name):
            raise UnknownNameError(f"unknown backbone {name!r}", f"use one of: {BACKBONE_FORMS}")
        if image_size is not None:
            raise UnknownNameError(
                f"--image-size applies to efficientnet-lite0, not to the backbone {name}",
                "drop --image-size (the model's own preprocessing is used)",
            )
        return _registry_backbone(name, device)
    clf = efficientnet_lite0(device)
    prep = clf.preprocessing
    if image_size is not None and image_size != prep.crop:
        prep = prep.at_crop(opt.image_size(image_size, "image_size"))  # the same crop fraction as 224/(224 + 32)
    digest = hashlib.sha256(
        json.dumps(
            {"weights": clf.weights_sha256, "preprocessing": prep.as_dict(), "format": FEATURE_FORMAT, "name": name},
            sort_keys=True,
        ).encode()
    ).hexdigest()
    return Backbone(name, clf, prep, digest)


@dataclass(frozen=True)
class FeatureSet:
    """Features for ``image_ids`` in that order; ``computed``: distinct images embedded by this call,
    ``cached``: ids whose image (by content) was in the cache already."""

    image_ids: tuple[str, ...]
    features: np.ndarray  # float32 (n, backbone.dim)
    backbone: Backbone
    computed: int
    cached: int
    seconds: float
    cache_dir: Path

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        pos = {iid: i for i, iid in enumerate(self.image_ids)}
        return self.features[[pos[i] for i in ids]]


def feature_cache_dir(backbone: Backbone, cache_dir: "str | os.PathLike | None" = None) -> Path:
    # the name is a safe folder name (a backbone may be "torchvision:resnet18" or a model's folder path)
    return cache_root(cache_dir) / "features" / f"{path_component(backbone.name)}-{backbone.key[:16]}"


def _feature_store(backbone: Backbone, folder: Path) -> PartStore:
    """The verified shards of ``backbone``'s features (rows by the sha256 of the image's bytes)."""
    return PartStore(folder, "shard", "features", backbone.key, f"features cache ({backbone.name})")


def image_features(
    image_ids: Sequence[str],
    images: "str | os.PathLike | ImageSource",
    *,
    backbone: "Backbone | str" = "efficientnet-lite0",
    image_size: int | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    workers: int | None = None,
    cache_dir: "str | os.PathLike | None" = None,
    progress: bool = True,
) -> FeatureSet:
    """Pooled backbone features of ``image_ids`` (read from ``images``), from the cache where present."""
    t0 = time.perf_counter()
    bb = backbone if isinstance(backbone, Backbone) else load_backbone(backbone, image_size=image_size, device=device)
    ids = list(dict.fromkeys(str(i) for i in image_ids))
    folder = feature_cache_dir(bb, cache_dir)
    source = open_images(images)
    source.resolve(ids, "error", verify=False)  # every missing image named before any work
    # keyed by content, not id: two datasets (two worlds, a Hub repo and a local build) may share ids
    sha = {i: hashlib.sha256(source.read(i)).hexdigest() for i in ids}
    store = _feature_store(bb, folder)
    cached, _ = store.read(bb.dim, wanted=sha.values())  # only this call's rows are held in memory
    found = sum(sha[i] in cached for i in ids)
    todo: list[str] = []  # one id per content not cached yet, in the order of ids
    new_keys: set[str] = set()
    for i in ids:
        if sha[i] not in cached and sha[i] not in new_keys:
            todo.append(i)
            new_keys.add(sha[i])
    if todo:
        new = map_batches(
            bb.prepare,
            bb.embed,
            todo,
            source.read,
            width=bb.dim,
            batch_size=batch_size,
            workers=workers,
            progress=progress,
            desc=f"features {bb.name}",
            device=bb.classifier.device,
        )
        keys = [sha[i] for i in todo]
        store.write(keys, new)
        cached.update(zip(keys, new))
    feats = np.stack([cached[sha[i]] for i in ids]) if ids else np.zeros((0, bb.dim), np.float32)
    return FeatureSet(
        tuple(ids), feats.astype(np.float32, copy=False), bb, len(todo), found, time.perf_counter() - t0, folder
    )


__all__ = [
    "Backbone",
    "FeatureSet",
    "load_backbone",
    "head_linear",
    "image_features",
    "feature_cache_dir",
    "BACKBONES",
    "BACKBONE_FORMS",
]
