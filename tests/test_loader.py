"""Issue 27 part 2: metashift_hf.loader, a WILDS-style DataLoader of (image, label, group id) whose
batches come from the training loop's own sampler (fitting.epoch_batches)."""

from __future__ import annotations

import importlib.util
from collections import Counter

import numpy as np
import pytest

import metashift_hf
from metashift_hf.core.errors import MetashiftError
from metashift_hf.research.evaluator import Evaluator
from metashift_hf.research.fitting import epoch_batches


pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


@pytest.fixture(scope="module")
def task(exported_task):
    return exported_task


def _groups_of(dl) -> list[list[int]]:
    return [g.tolist() for _x, _y, g, _i in dl]


def test_group_balanced_batches_are_balanced_and_deterministic(task):
    folder, dd = task
    dl = metashift_hf.loader(
        dd,
        "train",
        batch_size=8,
        sampling="group-balanced",
        seed=3,
        transform=lambda data: np.zeros((3, 4, 4), np.float32),
    )
    ev = Evaluator(dd)
    train_groups = set(ev.grouping("group", "train").ids.tolist())
    assert len(train_groups) >= 2
    first = _groups_of(dl)
    assert len(first) == len(dl) == -(-len(dd["train"]) // 8)
    for batch in first:  # every batch draws equally from each training group (within one row)
        counts = Counter(batch)
        assert set(counts) == train_groups and max(counts.values()) - min(counts.values()) <= 1
    # the same seed gives the same batches (row indices); set_epoch picks the next epoch's
    again = metashift_hf.loader(folder, "train", batch_size=8, sampling="group-balanced", seed=3)
    assert list(again.batch_sampler) == list(_epoch(dl, 0))
    again.set_epoch(1)
    assert list(again.batch_sampler) == list(_epoch(dl, 1)) != list(_epoch(dl, 0))
    other = metashift_hf.loader(dd, "train", batch_size=8, sampling="group-balanced", seed=4)
    assert list(other.batch_sampler) != list(_epoch(dl, 0))


def _epoch(dl, epoch: int) -> list[list[int]]:
    return [b.tolist() for b in dl.batch_sampler.batches(epoch)]


def test_items_are_images_labels_and_the_evaluators_group_ids(task):
    _folder, dd = task
    dl = metashift_hf.loader(dd, "test", batch_size=5, seed=0)  # shuffle, ImageNet 224 preprocessing
    ev = Evaluator(dd)
    seen = []
    for x, y, g, _i in dl:
        assert tuple(x.shape[1:]) == (3, 224, 224) and str(x.dtype) == "torch.float32"
        seen += list(zip(y.tolist(), g.tolist()))
    truth = list(zip(ev.labels("test").tolist(), ev.grouping("group", "test").ids.tolist()))
    assert sorted(seen) == sorted(truth)  # every row once per epoch
    assert dl.dataset.group_names == list(ev.grouping("group", "test").names.names)


def test_the_sampler_is_the_training_loops(task):
    _folder, dd = task
    dl = metashift_hf.loader(dd, "train", batch_size=6, sampling="domain-balanced", seed=1)
    ev = Evaluator(dd)
    envs = ev.grouping("context", "train").ids
    want = epoch_batches("domain-balanced", ev.grouping("group", "train").ids, envs, 6, np.random.default_rng([1, 0]))
    assert [b.tolist() for b in dl.batch_sampler.batches(0)] == [b.tolist() for b in want]


@pytest.mark.parametrize("kwargs", [{"sampling": "balanced"}, {"batch_size": 0}, {"seed": -1}, {"transform": 3}])
def test_bad_arguments_are_refused_before_any_work(task, kwargs):
    with pytest.raises(MetashiftError):
        metashift_hf.loader(task[1], "train", **kwargs)
