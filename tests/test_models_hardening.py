"""Hardening of the models room (issue 37, areas B3 and B4 of ../shared/reviews/hardening-round5-cases.tsv) and the
habits of issue 36 (timm's test size, torchvision weights by name and checked, any predictor in a zoo, no local
folder in a leaderboard). Each test names the review case ids it covers."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


torch = pytest.importorskip("torch")

from fixtures.zoo import tiny_model, world  # noqa: E402,F401  (world: the module fixture)
from metashift_hf.core.errors import ChecksumError, InputFormatError, MetashiftError, UnknownNameError  # noqa: E402
from metashift_hf.core.parts import CacheConflictError, PartStore  # noqa: E402
from metashift_hf.evaluate import EvalConfig, distributed  # noqa: E402
from metashift_hf.evaluate.zoo import BASELINE, evaluate_zoo  # noqa: E402
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
from metashift_hf.models import CacheConfig, Preprocessing, ecosystem, from_module  # noqa: E402


QUIET = EvalConfig(progress=False, plots=False)
PREP = Preprocessing(36, 32, "bilinear", (0.5,) * 3, (0.5,) * 3)


# --- B4: cache parts are trusted input; two valid parts that disagree are refused ---------------------------------


def test_b4_n_z18_two_valid_parts_that_disagree_on_a_key_are_refused_not_read_in_name_order(tmp_path):
    """N-Z18 variant: a part rewritten with other values and a recomputed checksum is valid; beside the honest part
    for the same image it was served or not by file-name order. Now the disagreement stops the read, naming both."""
    store = PartStore(tmp_path, "part", "values", "k" * 64, "outputs cache")
    honest = store.write(["a", "b"], np.array([[1.0, 2.0], [3.0, 4.0]]))
    rows, _ = PartStore(tmp_path, "part", "values", "k" * 64, "outputs cache").read()
    assert rows["a"].tolist() == [1.0, 2.0]
    store.write(["a", "c"], np.array([[1.0 + 1e-7, 2.0], [5.0, 6.0]]))  # float32 rounding of another batch: agreed
    assert PartStore(tmp_path, "part", "values", "k" * 64, "x").read()[0]["a"].tolist() == [1.0, 2.0]
    forged = store.write(["a", "d"], np.array([[9.0, -9.0], [7.0, 8.0]]))
    with pytest.raises(CacheConflictError) as e:
        PartStore(tmp_path, "part", "values", "k" * 64, "outputs cache").read()
    assert honest.name in e.value.what and forged.name in e.value.what and "trusted" in e.value.fix
    assert PartStore(tmp_path, "part", "values", "k" * 64, "x").read(wanted=["b", "c"])[0].keys() == {"b", "c"}


def test_docs_say_a_shared_cache_is_trusted_input():
    text = (Path(__file__).resolve().parent.parent / "docs" / "evaluate.md").read_text()
    assert "**A cache is trusted input**" in text and "N-Z18" in text


# --- B4: distributed launch variables checked; a short rendezvous, a long barrier ---------------------------------


@pytest.mark.parametrize(
    "env, match",
    [
        ({"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR and MASTER_PORT are not set"),  # N-Z20
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT is not set"),  # N-Z20
        ({"WORLD_SIZE": "2", "RANK": "5", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "ranks are 0..1"),  # N-Z23
        ({"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK is not set"),  # N-Z22 (missing rank)
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two'.*not an integer"),
        ({"WORLD_SIZE": "2", "RANK": "-1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=-1.*below 0"),
    ],
)
def test_b4_n_z20_n_z22_n_z23_launch_variables_are_checked_before_any_work(monkeypatch, env, match):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(InputFormatError, match=match) as e:
        distributed.choose_part()
    assert "torchrun" in e.value.fix


def test_b4_n_z21_a_non_numeric_timeout_variable_is_an_error_line(monkeypatch):
    monkeypatch.setenv(distributed.BARRIER_TIMEOUT_ENV, "abc")
    with pytest.raises(InputFormatError, match="METASHIFT_HF_DIST_TIMEOUT_S='abc'"):
        distributed.timeouts()
    monkeypatch.setenv(distributed.BARRIER_TIMEOUT_ENV, "7200")
    monkeypatch.setenv(distributed.RENDEZVOUS_TIMEOUT_ENV, "0")
    with pytest.raises(InputFormatError, match="RENDEZVOUS_TIMEOUT_S=0"):
        distributed.timeouts()
    monkeypatch.delenv(distributed.RENDEZVOUS_TIMEOUT_ENV)
    assert distributed.timeouts() == (distributed.DEFAULT_RENDEZVOUS_TIMEOUT_S, 7200)
    assert distributed.DEFAULT_RENDEZVOUS_TIMEOUT_S < distributed.DEFAULT_BARRIER_TIMEOUT_S


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_b4_n_z22_a_rank_that_never_comes_is_reported_after_the_rendezvous_timeout_not_6_hours():
    """N-Z22: WORLD_SIZE=2 with only rank 0 started waited silently for the 6 h barrier timeout. Now the ranks
    meet under the short rendezvous timeout, the wait is logged, and a missing rank is an error naming the fix."""
    env = {
        **os.environ,
        "WORLD_SIZE": "2",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        distributed.RENDEZVOUS_TIMEOUT_ENV: "3",
    }
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "from metashift_hf.core.errors import MetashiftError\n"
        "from metashift_hf.evaluate import distributed as d\n"
        "try:\n"
        "    with d.Group(d.choose_part()):\n"
        "        pass\n"
        "except MetashiftError as e:\n"
        "    print('ERROR', e.what, '|', e.fix)\n"
    )
    t0 = time.monotonic()
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 100
    assert "ERROR" in run.stdout and "did not all meet at 127.0.0.1" in run.stdout and "rank 0..1" in run.stdout
    assert "waiting up to 3 s for all 2 ranks" in run.stderr


# --- B3: torchvision checkpoints: hash prefix as torchvision checks it; unreadable or misfit files ---------------


tv = pytest.importorskip("torchvision")


@pytest.fixture
def tv_cache(tmp_path, monkeypatch):
    """An empty torch hub cache; returns the path of resnet18's DEFAULT checkpoint in it."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    (tmp_path / "checkpoints").mkdir()
    return tmp_path / "checkpoints" / tv.models.get_model_weights("resnet18").DEFAULT.url.rsplit("/", 1)[-1]


