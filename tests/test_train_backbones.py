"""Issue 27 part 2: train / experiment compare on any backbone (hf:, timm:, torchvision:, a module): the linear
probe's features are the model's pre-logits output, equal to calling the model directly, cached by image
content and model fingerprint. Random-weight models saved locally; the exported three-split task."""

from __future__ import annotations

import json

import numpy as np
import pytest

from metashift_hf import cli
from metashift_hf.research.evaluator import Evaluator
from metashift_hf.research.features import image_features, load_backbone


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
timm = pytest.importorskip("timm")


@pytest.fixture(scope="module")
def hf_resnet(tmp_path_factory):
    """(folder, model): a tiny transformers ResNet with random weights, saved with its image processor."""
    folder = tmp_path_factory.mktemp("hf-backbone") / "tiny"
    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(
        transformers.ResNetConfig(num_labels=1000, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    )
    model.save_pretrained(folder, safe_serialization=True)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder, model.eval()


@pytest.fixture(scope="module")
def timm_resnet(tmp_path_factory):
    """(folder, model): timm's resnet18 with random weights in timm's local-dir layout."""
    folder = tmp_path_factory.mktemp("timm-backbone") / "r18"
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False)
    timm.models.save_for_hf(model, folder, safe_serialization=True)
    return folder, model.eval()


def _features(bb, exported_task, tmp_path):
    folder, dd = exported_task
    ev = Evaluator(dd)
    ids = ev.image_ids("train")[:6]
    fs = image_features(ids, ev.task.images(), backbone=bb, cache_dir=tmp_path, progress=False)
    batch = torch.from_numpy(np.stack([bb.prepare(ev.task.images().read(i)) for i in ids]))
    return fs, batch, ids, ev


def test_hf_features_are_the_pooled_output(hf_resnet, exported_task, tmp_path):
    folder, model = hf_resnet
    bb = load_backbone(f"hf:{folder}")
    fs, batch, ids, ev = _features(bb, exported_task, tmp_path)
    with torch.inference_mode():
        want = model.resnet(pixel_values=batch).pooler_output.flatten(1).numpy()
    assert bb.dim == 16 and fs.features.shape == (6, 16)
    np.testing.assert_allclose(fs.features, want, rtol=1e-5, atol=1e-5)
    # cached by image content and the model's fingerprint: a second call embeds nothing
    again = image_features(
        ids, ev.task.images(), backbone=load_backbone(f"hf:{folder}"), cache_dir=tmp_path, progress=False
    )
    assert again.computed == 0 and again.cached == 6
    np.testing.assert_array_equal(again.features, fs.features)


def test_timm_features_are_the_pre_logits(timm_resnet, exported_task, tmp_path):
    folder, model = timm_resnet
    bb = load_backbone(f"timm:local-dir:{folder}")
    fs, batch, _ids, _ev = _features(bb, exported_task, tmp_path)
    headless = timm.create_model("resnet18", pretrained=False, num_classes=0)  # the classifier replaced by identity
    headless.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("fc.")})
    with torch.inference_mode():
        want = headless.eval()(batch).numpy()
    assert bb.dim == 512 and "pre_logits" in bb.card()["features"]
    np.testing.assert_allclose(fs.features, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", ["hf", "timm"])
def test_train_cli_linear_probe_on_a_backbone(form, hf_resnet, timm_resnet, exported_task, tmp_path):
    folder = hf_resnet[0] if form == "hf" else timm_resnet[0]
    backbone = f"hf:{folder}" if form == "hf" else f"timm:local-dir:{folder}"
    out = tmp_path / "run"
    assert (
        cli.main(
            [
                "train",
                "--task",
                str(exported_task[0]),
                "--backbone",
                backbone,
                "--epochs",
                "1",
                "--seeds",
                "1",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    card = json.loads((out / "run_card.json").read_text())
    assert card["backbone"]["name"] == backbone and card["features"]["computed"] > 0
    assert (out / "seed-0" / "predictions.csv").is_file()


def test_experiment_compare_on_an_hf_backbone(hf_resnet, exported_task, tmp_path):
    folder, _dd = exported_task
    out = tmp_path / "cmp"
    assert (
        cli.main(
            [
                "experiment",
                "compare",
                "--methods",
                "erm",
                "--tasks",
                folder.name.removeprefix("metashift-"),
                "--from",
                str(folder.parent),
                "--backbone",
                f"hf:{hf_resnet[0]}",
                "--epochs",
                "1",
                "--seeds",
                "1",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    assert json.loads((out / "compare.json").read_text())["backbone"]["name"] == f"hf:{hf_resnet[0]}"


@pytest.mark.parametrize("form", ["hf", "timm"])
def test_train_cli_finetunes_a_backbone(form, hf_resnet, timm_resnet, exported_task, tmp_path):
    folder = hf_resnet[0] if form == "hf" else timm_resnet[0]
    backbone = f"hf:{folder}" if form == "hf" else f"timm:local-dir:{folder}"
    out = tmp_path / "run"
    assert (
        cli.main(
            [
                "train",
                "--task",
                str(exported_task[0]),
                "--backbone",
                backbone,
                "--probe",
                "finetune",
                "--epochs",
                "1",
                "--seeds",
                "1",
                "--batch-size",
                "8",
                "--cache-dir",
                str(tmp_path / "cache"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    card = json.loads((out / "run_card.json").read_text())
    assert card["probe"] == "finetune" and card["backbone"]["name"] == backbone
    from safetensors.numpy import load_file

    state = load_file(str(out / "seed-0" / "model.safetensors"))
    head = "classifier.1.weight" if form == "hf" else "fc.weight"
    assert state[head].shape[0] == 2  # the new two-class head in place of the 1,000-class one
