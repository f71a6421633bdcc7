"""One way to run a model to outputs, with one cache key (issue 34 part 2; issue 37 "the model fingerprint").

evaluate, the zoo (single process and ``--shard``) and training's features all compute through
``metashift_hf.models.outputs.compute`` and cache under ``ModelOutputs.key``; the key covers the model's code
and configuration (review cases B3 N-M22, N-M23 in ../shared/reviews/hardening-round5-cases.tsv).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest


torch = pytest.importorskip("torch")

from fixtures.tasks import sample_jpegs  # noqa: E402
from fixtures.zoo import tiny_model, world  # noqa: E402,F401  (world: the module fixture)
from metashift_hf.core.registry import Registry  # noqa: E402
from metashift_hf.evaluate import EvalConfig, evaluate  # noqa: E402
from metashift_hf.evaluate.options import MODEL_FORMS  # noqa: E402
from metashift_hf.evaluate.predictions import EVAL_SOURCES  # noqa: E402
from metashift_hf.evaluate.zoo import evaluate_zoo  # noqa: E402
from metashift_hf.hub.task_data import TaskRef  # noqa: E402
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
from metashift_hf.models import (  # noqa: E402
    MODEL_SOURCES,
    CacheConfig,
    OutputCache,
    Preprocessing,
    from_module,
    model_forms,
    outputs,
)
from metashift_hf.research.features import BACKBONE_FORMS, image_features, load_backbone  # noqa: E402


QUIET = EvalConfig(progress=False, plots=False)
PREP = Preprocessing(36, 32, "bilinear", (0.5,) * 3, (0.5,) * 3)
PACKAGE = Path(__import__("metashift_hf").__file__).parent


def _owners(folder: Path) -> set[str]:
    owners = set()
    for part in folder.glob("part-*.npz"):
        with np.load(part, allow_pickle=False) as z:
            owners.add(json.loads(str(z["meta"][()]))["owner"])
    return owners


def test_evaluate_the_zoo_its_shards_and_training_features_run_through_the_one_entry(world, tmp_path, monkeypatch):
    """Every model pass goes through models.outputs.compute, and every cache part is owned by ModelOutputs.key."""
    calls: list[str] = []
    real = outputs.map_batches

    def spy(*args, **kwargs):
        calls.append(kwargs["settings"].desc)
        return real(*args, **kwargs)

    monkeypatch.setattr(outputs, "map_batches", spy)
    art, images = world / "artifact", world / "images"
    evaluate(tiny_model(1), TaskRef("bin-cat-dog", artifact=art, images=images), settings=QUIET)
    assert calls == ["evaluate module:tiny1"]
    single = evaluate_zoo(
        [tiny_model(1)],
        ["bin-cat-dog"],
        TaskOrigin(artifact=art, images=images),
        settings=QUIET,
        cache=CacheConfig(tmp_path),
    )
    assert calls[1:] == ["zoo module:tiny1"] and single.computed["module:tiny1"] > 0
    for i in range(2):
        evaluate_zoo(
            [tiny_model(2)],
            ["bin-cat-dog"],
            TaskOrigin(artifact=art, images=images),
            settings=QUIET,
            cache=CacheConfig(tmp_path),
            shard=f"{i}/2",
        )
    assert calls[2:] == ["zoo module:tiny2 (shard 0/2)", "zoo module:tiny2 (shard 1/2)"]
    fs = image_features(
        sorted(p.stem for p in images.glob("*.jpg"))[:3],
        images,
        backbone=load_backbone(tiny_model_with_head()),
        cache_dir=tmp_path,
        progress=False,
    )
    assert calls[4:] == ["features module:headed"] and fs.computed > 0
    # one key rule: the parts on disk belong to the outputs' keys, and logits and features never share one
    for clf in (tiny_model(1), tiny_model(2)):
        run = outputs.logits(clf)
        assert _owners(OutputCache(run, tmp_path).folder) == {run.key}
    feats = outputs.features(tiny_model_with_head())
    assert _owners(fs.cache_dir) == {feats.key} == {fs.backbone.key}
    assert feats.key != outputs.logits(tiny_model_with_head()).key


def test_no_other_module_runs_a_model_over_images():
    """map_batches (the batched pass) is called only by models/outputs.py: no second way to run a model."""
    callers = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"\bmap_batches\(", p.read_text()) and p.name not in ("batches.py", "outputs.py")
    )
    assert callers == []


class Headed(torch.nn.Module):
    """A conv, a pool and a Linear head (penultimate features: the pool's 4 values)."""

    def __init__(self, pool: type = torch.nn.AdaptiveAvgPool2d):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.pool = pool(1)
        self.head = torch.nn.Linear(4, 1000)

    def forward(self, x):
        return self.head(self.pool(self.conv(x)).flatten(1))


class HeadedMax(Headed):
    """Another class, the same state dict: its forward takes the max instead of the mean."""

    def forward(self, x):
        return self.head(self.conv(x).amax(dim=(2, 3)))


def tiny_model_with_head(module: torch.nn.Module | None = None, name: str = "headed"):
    return from_module(module if module is not None else Headed(), PREP, name=name)


def test_b3_n_m23_a_module_of_another_class_or_structure_misses_the_cache(world, tmp_path):
    """N-M23: two modules with one state dict but another class (or another layer) had one fingerprint, so the
    second was served the first's cached logits. The key covers the class and the structure."""
    a, b, c = Headed(), HeadedMax(), Headed(torch.nn.AdaptiveMaxPool2d)
    assert a.state_dict().keys() == b.state_dict().keys() == c.state_dict().keys()
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    keys = {outputs.logits(tiny_model_with_head(m)).key for m in (a, b, c)}
    assert len(keys) == 3
    kw = dict(settings=QUIET, cache=CacheConfig(tmp_path))
    args = (["bin-cat-dog"], TaskOrigin(artifact=world / "artifact", images=world / "images"))
    first = evaluate_zoo([tiny_model_with_head(a)], *args, **kw)
    again = evaluate_zoo([tiny_model_with_head(b)], *args, **kw)
    assert again.cached["module:headed"] == 0 and again.computed["module:headed"] == first.computed["module:headed"]
    x = torch.randn(2, 3, 8, 8)
    assert not torch.allclose(a(x), b(x))  # the logits differ: serving a's cached rows for b was wrong
    # the same module again: served from the cache
    third = evaluate_zoo([tiny_model_with_head(Headed())], *args, **kw)
    assert third.computed["module:headed"] == 0


timm = pytest.importorskip("timm")


def test_b3_n_m22_a_changed_timm_config_json_misses_the_feature_and_logits_caches(tmp_path):
    """N-M22: timm:local-dir's config.json model_args (global_pool avg -> max) built another model under the same
    fingerprint, and train --backbone reused the old model's cached features. config.json is in the key."""
    torch.manual_seed(0)
    folder = tmp_path / "r"
    timm.models.save_for_hf(timm.create_model("resnet10t", pretrained=False), folder, safe_serialization=True)
    ids = [p.stem for p in sample_jpegs(tmp_path / "img", n=3)]
    name = f"timm:local-dir:{folder}"
    before = image_features(ids, tmp_path / "img", backbone=name, cache_dir=tmp_path / "c", progress=False)
    key_before = outputs.logits(load_backbone(name).classifier).key
    config = json.loads((folder / "config.json").read_text())
    config.setdefault("model_args", {})["global_pool"] = "max"
    (folder / "config.json").write_text(json.dumps(config))
    after = image_features(ids, tmp_path / "img", backbone=name, cache_dir=tmp_path / "c", progress=False)
    assert after.cached == 0 and after.computed == len(ids)
    assert not np.allclose(after.features, before.features)  # max pool: other features, rightly recomputed
    assert outputs.logits(load_backbone(name).classifier).key != key_before
    # a config change that does not change the module (a pretrained_cfg note) still changes the key: the file is in it
    config["pretrained_cfg"] = {**config.get("pretrained_cfg", {}), "notes": "edited"}
    (folder / "config.json").write_text(json.dumps(config))
    assert outputs.logits(load_backbone(name).classifier).key != outputs.logits(after.backbone.classifier).key


def test_model_forms_are_declared_once_by_the_registry():
    """One registry idiom (core.registry.Registry) for model sources; --help strings come from it."""
    assert isinstance(MODEL_SOURCES, Registry) and isinstance(EVAL_SOURCES, Registry)
    assert MODEL_FORMS == model_forms(EVAL_SOURCES) and MODEL_FORMS.endswith("predictions:FILE")
    assert BACKBONE_FORMS.startswith(model_forms()) and "timm:local-dir:FOLDER" in model_forms()
    for p in PACKAGE.rglob("*.py"):  # no second spelling of the forms
        if p.name != "registry.py":
            assert "hf:REPO_OR_FOLDER" not in p.read_text(), p
