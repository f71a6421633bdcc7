"""Issue 46 (D8, D11 and the new-user round): the loader refuses a transform output that is no (C, H, W) image
tensor of one size, naming the transform and what it returned; the bytes input with a PIL transform is a clear
error; batches depend on (seed, epoch) alone, not on num_workers or a peek."""

from __future__ import annotations

import numpy as np
import pytest


torch = pytest.importorskip("torch")
transforms = pytest.importorskip("torchvision.transforms")

import metashift_hf  # noqa: E402
from metashift_hf.core.errors import InputFormatError  # noqa: E402


def _rows(dl) -> list[list[int]]:
    return [i.tolist() for _x, _y, _g, i in dl]


def _tiny(_image):
    return torch.zeros(3, 2, 2)


class _Varied:
    """A transform whose output size changes from the second image on (L-08)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, _image):
        self.calls += 1
        return torch.zeros(3, 8, 8 if self.calls == 1 else 9)


@pytest.mark.parametrize(
    "case, transform, said",
    [
        ("L-05", lambda im: im, "a PIL image, no ToTensor"),
        ("L-06", lambda im: None, "None"),
        ("L-07", lambda im: torch.zeros(32, 32), "shape (32, 32)"),
        ("L-12", lambda im: np.zeros((16, 16, 3), np.uint8), "shape (16, 16, 3)"),
        ("L-13", lambda im: [1, 2, 3], "[1, 2, 3]"),
        ("L-13-str", lambda im: "x", "'x'"),
        ("L-13-4d", lambda im: torch.zeros(1, 3, 4, 4), "shape (1, 3, 4, 4)"),
        ("L-13-empty", lambda im: torch.zeros(3, 0, 4), "shape (3, 0, 4)"),
    ],
)
def test_a_transform_output_that_is_no_image_tensor_is_refused_naming_it(exported_task, case, transform, said):
    _folder, dd = exported_task
    with pytest.raises(InputFormatError) as err:  # when the loader is made, before any batch
        metashift_hf.loader(dd, "train", batch_size=4, transform=transform)
    what = err.value.what
    assert "the transform" in what and "lambda" in what and "(C, H, W)" in what, case
    if case != "L-05":
        assert said in what, (case, what)
    else:
        assert "Image" in what
    assert "ToTensor" in err.value.fix
    with pytest.raises(InputFormatError):  # the eval loader the same
        metashift_hf.eval_loader(dd, "test", batch_size=4, transform=transform)


def test_varied_sizes_are_refused_naming_both_sizes_L08(exported_task):
    _folder, dd = exported_task
    dl = metashift_hf.loader(dd, "train", batch_size=4, transform=_Varied())
    with pytest.raises(InputFormatError, match=r"\(3, 8, 9\) tensor .* after a \(3, 8, 8\) one"):
        next(iter(dl))


def test_bytes_to_a_pil_transform_is_a_clear_error_L14(exported_task):
    _folder, dd = exported_task
    tf = transforms.Compose([transforms.Resize(40), transforms.CenterCrop(32), transforms.ToTensor()])
    with pytest.raises(InputFormatError) as err:
        metashift_hf.loader(dd, "train", batch_size=4, transform=tf, image_input="bytes")
    assert "the image bytes" in err.value.what and "TypeError" in err.value.what
    assert "image_input='pil'" in err.value.fix


def test_good_outputs_still_batch(exported_task):
    """A (3, H, W) float array, a grey (1, H, W) tensor and a uint8 (3, H, W) tensor are images."""
    _folder, dd = exported_task
    for tf, shape in [
        (lambda im: np.zeros((3, 4, 4), np.float32), (2, 3, 4, 4)),
        (lambda im: torch.zeros(1, 5, 5), (2, 1, 5, 5)),
        (transforms.PILToTensor(), None),
    ]:
        x = next(
            iter(
                metashift_hf.eval_loader(
                    dd,
                    "test",
                    batch_size=2,
                    transform=transforms.Compose([transforms.Resize((6, 6)), tf]) if shape is None else tf,
                )
            )
        )[0]
        assert tuple(x.shape) == (shape or (2, 3, 6, 6))


def test_batches_are_the_same_for_any_num_workers_and_a_peek_shifts_nothing(exported_task):
    """New-user round: num_workers=0 and 2 gave different batches (torch iterates the batch sampler twice per
    multi-worker pass) and a next(iter(dl)) peek shifted every later epoch; now the epoch is explicit."""
    _folder, dd = exported_task
    kw = dict(batch_size=8, sampling="group-balanced", seed=5, transform=_tiny)
    serial = metashift_hf.loader(dd, "train", num_workers=0, **kw)
    workers = metashift_hf.loader(dd, "train", num_workers=2, **kw)
    next(iter(serial))  # a peek
    by_epoch = {}
    for epoch in range(2):
        serial.set_epoch(epoch)
        workers.set_epoch(epoch)
        by_epoch[epoch] = _rows(serial)
        assert _rows(workers) == by_epoch[epoch] == [b.tolist() for b in serial.batch_sampler.batches(epoch)]
        assert _rows(serial) == by_epoch[epoch]  # a second pass at one epoch: the same batches
    assert by_epoch[0] != by_epoch[1]
    with pytest.raises(Exception, match="epoch"):
        serial.set_epoch(-1)
