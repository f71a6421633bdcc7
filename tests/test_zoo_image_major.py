"""The zoo runs image-major (issue 47): each image decoded once for all models, resized and cropped once per
distinct preprocessing, logits bit for bit those of one-model runs; cached rows are checked by recomputing a
seeded sample (issue 46 D2)."""

from __future__ import annotations

import json

import numpy as np
import pytest


torch = pytest.importorskip("torch")

from fixtures.zoo import TASKS, timm_zoo, world  # noqa: E402,F401  (module fixtures)
from fixtures.zoo import tiny_model as _model  # noqa: E402
from metashift_hf.core.parts import PartMismatchError, PartStore  # noqa: E402
from metashift_hf.evaluate.config import EvalConfig  # noqa: E402
from metashift_hf.evaluate.zoo import evaluate_zoo  # noqa: E402
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
from metashift_hf.models import CacheConfig, OutputCache, base, load_model, outputs  # noqa: E402


QUIET = EvalConfig(progress=False, plots=False)
ONE = ["bin-cat-dog"]
SMALL = EvalConfig(progress=False, plots=False, image_size=64)  # every model's preprocessing scaled to 64 px: fast


@pytest.fixture
def decodes(monkeypatch) -> list[int]:
    """Counts every call of the one decode function (models.base.open_rgb)."""
    calls: list[int] = []
    real = base.open_rgb

    def counting(data: bytes):
        calls.append(1)
        return real(data)

    monkeypatch.setattr(base, "open_rgb", counting)
    return calls


def _origin(world) -> TaskOrigin:
    return TaskOrigin(artifact=world / "artifact", images=world / "images")


def _logits(name: str, cache, shas) -> np.ndarray:
    return OutputCache(outputs.logits(load_model(name).at_image_size(64)), cache, wanted=shas).get(shas)


def test_a_3_model_zoo_decodes_each_image_once_and_gives_the_one_model_logits(world, timm_zoo, tmp_path, decodes):
    """Three models (Lite0 and two timm models: two distinct preprocessings), both zoos with an empty cache: the
    3-model zoo decodes at most 1.2x the images of the 1-model zoo (it decoded 3.0x), and every model's logits are
    those of its one-model run, bit for bit."""
    models = ["efficientnet-lite0", *timm_zoo]
    runs = [outputs.logits(load_model(m)) for m in models]
    assert len({outputs.preparation(r) for r in runs}) == 2 and outputs.passes(runs, 32) == [runs]
    one = evaluate_zoo(models[:1], ONE, _origin(world), settings=SMALL, cache=CacheConfig(tmp_path / "one"))
    one_model = len(decodes)
    assert one_model == one.images  # each distinct image decoded once
    decodes.clear()
    three = evaluate_zoo(models, ONE, _origin(world), settings=SMALL, cache=CacheConfig(tmp_path / "three"))
    assert len(decodes) <= 1.2 * one_model and len(decodes) == three.images
    assert set(three.computed.values()) == {three.images}
    for name in timm_zoo:  # each timm model alone, into a cache of its own
        evaluate_zoo([name], ONE, _origin(world), settings=SMALL, cache=CacheConfig(tmp_path / "alone"))
    shas = sorted(OutputCache(outputs.logits(load_model(models[0]).at_image_size(64)), tmp_path / "one")._rows)
    assert len(shas) == three.images
    for name in models:
        alone = _logits(name, tmp_path / ("one" if name == models[0] else "alone"), shas)
        assert np.array_equal(_logits(name, tmp_path / "three", shas), alone), name

    # a model whose logits are cached runs no pass: only the new model decodes, and the check recomputes 8 rows
    decodes.clear()
    again = evaluate_zoo(
        [models[0], _model(3)], ONE, _origin(world), settings=SMALL, cache=CacheConfig(tmp_path / "one")
    )
    assert again.computed == {models[0]: 0, "module:tiny3": again.images}
    assert len(decodes) == again.images + outputs.CHECK_SAMPLE


def test_passes_share_a_decode_within_the_memory_bound(monkeypatch):
    """Models with one preprocessing share it; a pass takes distinct preprocessings while their prepared inputs in
    flight fit PASS_INPUT_BYTES."""
    runs = [outputs.logits(_model(i)) for i in range(3)]  # one preprocessing (36 -> 32 px)
    assert outputs.passes(runs, 32) == [runs]
    assert len({outputs.preparation(r) for r in runs}) == 1
    per_prep = (outputs.PREFETCH_BATCHES + 1) * 32 * 3 * 32 * 32 * 4
    monkeypatch.setattr(outputs, "PASS_INPUT_BYTES", per_prep)
    other = outputs.logits(load_model("efficientnet-lite0"))  # another preprocessing: 224 px
    assert outputs.passes([*runs, other], 32) == [runs, [other]]


def test_n_z18_a_forged_logits_part_with_its_checksum_recomputed_is_refused(world, tmp_path):
    """N-Z18 (issue 46 D2): every cached row replaced by "airliner" (index 404) and the part's checksum recomputed
    passed every check of the part and moved a model's score. The zoo recomputes a seeded sample of the cached
    rows and refuses the part, naming it, before any report is written."""
    cache = tmp_path / "cache"
    evaluate_zoo([_model(1)], TASKS, _origin(world), settings=QUIET, cache=CacheConfig(cache))
    run = outputs.logits(_model(1))
    folder = outputs.cache_folder(run, cache)
    (honest,) = folder.glob("part-*.npz")
    store = PartStore(folder, "part", "values", run.key, "outputs cache")
    rows, _ = store.read()
    keys = sorted(rows)
    forged = np.full((len(keys), 1000), -10.0, np.float32)
    forged[:, 404] = 10.0  # every image an airliner
    honest.unlink()
    part = store.write(keys, forged)  # a valid part: format, owner, width, checksum all as the cache writes them
    with pytest.raises(PartMismatchError) as e:
        evaluate_zoo([_model(1)], TASKS, _origin(world), tmp_path / "zoo", settings=QUIET, cache=CacheConfig(cache))
    assert part.name in e.value.what and "rtol 0.001" in e.value.what and "remove that part" in e.value.fix
    assert not (tmp_path / "zoo").exists()  # refused before any report


def test_the_check_draws_its_sample_with_the_seed_and_states_the_tolerance(world, tmp_path):
    cache = CacheConfig(tmp_path / "cache")
    evaluate_zoo([_model(1)], TASKS, _origin(world), settings=QUIET, cache=cache)
    cards = [
        json.loads((tmp_path / f"z{s}" / "zoo.json").read_text())["cache_check"]["module:tiny1"]
        for s in (0, 1)
        if evaluate_zoo([_model(1)], TASKS, _origin(world), tmp_path / f"z{s}", settings=QUIET, cache=cache)
    ]
    assert [c["seed"] for c in cards] == [0, 0]  # the zoo's seed (EvalConfig.seed)
    assert cards[0] == cards[1] and cards[0]["max_abs_diff"] <= cards[0]["atol"]
    assert outputs.check_tolerance("cuda", "float32") == (1e-2, 1e-2)
    assert outputs.check_tolerance("cpu", "bfloat16") == (1e-1, 1e-1)
