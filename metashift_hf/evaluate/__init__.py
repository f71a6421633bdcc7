"""Evaluate ImageNet-1k classifiers on MetaShift tasks: per class, per context subset, with uncertainty.

from metashift_hf import TaskRef
from metashift_hf.evaluate import EvalConfig, evaluate
report = evaluate("efficientnet-lite0", TaskRef("imagenet-5", artifact="ARTIFACT", images="images.zip"), out="eval",
                  settings=EvalConfig(mode="restricted"))
print(report.summary())
"""

from __future__ import annotations

from ..core.lazy import lazy_names


# pandas/scipy load only when evaluation is used, so `metashift-hf --help` stays fast
_LAZY = {
    "evaluate": "metashift_hf.evaluate.run",
    "EvalReport": "metashift_hf.evaluate.report",
    "EvalConfig": "metashift_hf.evaluate.config",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())

__all__ = ["evaluate", "EvalConfig", "EvalReport"]
