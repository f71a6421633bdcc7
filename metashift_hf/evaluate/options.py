"""Defaults and accepted forms of the evaluation options (the CLI reads them for --help)."""

from __future__ import annotations

from ..models import model_forms
from .predictions import EVAL_SOURCES


MODEL_FORMS = model_forms(EVAL_SOURCES)  # declared once, by the sources themselves (models/registry.py)
# Below 10 images one image moves a subset's accuracy by >= 10 points: too noisy to rank or test.
DEFAULT_MIN_SUBSET_SIZE = 10
DEFAULT_ALPHA = 0.05
DEFAULT_BATCH_SIZE = 32
