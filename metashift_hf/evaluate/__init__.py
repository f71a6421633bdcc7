"""Evaluate ImageNet-1k classifiers on MetaShift tasks: per class, per context subset, with uncertainty."""
from __future__ import annotations
