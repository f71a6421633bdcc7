"""Issue 29 part 3 (and the cache-folder bullet of part 4): the logits and features caches are verified, not trusted.

Review cases A3-11 (truncated part), A3-12 (part of width 10: every image 'goldfish'), A3-13 (part of NaN:
every image 'tench'), A3-14 (fewer logits than keys), A3-18 (two parts of different widths), A3-19 (a FIFO
named like a part: must not hang), plus a part of another fingerprint, a part of the old format, a bad
checksum and a symbolic link; each through the zoo (logits) and through ``image_features`` (features).
Every run with a damaged part warns, naming the part and why, and gives exactly the clean run's result.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


torch = pytest.importorskip("torch")

from fixtures.tasks import sample_jpegs  # noqa: E402
from metashift_hf.builders.build import BuildOptions, build_artifact  # noqa: E402
from metashift_hf.builders.subsets import CandidateSubsets  # noqa: E402
from metashift_hf.core.errors import InputFormatError, MetashiftError  # noqa: E402
from metashift_hf.core.names import path_component  # noqa: E402
from metashift_hf.core.parts import part_checksum  # noqa: E402
from metashift_hf.evaluate.config import EvalConfig  # noqa: E402
from metashift_hf.evaluate.zoo import evaluate_zoo  # noqa: E402
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
from metashift_hf.models import CacheConfig, OutputCache, Preprocessing, from_module, outputs  # noqa: E402
from metashift_hf.research.features import feature_cache_dir, image_features, load_backbone  # noqa: E402
from metashift_hf.tasks.match_artifact import MatchInputs, run_match  # noqa: E402


PREP = Preprocessing(36, 32, "bilinear", (0.5,) * 3, (0.5,) * 3)
GOLDFISH = 1  # ImageNet-1k index of 'goldfish' ('tench' is 0)


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging the suite) when the body blocks, e.g. on opening a FIFO."""

    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s (a cache part blocked the run)")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _net(seed: int, outputs: int = 1000) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, outputs),
    )


# ------------------------------------------------------------------------------------------------
# ways to damage a part written by the cache (the same for logits parts and feature shards)
# ------------------------------------------------------------------------------------------------
def _load(path: Path) -> tuple[np.ndarray, str, np.ndarray, dict]:
    with np.load(path, allow_pickle=False) as z:
        array = next(n for n in z.files if n not in ("keys", "meta", "image_ids"))
        return z["keys"], array, z[array], json.loads(str(z["meta"][()])) if "meta" in z.files else {}


def _save(path: Path, keys, array: str, values, meta: dict | None, **override) -> None:
    """A part as the cache writes it (meta and checksum consistent with what is stored) unless overridden."""
    values = np.asarray(values, np.float32)
    if meta is not None:
        meta = {
            **meta,
            "width": int(values.shape[-1]),
            "rows": len(keys),
            "sha256": part_checksum([str(k) for k in keys], values),
            **override,
        }
    extra = {} if meta is None else {"meta": np.array(json.dumps(meta))}
    with open(path, "wb") as f:
        np.savez(f, keys=np.asarray(keys, dtype=str), **{array: values}, **extra)


def truncated(path: Path) -> str:  # A3-11
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return "unreadable"


def width_10(path: Path) -> str:  # A3-12: consistent meta, but 10 outputs where the model has more
    keys, array, _, meta = _load(path)
    _save(path, keys, array, np.eye(10, dtype=np.float32)[[GOLDFISH] * len(keys)], meta)
    return "width 10"


def nan(path: Path) -> str:  # A3-13
    keys, array, values, meta = _load(path)
    _save(path, keys, array, np.full_like(values, np.nan), meta)
    return "NaN"


def fewer_rows(path: Path) -> str:  # A3-14
    keys, array, values, meta = _load(path)
    _save(path, keys, array, values[:3], meta, rows=len(keys))
    return "row(s) of values for"


def two_widths(path: Path) -> str:  # A3-18: half the rows in a second part of another width
    keys, array, values, meta = _load(path)
    half = len(keys) // 2
    good = path.with_name(f"{path.name.split('-')[0]}-{'0' * 16}.npz")
    _save(good, keys[:half], array, values[:half], meta)
    _save(path, keys[half:], array, np.eye(10, dtype=np.float32)[[GOLDFISH] * (len(keys) - half)], meta)
    return "width 10"


def fifo(path: Path) -> str:  # A3-19
    path.unlink()
    os.mkfifo(path)
    return "not a regular file"


def symlink(path: Path) -> str:  # a link to a part elsewhere: never followed
    outside = path.parent.parent / "elsewhere.npz"
    width_10(path)
    path.rename(outside)
    path.symlink_to(outside)
    return "not a regular file"


