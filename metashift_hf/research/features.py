"""Frozen backbone features per image, computed once and cached on disk by image content and model key.

    from metashift_hf.research.features import image_features
    fs = image_features(["3000001", "3000002"], "images/")      # EfficientNet-Lite0, 1280 floats each
    fs.features.shape, fs.computed, fs.cached

Features are a model's outputs like its logits: they are computed and cached by the one model-output path,
:mod:`metashift_hf.models.outputs` (its :func:`~metashift_hf.models.outputs.features` layer rule, its cache key
and its cache ``<cache>/features/<backbone>-<key16>/``), the path evaluate and the zoo run logits through.
Rows are keyed by the sha256 of each image's bytes, so any task over the same images (and backbone settings)
reuses the same rows, and two datasets that share image ids never do. A backbone at another input size
(``image_size``) is the model at that size (:meth:`Classifier.at_image_size`, evaluate's ``--image-size`` rule).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from metashift_hf.builders.images import ImageSource, open_images

from ..core.errors import UnknownNameError
from ..models import Classifier, OutputCache, load_model, model_forms, outputs


# any model of the registry (efficientnet-lite0, the offline default; hf:, timm:, torchvision:) or a Classifier
BACKBONE_FORMS = f"{model_forms()} (or a Classifier from metashift_hf.models.from_module)"


@dataclass(frozen=True)
class Backbone:
    """A loaded backbone: its classifier and the features it gives (:class:`~metashift_hf.models.ModelOutputs`)."""

    name: str
    features: outputs.ModelOutputs

    @property
    def classifier(self) -> Classifier:
        return self.features.classifier

    @property
    def key(self) -> str:
        """The cache key of its features (:func:`metashift_hf.models.outputs.output_key`)."""
        return self.features.key

    @property
    def dim(self) -> int:
        return self.features.width

    @property
    def how(self) -> str:
        return self.features.how

    @property
    def pooled_lite0(self) -> bool:
        """Lite0's own pool (fine-tuning reloads Lite0 with its BatchNorm layers); else a registry model's layer."""
        return self.features.layer == "lite0-pool"

    def prepare(self, data: bytes) -> Any:
        """Image bytes -> the model's input (its own preprocessing)."""
        return self.features.prepare(data)

    @property
    def weights_sha256(self) -> str | None:
        return self.classifier.weights_sha256

    def card(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weights_sha256": self.weights_sha256,
            "feature_key": self.key,
            "feature_dim": self.dim,
            "preprocessing": self.classifier.preprocessing_card(),
            "features": self.how,
        }


def load_backbone(
    name: "str | Classifier" = "efficientnet-lite0", *, image_size: int | None = None, device: str = "cpu"
) -> Backbone:
    """A model of the registry (``efficientnet-lite0``, the offline default; ``hf:FOLDER_OR_REPO``, ``timm:NAME``,
    ``timm:local-dir:FOLDER``, ``torchvision:NAME``) or a loaded ``metashift_hf.models`` Classifier
    (``from_module(nn_module, preprocessing)``), and its pre-logits features
    (:func:`metashift_hf.models.outputs.features`), with the model's own preprocessing.

    ``image_size``: centre crops of that side (:meth:`Classifier.at_image_size`, as evaluate's ``--image-size``).
    A smaller side suits small images (the demo world's are 96-128 px): the networks are convolutional with a
    global pool, and upsampling such images to 224 adds no information.
    """
    if not isinstance(name, (str, Classifier)):
        raise UnknownNameError(f"unknown backbone {name!r}", f"use one of: {BACKBONE_FORMS}")
    clf = load_model(name, device)
    if image_size is not None:
        clf = clf.at_image_size(image_size)
    return Backbone(clf.name, outputs.features(clf))


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
    """The folder of ``backbone``'s cached features (one safe folder name, whatever the model's name)."""
    return outputs.cache_folder(backbone.features, cache_dir)


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
    store = OutputCache(bb.features, cache_dir, wanted=sha.values())  # only this call's rows are held in memory
    found = sum(sha[i] in store for i in ids)
    settings = outputs.RunConfig(batch_size, workers, progress, f"features {bb.name}")
    feats, counts = outputs.cached(bb.features, ids, source.read, settings, store, key=sha.__getitem__)
    return FeatureSet(tuple(ids), feats, bb, counts.computed, found, time.perf_counter() - t0, folder)


__all__ = [
    "Backbone",
    "FeatureSet",
    "load_backbone",
    "image_features",
    "feature_cache_dir",
    "BACKBONE_FORMS",
]
