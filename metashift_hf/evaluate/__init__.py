"""Evaluate ImageNet-1k classifiers on MetaShift tasks: per class, per context subset, with uncertainty.

    from metashift_hf.evaluate import evaluate
    report = evaluate("efficientnet-lite0", "imagenet-5", artifact="ARTIFACT", images="images.zip", out="eval")
    print(report.summary())
"""
from __future__ import annotations

from .report import EvalReport
from .run import evaluate

__all__ = ["evaluate", "EvalReport"]