def other_owner(path: Path) -> str:  # a part of another model (fingerprint / backbone key)
    keys, array, values, meta = _load(path)
    _save(path, keys, array, np.eye(values.shape[1], dtype=np.float32)[[GOLDFISH] * len(keys)], meta, owner="b" * 64)
    return "another model"


def bad_checksum(path: Path) -> str:  # rows swapped, meta unchanged
    keys, array, values, meta = _load(path)
    _save(path, keys, array, np.roll(values, 1, axis=0), meta, sha256=meta["sha256"])
    return "checksum"


def old_format(path: Path) -> str:  # what the cache wrote before parts carried a checksum
    keys, array, values, _ = _load(path)
    _save(path, keys, array, np.eye(values.shape[1], dtype=np.float32)[[GOLDFISH] * len(keys)], None)
    return "older version"


DAMAGES = [truncated, width_10, nan, fewer_rows, two_widths, fifo, symlink, other_owner, bad_checksum, old_format]


def _only_part(folder: Path, prefix: str) -> Path:
    parts = sorted(folder.glob(f"{prefix}-*.npz"))
    assert len(parts) == 1, parts
    return parts[0]


def _check_warned(caplog, part: Path, why: str) -> None:
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and part.name in r.getMessage()]
    assert said and why in said[0], said


