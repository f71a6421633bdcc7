"""Issue 34 (research room): one registry idiom for experiments and algorithms, typed experiment configs that take
the task request types, and one worst-group rule in model selection."""

from __future__ import annotations

import numpy as np
import pytest

from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.core.options import OptionError
from metashift_hf.core.registry import Registry
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.research import ood_experiments as oe
from metashift_hf.research.algorithms import ALGORITHMS, HPARAMS, HParam, get_algorithm, selection_score
from metashift_hf.research.experiments import EXPERIMENTS, TABLE_EXPERIMENTS, run_experiment
from metashift_hf.research.train import TrainConfig
from metashift_hf.scoring.groups import group_scores, worst


def test_experiments_and_algorithms_are_registries():
    assert isinstance(EXPERIMENTS, Registry) and isinstance(ALGORITHMS, Registry)
    assert set(EXPERIMENTS) == {"paper-dg", "paper-subpop", "ood-levels", "clustered", "conflicts"}
    assert TABLE_EXPERIMENTS == ("paper-dg", "paper-subpop")
    configs = {n: EXPERIMENTS[n].config_type for n in EXPERIMENTS}
    assert configs["ood-levels"] is oe.OodLevelsConfig and configs["paper-dg"] is TrainConfig
    with pytest.raises(UnknownNameError, match="unknown experiment 'ood-level'.*ood-levels"):
        EXPERIMENTS.get("ood-level")
    with pytest.raises(UnknownNameError, match="unknown method 'ernm'"):
        get_algorithm("ernm")


def test_hyper_parameters_live_on_their_algorithm_class():
    for name, cls in ALGORITHMS.items():
        assert all(isinstance(h, HParam) for h in cls.hparams.values())
        assert HPARAMS[name] == {k: h.default for k, h in cls.hparams.items()}
    assert ALGORITHMS["groupdro"].hparams["eta"].dist.kind == "log10"


def test_shift_experiment_configs_are_frozen_and_typed():
    cfg = oe.OodLevelsConfig()
    with pytest.raises(AttributeError):
        cfg.models = ("groupdro",)  # type: ignore[misc]
    assert isinstance(cfg.training, TrainConfig) and oe.ConflictsConfig().run.steps == 2000


def test_run_experiment_refuses_a_config_of_another_experiment(tmp_path):
    origin = TaskOrigin(artifact=tmp_path / "art", images=tmp_path / "images")
    with pytest.raises(OptionError, match="takes a OodLevelsConfig, not ClusteredConfig"):
        run_experiment("ood-levels", origin, tmp_path / "out", oe.ClusteredConfig())


def test_shift_experiments_need_a_build_and_refuse_options_they_would_ignore(tmp_path):
    with pytest.raises(InputFormatError, match="plans tasks on a build"):
        oe.clustered(TaskOrigin(source=tmp_path / "export"), tmp_path / "out")
    with pytest.raises(InputFormatError, match="plans no task id"):
        oe.conflicts(TaskOrigin(artifact=tmp_path / "art", seed=3), tmp_path / "out2")
    with pytest.raises(MetashiftError):
        oe.ood_levels(TaskOrigin(source=tmp_path / "export"), tmp_path / "out3")


def test_selection_score_uses_the_scoring_cores_worst_group():
    rng = np.random.default_rng(0)
    groups = rng.choice(["a(x)", "a(y)", "b(x)"], size=200)
    correct = rng.random(200) < 0.7
    want = worst(group_scores(groups, correct, split="")).accuracy
    assert selection_score(correct, groups, "worst-group") == want
    assert selection_score(correct, groups, "average") == pytest.approx(correct.mean())
