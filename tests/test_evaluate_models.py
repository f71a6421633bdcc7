"""Preprocessing and predictions-file parsing (no torch needed)."""

import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from metashift_hf.core.errors import InputFormatError
from metashift_hf.evaluate.predictions import PrecomputedPredictions
from metashift_hf.models import TF_LITE_MEAN, TF_LITE_STD, Preprocessing


def _jpeg(w, h, left_rgb, right_rgb):
    im = Image.new("RGB", (w, h), left_rgb)
    im.paste(Image.new("RGB", (w // 2, h), right_rgb), (w // 2, 0))
    buf = io.BytesIO()
    im.save(buf, "PNG")  # lossless, so the expected pixel values are exact
    return buf.getvalue()


def test_preprocessing_resize_crop_normalise():
    prep = Preprocessing(256, 224, "bicubic", TF_LITE_MEAN, TF_LITE_STD)
    # 600x300, left half grey 127, right half white: the centre crop keeps the middle 262 px of width
    out = prep(_jpeg(600, 300, (127, 127, 127), (255, 255, 255)))
    assert out.shape == (3, 224, 224) and out.dtype == np.float32
    assert np.allclose(out[:, :, :20], 0.0, atol=1e-6)  # (127 - 127) / 128
    assert np.allclose(out[:, :, -20:], 128 / 128, atol=1e-6)  # (255 - 127) / 128
    # the boundary sits in the middle of the crop
    col = out[0, 100]
    assert abs(int(np.argmax(col > 0.5)) - 112) <= 2


def test_predictions_file_forms(tmp_path):
    ids = ["10", "2", "n3"]
    logits = np.zeros((3, 1000), dtype=np.float32)
    logits[[0, 1, 2], [5, 7, 999]] = 1
    pd.DataFrame({"image_id": ids, "logits": list(logits)}).to_parquet(tmp_path / "a.parquet")
    cols = pd.DataFrame(logits, columns=[f"logit_{i}" for i in range(1000)])
    pd.concat([pd.DataFrame({"image_id": ids}), cols], axis=1).to_csv(tmp_path / "b.csv", index=False)
    pd.DataFrame({"image_id": ids, "imagenet_index": [5, 7, 999]}).to_csv(tmp_path / "c.csv", index=False)
    for name in ("a.parquet", "b.csv", "c.csv"):
        p = PrecomputedPredictions.read(tmp_path / name).predictions
        assert p.image_ids == ids and p.top1.tolist() == [5, 7, 999]  # ids stay strings ("10", not 10)
        assert (p.logits is None) == (name == "c.csv")
    sub = PrecomputedPredictions.read(tmp_path / "a.parquet").predictions.for_ids(["n3", "10"])
    assert sub.top1.tolist() == [999, 5] and sub.logits.shape == (2, 1000)


@pytest.mark.parametrize(
    "frame, match",
    [
        (pd.DataFrame({"id": ["1"], "imagenet_index": [1]}), "no image_id column"),
        (pd.DataFrame({"image_id": ["1", "1"], "imagenet_index": [1, 2]}), "repeats image_id"),
        (pd.DataFrame({"image_id": ["1"], "imagenet_index": [2.5]}), "0-999"),
        (pd.DataFrame({"image_id": ["1"], "imagenet_index": [-1]}), "0-999"),
        (pd.DataFrame({"image_id": ["1"], "top1": [3]}), "neither imagenet_index nor logits"),
        (pd.DataFrame({"image_id": ["1"], "logits": [[0.0] * 999]}), "exactly 1000"),
        (pd.DataFrame({"image_id": ["1"], "logits": [[float("nan")] * 1000]}), "NaN"),
    ],
)
def test_predictions_file_errors(tmp_path, frame, match):
    path = tmp_path / "p.parquet"
    frame.to_parquet(path)
    with pytest.raises(InputFormatError, match=match) as e:
        PrecomputedPredictions.read(path)
    assert str(path) in e.value.what and e.value.fix


def test_predictions_file_type(tmp_path):
    (tmp_path / "p.json").write_text("{}")
    with pytest.raises(InputFormatError, match="neither .csv nor .parquet"):
        PrecomputedPredictions.read(tmp_path / "p.json")