def test_b3_n_m43_issue36_a_file_whose_hash_is_not_the_name_s_prefix_is_refused(tv_cache):
    """Issue 36: a random file under the DEFAULT name was ranked as torchvision:resnet18. N-M43: random bytes
    were a traceback. The sha256 prefix in the file name is checked first, as torch.hub's check_hash does."""
    tv_cache.write_bytes(os.urandom(4096))
    with pytest.raises(ChecksumError) as e:
        ecosystem.torchvision_model("resnet18")
    assert str(tv_cache) in e.value.what and "f37072fd" in e.value.what and "delete" in e.value.fix


@pytest.fixture
def unchecked(monkeypatch):
    """The hash check passed (a checkpoint we cannot make with the published prefix): what comes after it."""
    monkeypatch.setattr(ecosystem, "verify_checkpoint", lambda path, ref: "0" * 64)


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


@pytest.mark.parametrize(
    "case, write, match",
    [
        ("N-M42", lambda p: p.write_bytes(pickle.dumps({"w": _Payload()})), "cannot be read as plain tensors"),
        ("N-M43", lambda p: p.write_bytes(os.urandom(2048)), "cannot be read as plain tensors"),
        (
            "N-M44",
            lambda p: torch.save(tv.models.resnet34(weights=None).state_dict(), p),
            "does not fit resnet18",
        ),
        ("not a dict", lambda p: torch.save(torch.zeros(3), p), "not a state dict"),
    ],
)
def test_b3_n_m42_n_m43_n_m44_a_bad_torchvision_checkpoint_is_one_error_line(tv_cache, unchecked, case, write, match):
    write(tv_cache)
    with pytest.raises(InputFormatError, match=match) as e:
        ecosystem.torchvision_model("resnet18")
    assert str(tv_cache) in e.value.what and "download it again" in e.value.fix, case


