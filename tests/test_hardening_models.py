"""Hardening, models: a model folder never runs code, every model's outputs are checked in one place
(Classifier.logits), preprocessing numbers are bounded, and images are decoded within a pixel bound.

Review cases A2-* and M* (hf: folders, callables, from_module, Preprocessing) and A1-42/A1-49
(decompression bombs in a dataset's image cells), /work/shared/reviews/hardening-round4-cases.tsv.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import pickle
import shutil
import struct
import zlib
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

from fixtures.tasks import make_prepared, sample_jpegs, task_features
from metashift_hf.core.errors import InputFormatError, MissingImagesError
from metashift_hf.core.options import OptionError
from metashift_hf.hub.api import PreparedTask
from metashift_hf.models import MAX_INPUT_SIDE, Preprocessing, from_callable, load_model, map_labels, open_rgb


HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_TRANSFORMERS = HAS_TORCH and importlib.util.find_spec("transformers") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
needs_hf = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers not installed (extra 'hf')")
PREP = Preprocessing(40, 32, "bilinear", (0.5,) * 3, (0.5,) * 3)


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels, a few dozen bytes long (a decompression bomb's
    header: decoding it would allocate width * height * 3 bytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


def png(side: int = 48) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (side, side), (120, 30, 200)).save(buf, "PNG")
    return buf.getvalue()


def bytes_task(
    tmp_path: Path, replace: dict[int, bytes] | None = None, n: int = 6, second_split: str = "test"
) -> PreparedTask:
    """make_prepared's task with every image cell holding its bytes (as a parquet does); ``replace``: row
    number (over the splits in order) -> other bytes."""
    task = make_prepared("bin-cat-dog", sample_jpegs(tmp_path / "img", n), test_split=second_split)
    out, row = {}, 0
    for split in task.dataset:
        cols = task.dataset[split].cast_column("image", datasets.Image(decode=False)).to_dict()
        cells = []
        for cell in cols["image"]:
            data = (replace or {}).get(row) or cell["bytes"]
            cells.append({"bytes": data, "path": None})
            row += 1
        out[split] = datasets.Dataset.from_dict({**cols, "image": cells}, features=task_features())
    return PreparedTask(task_id=task.task_id, dataset=datasets.DatasetDict(out), spec=task.spec)


def bomb_row(task: PreparedTask, row: int) -> str:
    ids = [i for split in task.dataset for i in task.dataset[split]["image_id"]]
    return ids[row]


# -- hf: folders ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A tiny ResNet image classifier with random weights (1,000 LABEL_i outputs: ImageNet-1k by index)."""
    if not HAS_TRANSFORMERS:
        pytest.skip("transformers not installed")
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification, ViTImageProcessor

    folder = tmp_path_factory.mktemp("hf") / "tiny"
    torch.manual_seed(0)
    cfg = ResNetConfig(num_labels=1000, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    ResNetForImageClassification(cfg).save_pretrained(folder, safe_serialization=True)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def variant(hf_folder: Path, tmp_path: Path, config: dict | None = None, processor: dict | None = None) -> Path:
    """A copy of the tiny folder with keys of config.json / preprocessor_config.json replaced."""
    folder = tmp_path / "model"
    shutil.copytree(hf_folder, folder)
    for name, changes in (("config.json", config), ("preprocessor_config.json", processor)):
        if changes:
            path = folder / name
            path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return folder


def plant_module(folder: Path, marker: Path) -> None:
    """modeling_evil.py: importing it writes ``marker``."""
    (folder / "modeling_evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('the folder ran code')\n"
        "from transformers import PretrainedConfig\n\n\nclass EvilConfig(PretrainedConfig):\n    model_type = 'evil-net'\n"
    )


@needs_hf
@pytest.mark.parametrize("model_type", ["evil-net", "resnet"], ids=["unknown-model-type", "known-model-type"])
def test_a2_09_10_a_planted_module_is_never_imported_and_nothing_prompts(
    hf_folder, tmp_path, monkeypatch, capsys, model_type
):
    """Review cases A2-09 (transformers' y/N prompt on stdout) and A2-10 ('y' on stdin: the folder's Python ran)."""
    marker = tmp_path / "MARKER"
    auto_map = {"AutoConfig": "modeling_evil.EvilConfig", "AutoModelForImageClassification": "modeling_evil.EvilModel"}
    folder = variant(hf_folder, tmp_path, config={"model_type": model_type, "auto_map": auto_map})
    plant_module(folder, marker)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 5))  # transformers' prompt would read 'y' and import it
    with pytest.raises(InputFormatError, match="auto_map") as e:
        load_model(f"hf:{folder}")
    assert "never runs Python code" in e.value.fix and str(folder) in e.value.what
    assert not marker.exists()
    assert capsys.readouterr().out == ""  # no [y/N] prompt


