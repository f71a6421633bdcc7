"""No public class name is defined in two library modules (issue 25): a reader meets one ``Predictions``,
one ``Row``, one ``Distance``. A re-export of the same class object is fine."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import metashift_hf


def _defined_classes() -> dict[str, set[str]]:
    """public class name -> the modules that define (not merely import) a class of that name."""
    found: dict[str, set[str]] = {}
    # builders/, cards/ and wordnet_match/ install under metashift_hf from folders of their own
    roots = [
        metashift_hf,
        *(importlib.import_module(f"metashift_hf.{p}") for p in ("builders", "cards", "wordnet_match")),
    ]
    infos = [i for root in roots for i in pkgutil.walk_packages(root.__path__, f"{root.__name__}.")]
    for info in sorted(infos, key=lambda i: i.name):
        if info.name.endswith(".__main__"):  # runs the CLI when imported
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra (torch, transformers) missing here
            continue
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and not name.startswith("_")
                and obj.__module__ == info.name
                and obj.__name__ == name
            ):
                found.setdefault(name, set()).add(info.name)
    return found


def test_no_public_class_name_is_defined_twice():
    found = _defined_classes()
    # the walk reached the scoring and evaluate modules and the folders installed under metashift_hf
    assert {"TaskPredictions", "HeadOutputs", "TaskPlan", "LabelMap"} <= set(found)
    twice = {name: sorted(mods) for name, mods in found.items() if len(mods) > 1}
    assert twice == {}


def test_old_predictions_name_still_imports():
    from metashift_hf.research.score import Predictions
    from metashift_hf.scoring.predictions import TaskPredictions

    assert Predictions is TaskPredictions
