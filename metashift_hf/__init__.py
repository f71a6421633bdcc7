"""metashift-hf: MetaShift made real, current and easy to use on the Hugging Face ecosystem.

Quick start::

    import metashift_hf
    from metashift_hf import TaskRef
    ds = metashift_hf.load(TaskRef("paper-dg-cat-dog-1", artifact="ARTIFACT", images="images.zip"))

A task request is one ``TaskRef`` (task, artifact, images, seed, config, revision, options); ``load``/``prepare``
/``plan``, ``open_task``, ``shift_spec``, ``score``, ``Evaluator`` and ``evaluate`` all take it (or an exported
folder, a Hub repo id, a loaded dataset).
"""

from __future__ import annotations

from .core import __version__
from .core.lazy import lazy_names


# Heavy imports (datasets, pyarrow) only when the API is used, so the CLI starts fast.
_LAZY = {
    "load": "metashift_hf.hub.api",
    "prepare": "metashift_hf.hub.api",
    "plan": "metashift_hf.hub.api",
    "Artifact": "metashift_hf.builders.artifact",
    "shift_spec": "metashift_hf.hub.task_open",
    "ShiftSpec": "metashift_hf.tasks.spec",
    "Evaluator": "metashift_hf.research.evaluator",
    "open_task": "metashift_hf.hub.task_open",
    "TaskRef": "metashift_hf.hub.task_data",
    "TaskOrigin": "metashift_hf.hub.task_open",
    "score": "metashift_hf.research.score",
    "loader": "metashift_hf.research.loader",
    "eval_loader": "metashift_hf.research.loader",
}
# Evaluation is the subpackage ``metashift_hf.evaluate`` (``from metashift_hf.evaluate import evaluate``);
# a lazy attribute of the same name would be shadowed by the subpackage once it is imported.


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())

__all__ = [
    "__version__",
    "load",
    "prepare",
    "plan",
    "Artifact",
    "score",
    "shift_spec",
    "ShiftSpec",
    "Evaluator",
    "open_task",
    "TaskRef",
    "TaskOrigin",
    "loader",
    "eval_loader",
]