def test_issue36_torchvision_weights_by_enum_name_are_recorded(tv_cache, unchecked):
    torch.save(tv.models.resnet18(weights=None).state_dict(), tv_cache)
    clf = ecosystem.torchvision_model("resnet18:IMAGENET1K_V1")
    assert clf.name == "torchvision:resnet18:IMAGENET1K_V1"
    assert clf.card()["weights"] == "ResNet18_Weights.IMAGENET1K_V1"
    assert ecosystem.torchvision_model("resnet18:ResNet18_Weights.IMAGENET1K_V1").card()["weights"].endswith("V1")
    with pytest.raises(UnknownNameError, match="IMAGENET1K_V9.*") as e:
        ecosystem.torchvision_model("resnet18:IMAGENET1K_V9")
    assert "IMAGENET1K_V1" in e.value.fix


# --- B3: timm:local-dir failures say what is wrong with the folder; pretrained_cfg numbers named ------------------


timm = pytest.importorskip("timm")


@pytest.fixture
def timm_dir(tmp_path):
    torch.manual_seed(0)
    folder = tmp_path / "r18"
    timm.models.save_for_hf(timm.create_model("resnet18", pretrained=False), folder, safe_serialization=True)
    return folder


def _edit_config(folder: Path, change) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


def _refused(name: str, match: str) -> MetashiftError:
    with pytest.raises(MetashiftError, match=match) as e:
        ecosystem.timm_model(name)
    assert "internet" not in e.value.fix and "download" not in e.value.fix
    return e.value


def test_b3_n_m16_a_missing_folder_is_not_a_download_problem(tmp_path):
    _refused(f"local-dir:{tmp_path / 'nope'}", "is not a folder")


@pytest.mark.parametrize(
    "key, value, case",
    [
        ("crop_pct", 100, "N-M25"),
        ("crop_pct", "x", "N-M26"),
        ("crop_pct", -1, "N-M25"),
        ("test_crop_pct", "x", "N-M26"),
    ],
)
def test_b3_n_m25_n_m26_crop_pct_is_named_with_its_file(timm_dir, key, value, case):
    def change(config):
        config["pretrained_cfg"].pop("test_crop_pct", None)  # else timm's test rule takes it instead of crop_pct
        config["pretrained_cfg"][key] = value

    _edit_config(timm_dir, change)
    err = _refused(f"local-dir:{timm_dir}", f"pretrained_cfg {key}=")
    assert str(timm_dir / "config.json") in err.what and key in err.fix, case


def test_b3_n_m32_an_unknown_architecture(timm_dir):
    _edit_config(timm_dir, lambda c: c.update(architecture="resnet_from_the_future"))
    _refused(f"local-dir:{timm_dir}", "does not know")


def test_b3_n_m33_a_head_that_does_not_fit_the_weights(timm_dir):
    _edit_config(timm_dir, lambda c: (c.update(num_classes=10), c["model_args"].update(num_classes=10)))
    _refused(f"local-dir:{timm_dir}", "cannot build the model")


def test_b3_n_m36_a_one_channel_model(tmp_path):
    folder = tmp_path / "gray"
    timm.models.save_for_hf(timm.create_model("resnet18", in_chans=1), folder, safe_serialization=True)
    _edit_config(folder, lambda c: c["pretrained_cfg"].update(input_size=[1, 224, 224]))
    _refused(f"local-dir:{folder}", "RGB input")


