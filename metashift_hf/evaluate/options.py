"""Defaults and accepted forms of the evaluation options (import-light: the CLI reads them for --help)."""

from __future__ import annotations


MODEL_FORMS = "efficientnet-lite0 | hf:REPO_OR_FOLDER | timm:NAME | torchvision:NAME | predictions:FILE"
# Below 10 images one image moves a subset's accuracy by >= 10 points: too noisy to rank or test.
DEFAULT_MIN_SUBSET_SIZE = 10
DEFAULT_ALPHA = 0.05
DEFAULT_BATCH_SIZE = 32