@needs_hf
def test_an_unknown_model_type_without_auto_map_is_refused_before_transformers(
    hf_folder, tmp_path, monkeypatch, capsys
):
    folder = variant(hf_folder, tmp_path, config={"model_type": "evil-net"})
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    with pytest.raises(InputFormatError, match="model_type 'evil-net'"):
        load_model(f"hf:{folder}")
    assert capsys.readouterr().out == ""


def pickle_only(hf_folder: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The tiny folder with its weights as pytorch_model.bin only, a pickle whose loading runs
    ``touch MARKER`` (os.system); returns (folder, marker)."""

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    marker = tmp_path / "MARKER"
    folder = variant(hf_folder, tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"weight": Payload()}))
    return folder, marker


@needs_hf
def test_a2_02_pickle_only_weights_are_never_unpickled(hf_folder, tmp_path):
    """Review case A2-02: a pickle-only pytorch_model.bin with an os.system payload (not run; was an UnpicklingError
    traceback)."""
    folder, marker = pickle_only(hf_folder, tmp_path)
    with pytest.raises(InputFormatError, match="only pickle files \\(pytorch_model.bin\\)") as e:
        load_model(f"hf:{folder}")
    assert "only safetensors weights are loaded" in e.value.fix
    assert not marker.exists()


@needs_hf
def test_a2_32_train_backbone_refuses_a_pickle_only_folder(hf_folder, tmp_path):
    """Review case A2-32: train --backbone hf:<pickle-only folder> (not run; was a traceback)."""
    from metashift_hf.research.train import TrainConfig, train

    folder, marker = pickle_only(hf_folder, tmp_path)
    task = bytes_task(tmp_path, second_split="validation")
    with pytest.raises(InputFormatError, match="never loaded"):
        train(
            task, config=TrainConfig(backbone=f"hf:{folder}", epochs=1), progress=False, cache_dir=tmp_path / "cache"
        )
    assert not marker.exists()


@needs_hf
@pytest.mark.parametrize(
    "id2label, keys",
    [({"0": "a", "5": "b"}, "[0, 5]"), ({"-1": "a", "0": "b"}, "'-1'"), ({"0": "a", "x": "b"}, "'x'")],
    ids=["A2-13-0-and-5", "A2-14--1-and-0", "key-x"],
)
def test_a2_13_14_id2label_keys_that_are_not_0_to_n_are_refused(hf_folder, tmp_path, id2label, keys):
    folder = variant(hf_folder, tmp_path, config={"id2label": id2label})
    with pytest.raises(InputFormatError, match="id2label") as e:
        load_model(f"hf:{folder}")
    assert keys in e.value.what and "config.json" in e.value.what and "0..n-1" in e.value.fix


@needs_hf
def test_a2_16_a_truncated_safetensors_file_is_refused(hf_folder, tmp_path):
    """Review case A2-16: a truncated model.safetensors (was a traceback). For a local folder the fix says to copy or
    save it again (`hf download FOLDER` made no sense; a Hub cache snapshot needs --force-download)."""
    folder = variant(hf_folder, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(InputFormatError, match="truncated") as e:
        load_model(f"hf:{folder}")
    assert "model.safetensors" in e.value.what and "save the model folder again" in e.value.fix
    assert "hf download" not in e.value.fix
    weights.write_bytes(b"\x05")  # shorter than the header length itself
    with pytest.raises(InputFormatError, match="truncated"):
        load_model(f"hf:{folder}")


@needs_hf
@pytest.mark.parametrize(
    "processor, match",
    [
        ({"size": {"height": 20000, "width": 20000}}, f"larger than the {MAX_INPUT_SIDE} px"),  # A2-19
        ({"size": {"height": 0, "width": 0}}, "out of range"),  # A2-20
        (
            {"size": {"shortest_edge": 224}, "crop_size": {"height": 9000, "width": 9000}, "do_center_crop": True},
            "crop_size",
        ),
        ({"image_std": [0.5, 0.0, 0.5]}, "image_std"),
    ],
    ids=["A2-19-size-20000", "A2-20-size-0", "crop-9000", "std-0"],
)
def test_a2_19_20_processor_sizes_are_bounded_before_any_image(hf_folder, tmp_path, processor, match):
    folder = variant(hf_folder, tmp_path, processor=processor)
    with pytest.raises(OptionError, match=match) as e:
        load_model(f"hf:{folder}")
    assert f"hf:{folder}" in e.value.what


@needs_hf
def test_a2_15_nan_weights_are_refused_not_scored_as_tench(hf_folder, tmp_path, wn):
    """Review case A2-15: an hf: folder with NaN weights scored every image as 'tench', exit 0."""
    from safetensors.torch import load_file, save_file

    from metashift_hf.evaluate import EvalConfig, evaluate

    folder = variant(hf_folder, tmp_path)
    tensors = load_file(folder / "model.safetensors")
    head = next(k for k in tensors if k.startswith("classifier") and k.endswith("weight"))
    tensors[head][:] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    task = bytes_task(tmp_path)
    with pytest.raises(InputFormatError, match="non-finite logits") as e:
        evaluate(f"hf:{folder}", task, out=tmp_path / "ev", settings=EvalConfig(progress=False))
    assert f"hf:{folder}" in e.value.what and "6 of the 6 images" in e.value.what  # every image of the one batch
    assert not (tmp_path / "ev").exists()


@needs_hf
def test_the_tiny_hf_folder_still_loads_and_predicts(hf_folder):
    clf = load_model(f"hf:{hf_folder}")
    out = clf.logits([clf.prepare(png()), clf.prepare(png(60))])
    assert out.shape == (2, 1000) and np.isfinite(out).all() and clf.labels.is_imagenet_1k


# -- outputs of any model: one check in Classifier.logits -------------------------------------------


@pytest.mark.parametrize(
    "name, fn, match",
    [
        ("M03", lambda ims: np.full((len(ims), 1000), np.nan), "non-finite logits"),
        (
            "M04",
            lambda ims: np.where(np.arange(len(ims))[:, None] == 0, np.inf, np.zeros((len(ims), 1000))),
            "non-finite logits",
        ),
        ("M06", lambda ims: [["tench"] * 1000 for _ in ims], "not numbers"),
        ("M09", lambda ims: [object() for _ in ims], "not numbers"),
        ("ragged", lambda ims: [[0.0] * (1000 - i) for i in range(len(ims))], "not an array|not numbers"),
        ("float64-overflow", lambda ims: np.full((len(ims), 1000), 1e300), "non-finite logits"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_m03_m04_m06_m09_callable_outputs_are_checked(tmp_path, wn, name, fn, match):
    from metashift_hf.evaluate import EvalConfig, evaluate

    task = bytes_task(tmp_path)
    with pytest.raises(InputFormatError, match=match) as e:
        evaluate(
            from_callable(fn, name=name), task, out=tmp_path / "ev", settings=EvalConfig(progress=False, batch_size=4)
        )
    assert f"callable:{name}" in e.value.what and e.value.fix
    if name == "M04":
        assert "1 of the 4 images" in e.value.what  # how many rows: only the first of the batch is inf


@needs_torch
def test_m16_from_module_nan_weights_and_m15_label_gaps(tmp_path, wn):
    """Review cases M16 (from_module with a NaN weight: silent) and M15."""
    import torch

    from metashift_hf.evaluate import EvalConfig, evaluate
    from metashift_hf.models import from_module

    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 4))
    with torch.no_grad():
        model[2].weight[1, 0] = float("nan")
    labels = {0: "n02121808", 1: "n02084071", 2: "n02123045", 3: "n04256520"}
    clf = from_module(model, PREP, name="nan", labels=labels)
    with pytest.raises(InputFormatError, match="non-finite logits") as e:
        evaluate(clf, bytes_task(tmp_path), settings=EvalConfig(progress=False))
    assert "module:nan" in e.value.what
    with pytest.raises(InputFormatError, match=r"keys \[0, 1, 2, 4\], not 0..3"):  # M15
        from_module(model, PREP, labels={0: "a", 1: "b", 2: "c", 4: "d"})


@needs_torch
def test_m23_a_preprocessing_callable_of_the_wrong_shape_is_refused():
    """Review case M23 (a preprocessing callable returning (5,): traceback) and its channels-last variant
    ((32, 32, 3) passed the shape check and failed inside the model with a RuntimeError traceback)."""
    import torch

    from metashift_hf.models import from_module

    model = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 1000))
    clf = from_module(model, lambda im: np.zeros(5, np.float32), name="flat")
    with pytest.raises(InputFormatError, match=r"shape \(5,\)") as e:
        clf.prepare(png())
    assert "module:flat" in e.value.what and "(3, H, W)" in e.value.fix
    hwc = from_module(model, lambda im: np.zeros((32, 32, 3), np.float32), name="hwc")
    with pytest.raises(InputFormatError, match=r"shape \(32, 32, 3\).*channels last") as e:
        hwc.prepare(png())
    assert "(3, H, W)" in e.value.fix
    words = from_module(model, lambda im: "pixels", name="words")
    with pytest.raises(InputFormatError, match="not numbers"):
        words.prepare(png())
    sizes = iter([16, 24])
    mixed = from_module(model, lambda im: np.zeros((3, next(sizes), 16), np.float32), name="mixed")
    with pytest.raises(InputFormatError, match="different shapes"):
        mixed.logits([mixed.prepare(png()), mixed.prepare(png())])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(std=(0.5, 0.0, 0.5)), "std"),  # M19: NaN inputs
        (dict(std=(0.5, -1.0, 0.5)), "std"),
        (dict(mean=(0.5, float("nan"), 0.5)), "mean"),
        (dict(std=(0.5, 0.5)), "three numbers"),
        (dict(resize=256, crop=300), "crop=300 is larger than Preprocessing.resize=256"),  # M20
        (dict(crop=0), "crop"),  # M21
        (dict(resize=-8), "resize"),  # M22
        (dict(resize=2.5), "resize"),
        (dict(resize=30000, crop=224), f"{MAX_INPUT_SIDE} px"),
    ],
    ids=[
        "M19-std-0",
        "std-negative",
        "mean-nan",
        "std-two",
        "M20-crop-over-resize",
        "M21-crop-0",
        "M22-resize--8",
        "resize-float",
        "resize-30000",
    ],
)
def test_m19_to_m22_preprocessing_numbers_are_checked(kwargs, match):
    base = dict(resize=40, crop=32, interpolation="bilinear", mean=(0.5,) * 3, std=(0.5,) * 3)
    with pytest.raises(OptionError, match=match) as e:
        Preprocessing(**{**base, **kwargs})
    assert e.value.fix


def test_map_labels_refuses_what_is_not_a_mapping_of_indices():
    with pytest.raises(InputFormatError, match="not a mapping"):
        map_labels(["a", "b"])
    with pytest.raises(InputFormatError, match="empty"):
        map_labels({})
    assert map_labels({"1": "b", "0": "a"}).names == ("a", "b")


# -- image decoding is bounded (decompression bombs) ----------------------------------------------


@pytest.mark.filterwarnings(
    "ignore::PIL.Image.DecompressionBombWarning"
)  # PIL warns above 89 M pixels, then we refuse
@pytest.mark.parametrize("side", [10_000, 30_000], ids=["100-megapixels", "900-megapixels"])
def test_open_rgb_refuses_a_bomb_from_its_header(side):
    with pytest.raises(MissingImagesError, match="too large to decode"):
        open_rgb(png_header(side, side))
    with pytest.raises(MissingImagesError, match="too large to decode"):
        PREP(png_header(side, side))
    assert open_rgb(png()).size == (48, 48)


def test_a1_42_a_bomb_in_the_parquet_is_refused_with_its_image_id_evaluate(tmp_path, wn):
    from metashift_hf.evaluate import EvalConfig, evaluate

    task = bytes_task(tmp_path, {5: png_header(30_000, 30_000)})
    calls = []

    def model(ims):
        calls.append(len(ims))
        return np.zeros((len(ims), 1000))

    with pytest.raises(MissingImagesError, match="too large to decode") as e:
        evaluate(from_callable(model, name="zeros"), task, out=tmp_path / "ev", settings=EvalConfig(progress=False))
    assert e.value.image_ids == [bomb_row(task, 5)] and repr(bomb_row(task, 5)) in e.value.what
    assert e.value.fix


@needs_torch
def test_a1_49_a_bomb_in_the_parquet_is_refused_with_its_image_id_train(tmp_path):
    import torch

    from metashift_hf.models import from_module
    from metashift_hf.research.features import load_backbone
    from metashift_hf.research.train import TrainConfig, train

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 1000)
    )
    backbone = load_backbone(from_module(model, PREP, name="tiny"))
    task = bytes_task(tmp_path, {1: png_header(30_000, 30_000)}, second_split="validation")
    with pytest.raises(MissingImagesError, match="too large to decode") as e:
        train(
            task,
            out=tmp_path / "run",
            config=TrainConfig(epochs=1),
            backbone=backbone,
            progress=False,
            cache_dir=tmp_path / "cache",
        )
    assert e.value.image_ids == [bomb_row(task, 1)]


def test_finetune_augmentation_decodes_within_the_bound():
    from metashift_hf.research.fitting import augment

    with pytest.raises(MissingImagesError, match="too large to decode"):
        augment(png_header(30_000, 30_000), np.random.default_rng(0), 32, (0.5,) * 3, (0.5,) * 3)
