"""Issue 36 / hardening round 5 area B2: the Evaluator and the predictions reader refuse complex scores (numpy
would drop the imaginary part and score the rest, rc 0: case N-E12); ``Evaluator("")``: tests/test_hub_requests.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from metashift_hf.core.errors import InputFormatError
from metashift_hf.research.evaluator import Evaluator
from metashift_hf.research.score import score
from metashift_hf.scoring.predictions import TaskPredictions


def test_complex_logits_are_refused_by_the_evaluator(exported_task):  # N-E12
    _folder, dd = exported_task
    ev = Evaluator(dd)
    n, k = len(ev.image_ids("test")), len(ev.classes)
    real = np.random.default_rng(0).normal(size=(n, k))
    ev.eval(real, split="test")  # real logits are scored
    for bad in (real + 1j * real[:, ::-1], (real + 0j)[:, 0]):  # (n, k) logits and (n,) "indices"
        with pytest.raises(InputFormatError, match="complex") as err:
            ev.eval(bad, split="test")
        assert "real" in err.value.fix
    with pytest.raises(InputFormatError, match="complex"):
        ev.eval({"test": real + 1j})


def test_complex_scores_are_refused_by_score(exported_task):  # N-E12, through score / a DataFrame
    folder, dd = exported_task
    ids = list(dd["test"]["image_id"])
    classes = dd["test"].features["label"].names
    frame = pd.DataFrame({"image_id": ids, **{f"logit_{c}": np.arange(len(ids)) + 1j for c in classes}})
    with pytest.raises(InputFormatError, match="complex logit_ values"):
        score(frame, folder, splits=["test"])
    with pytest.raises(InputFormatError, match="complex"):
        TaskPredictions.from_scores(ids, np.ones((len(ids), len(classes))) * 1j, classes, "logits")