def test_b3_n_m37_n_m38_pickle_only_and_truncated_weights(timm_dir):
    data = (timm_dir / "model.safetensors").read_bytes()
    (timm_dir / "model.safetensors").write_bytes(data[: len(data) // 2])
    _refused(f"local-dir:{timm_dir}", "truncated")
    (timm_dir / "model.safetensors").unlink()
    (timm_dir / "pytorch_model.bin").write_bytes(pickle.dumps({"w": _Payload()}))
    err = _refused(f"local-dir:{timm_dir}", "only pickle files")
    assert "never loaded" in err.what


def test_b3_n_m39_a_fifo_config_is_never_opened(timm_dir):
    (timm_dir / "config.json").unlink()
    os.mkfifo(timm_dir / "config.json")
    _refused(f"local-dir:{timm_dir}", "not a regular JSON file")


def test_b3_n_m34_label_names_of_another_dataset_are_the_head_s_labels(timm_dir):
    """N-M34: a 1000-class head whose label_names are another dataset's was scored as ImageNet-1k."""
    names = [f"thing {i}" for i in range(1000)]
    _edit_config(timm_dir, lambda c: c["pretrained_cfg"].update(label_names=names))
    clf = ecosystem.timm_model(f"local-dir:{timm_dir}")
    assert not clf.labels.is_imagenet_1k and clf.labels.size == 1000


def test_issue36_timm_runs_at_its_test_size_as_timm_validate_does(tmp_path):
    """resnet10t trains at 176 px and timm validates it at test_input_size 224 with test_crop_pct 0.95; we ran it at
    176. Now timm's rule by default; --image-size (Classifier.at_image_size) chooses another size."""
    folder = tmp_path / "r10t"
    timm.models.save_for_hf(timm.create_model("resnet10t"), folder, safe_serialization=True)
    clf = ecosystem.timm_model(f"local-dir:{folder}")
    assert (clf.preprocessing.crop, clf.preprocessing.resize) == (224, int(224 / 0.95))
    assert clf.card()["input_size_rule"].startswith("test_input_size")
    assert clf.at_image_size(176).preprocessing.crop == 176


def test_b3_n_m03_a_module_that_is_not_an_image_classifier_fails_with_its_name():
    clf = from_module(torch.nn.LSTM(3, 4), PREP, name="lstm")
    with pytest.raises(InputFormatError, match=r"model 'module:lstm' failed on a batch of shape \(1, 3, 32, 32\)"):
        clf.logits([np.zeros((3, 32, 32), np.float32)])


# --- issue 36: any predictor joins a zoo; no local folder in the leaderboard files --------------------------------


def test_issue36_a_predictions_file_and_a_constant_predictor_join_the_zoo(world, tmp_path):
    art, images = world / "artifact", world / "images"
    ids = sorted(p.stem for p in images.glob("*.jpg"))
    pd.DataFrame({"image_id": ids, "imagenet_index": [281] * len(ids)}).to_csv(tmp_path / "cats.csv", index=False)

    def always_dog(images):
        out = np.zeros((len(images), 1000), np.float32)
        out[:, 207] = 1.0
        return out

    zoo = evaluate_zoo(
        [tiny_model(1), f"predictions:{tmp_path / 'cats.csv'}", always_dog],
        ["bin-cat-dog"],
        TaskOrigin(artifact=art, images=images),
        tmp_path / "zoo",
        settings=QUIET,
        cache=CacheConfig(tmp_path / "cache"),
    )
    board = pd.read_csv(tmp_path / "zoo" / "leaderboard.csv")
    assert set(board["model"]) == {"module:tiny1", "predictions:cats.csv", "callable:always_dog", BASELINE}
    assert zoo.computed["predictions:cats.csv"] == 0
    assert (tmp_path / "zoo" / "bin-cat-dog" / "predictions-cats.csv" / "report.json").is_file()


def test_issue36_absolute_model_folders_never_appear_in_the_leaderboard_files(world, tmp_path):
    secret = "/home/someone/models/rb"
    evaluate_zoo(
        [from_module(tiny_model(3).module, PREP, name=secret)],
        ["bin-cat-dog"],
        TaskOrigin(artifact=world / "artifact", images=world / "images"),
        tmp_path / "zoo",
        settings=QUIET,
        cache=CacheConfig(use=False),
    )
    for name in ("leaderboard.csv", "leaderboard.md", "zoo.json"):
        text = (tmp_path / "zoo" / name).read_text()
        assert "/home/someone" not in text and "home-someone" not in text, name
    assert "module:rb" in (tmp_path / "zoo" / "leaderboard.csv").read_text()