# ------------------------------------------------------------------------------------------------
# the logits cache, through the zoo
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zoo_world(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache-world")
    # cat and dog in two context communities each (as tests/test_zoo.py's world)
    subsets = {
        f"dog({c})": [f"d{i}" for i in range(12 * k, 12 * k + 30)]
        for k, c in enumerate(["ball", "bench", "chair", "boat", "car", "truck"])
    }
    subsets |= {
        f"cat({c})": [f"c{i}" for i in range(10 * k, 10 * k + 28)]
        for k, c in enumerate(["sofa", "bed", "chair", "table", "car", "bench"])
    }
    build_artifact(CandidateSubsets.from_dict(subsets), root / "artifact", BuildOptions(), plots=False)
    try:
        run_match(
            MatchInputs(artifact=str(root / "artifact"), hierarchy="wordnet", cache_dir=tmp_path_factory.mktemp("wn"))
        )
    except MetashiftError as exc:  # WordNet dict files absent on this machine
        pytest.skip(f"wordnet_match unavailable: {exc.what}")
    sample_jpegs(root / "images", names=sorted({i for v in subsets.values() for i in v}))
    kw = dict(
        origin=TaskOrigin(artifact=root / "artifact", images=root / "images"),
        settings=EvalConfig(progress=False, plots=False),
    )
    clean = evaluate_zoo(
        [from_module(_net(0), PREP, name="tiny")], ["bin-cat-dog"], cache=CacheConfig(root / "clean"), **kw
    )
    model = from_module(_net(0), PREP, name="tiny")
    folder = OutputCache(outputs.logits(model), root / "clean").folder
    return {"kw": kw, "clean": clean, "folder": folder, "root": root}


def _zoo(world, cache_dir: Path):
    return evaluate_zoo(
        [from_module(_net(0), PREP, name="tiny")], ["bin-cat-dog"], cache=CacheConfig(cache_dir), **world["kw"]
    )


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_a_damaged_logits_part_is_skipped_and_recomputed(zoo_world, tmp_path, caplog, damage):
    clean = zoo_world["clean"]
    cache = tmp_path / "cache"
    folder = cache / zoo_world["folder"].relative_to(zoo_world["root"] / "clean")
    shutil.copytree(zoo_world["folder"], folder)
    part = _only_part(folder, "part")
    why = damage(part)
    caplog.set_level(logging.WARNING)
    with deadline(120):
        got = _zoo(zoo_world, cache)
    # the damaged rows were computed again: exactly the clean run's (cache-free) leaderboard and reports
    for key in ("accuracy", "worst_group_accuracy"):
        if key in got.leaderboard:
            assert got.leaderboard[key].tolist() == clean.leaderboard[key].tolist()
    rep, want = got.reports[("module:tiny", "bin-cat-dog")], clean.reports[("module:tiny", "bin-cat-dog")]
    for key in ("overall", "splits", "classes", "worst_subset"):
        assert rep[key] == want[key], key
    assert got.computed["module:tiny"] > 0
    _check_warned(caplog, part, why)
    # the bad file is never read again: the next run takes every row from the (now good) cache
    caplog.clear()
    again = _zoo(zoo_world, cache)
    assert again.computed["module:tiny"] == 0 and not [r for r in caplog.records if r.levelno >= logging.WARNING]
    run = outputs.logits(from_module(_net(0), PREP, name="tiny"))
    keys = list(_load(_only_part(zoo_world["folder"], "part"))[0])
    np.testing.assert_array_equal(
        OutputCache(run, cache).get(keys), OutputCache(run, zoo_world["root"] / "clean").get(keys)
    )
    if damage is symlink:
        assert (folder.parent / "elsewhere.npz").is_file()  # the link went, never what it pointed to


def test_parts_of_different_widths_without_a_known_width(tmp_path, caplog):
    """No card, no width: the parts must agree; a second width is refused, never stacked (A3-18)."""
    OutputCache("a" * 64, tmp_path).add(["s1", "s2"], np.array([[1, 2, 3], [4, 5, 6]], np.float32))
    other = OutputCache("a" * 64, tmp_path, width=5)  # a writer of another width: the first part is refused for it
    assert len(other) == 0
    other.add(["s3"], np.ones((1, 5), np.float32))
    caplog.set_level(logging.WARNING)
    again = OutputCache("a" * 64, tmp_path)
    kept = [s for s in ("s1", "s2", "s3") if s in again]
    assert kept in (["s1", "s2"], ["s3"]) and again.get(kept).shape == (len(kept), again.width)
    assert any("width" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_fifo_not_named_by_the_cache_is_neither_opened_nor_removed(tmp_path, caplog):
    cache = OutputCache("a" * 64, tmp_path)
    cache.add(["s1"], np.ones((1, 3), np.float32))
    os.mkfifo(cache.folder / "part-evil.npz")
    caplog.set_level(logging.WARNING)
    with deadline(20):
        again = OutputCache("a" * 64, tmp_path)
    assert "s1" in again and (cache.folder / "part-evil.npz").exists()
    _check_warned(caplog, cache.folder / "part-evil.npz", "not a regular file")


def test_the_model_width_is_checked_on_write_and_non_finite_rows_are_never_cached(tmp_path):
    cache = OutputCache("a" * 64, tmp_path, width=3)
    with pytest.raises(InputFormatError, match="width 2"):
        cache.add(["s1"], np.ones((1, 2), np.float32))
    with pytest.raises(InputFormatError, match="NaN"):
        cache.add(["s1"], np.array([[1, np.nan, 2]], np.float32))
    assert not list(cache.folder.glob("part-*.npz"))  # nothing half-valid was written


# ------------------------------------------------------------------------------------------------
# the features cache: the same rule through the same code
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def feature_world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("feature-images")
    ids = [p.stem for p in sample_jpegs(folder, n=6)]
    bb = load_backbone(from_module(_net(1, 10), PREP, name="tiny"))
    clean = image_features(ids, folder, backbone=bb, cache_dir=tmp_path_factory.mktemp("clean"), progress=False)
    return {"folder": folder, "ids": ids, "bb": bb, "clean": clean}


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_a_damaged_feature_shard_is_skipped_and_recomputed(feature_world, tmp_path, caplog, damage):
    bb, ids = feature_world["bb"], feature_world["ids"]
    shutil.copytree(feature_world["clean"].cache_dir, feature_cache_dir(bb, tmp_path))
    shard = _only_part(feature_cache_dir(bb, tmp_path), "part")
    why = damage(shard)
    caplog.set_level(logging.WARNING)
    with deadline(60):
        got = image_features(ids, feature_world["folder"], backbone=bb, cache_dir=tmp_path, progress=False)
    np.testing.assert_array_equal(got.features, feature_world["clean"].features)
    assert got.computed > 0
    _check_warned(caplog, shard, why)
    again = image_features(ids, feature_world["folder"], backbone=bb, cache_dir=tmp_path, progress=False)
    assert again.computed == 0 and again.cached == len(ids)
    np.testing.assert_array_equal(again.features, feature_world["clean"].features)


# ------------------------------------------------------------------------------------------------
# cache folder names derived from model names (issue 29 part 4)
# ------------------------------------------------------------------------------------------------
def test_feature_cache_folder_of_a_registry_backbone_is_one_safe_component(feature_world, tmp_path):
    bb = feature_world["bb"]  # named "module:tiny"
    folder = feature_cache_dir(bb, tmp_path)
    assert ":" in bb.name and folder.parent == tmp_path / "features"
    assert re.fullmatch(r"[A-Za-z0-9._-]+", folder.name) and ":" not in folder.name


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=80), st.text(max_size=80))
def test_path_component_is_one_safe_folder_name_and_keeps_names_apart(a, b):
    for name in (a, b):
        part = path_component(name)
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", part), part
        assert Path(part).name == part and part not in (".", "..") and len(part) <= 60
    if a != b:
        assert path_component(a) != path_component(b)


def test_path_component_examples():
    assert path_component("efficientnet-lite0") == "efficientnet-lite0"
    hf = path_component("hf:/home/me/models/vit\x1b[31m")
    assert hf.startswith("hf_home_me_models_vit_31m-") and ":" not in hf and "/" not in hf and "\x1b" not in hf
    assert path_component("..") != path_component(".") and path_component("..").startswith("name-")
