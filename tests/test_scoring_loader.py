"""Issue 36 (habits of the field): the WILDS-style loader takes torchvision/timm transforms (a decoded PIL image,
bytes only on request), has a sequential eval loader, and gives each batch its row indices (hence image ids)."""

from __future__ import annotations

import numpy as np
import pytest


torch = pytest.importorskip("torch")
transforms = pytest.importorskip("torchvision.transforms")

import metashift_hf  # noqa: E402
from metashift_hf.core.errors import MetashiftError  # noqa: E402
from metashift_hf.research.evaluator import Evaluator  # noqa: E402


TF = transforms.Compose([transforms.Resize(40), transforms.CenterCrop(32), transforms.ToTensor()])


def test_a_torchvision_compose_yields_batches(exported_task):
    """It failed with a raw TypeError (the transform was given bytes)."""
    _folder, dd = exported_task
    dl = metashift_hf.loader(dd, "train", batch_size=8, sampling="group-balanced", transform=TF)
    x, y, g, i = next(iter(dl))
    assert tuple(x.shape) == (8, 3, 32, 32) and x.dtype == torch.float32 and 0 <= float(x.min()) <= float(x.max()) <= 1
    ev = Evaluator(dd)
    # the row index is the row's position in the split (Evaluator order): its label, group and image id follow
    assert y.tolist() == ev.labels("train")[i.numpy()].tolist()
    assert g.tolist() == ev.grouping("group", "train").ids[i.numpy()].tolist()
    assert [dl.dataset.ids[k] for k in i.tolist()] == [ev.image_ids("train")[k] for k in i.tolist()]


def test_bytes_stay_possible_on_request(exported_task):
    _folder, dd = exported_task
    seen = []

    def tf(data):
        seen.append(type(data))
        return np.zeros((3, 2, 2), np.float32)

    next(iter(metashift_hf.loader(dd, "train", batch_size=2, transform=tf, image_input="bytes")))
    next(iter(metashift_hf.loader(dd, "train", batch_size=2, transform=tf)))
    # the first row is tried when the loader is made (a wrong output is refused before any batch), then 2 rows
    assert seen[:3] == [bytes] * 3 and all(t.__module__.startswith("PIL") for t in seen[3:])
    with pytest.raises(MetashiftError, match="image_input"):
        metashift_hf.loader(dd, "train", transform=tf, image_input="jpeg")


def test_the_eval_loader_gives_every_row_once_in_the_evaluators_order(exported_task):
    _folder, dd = exported_task
    ev = Evaluator(dd)
    dl = metashift_hf.eval_loader(dd, "test", batch_size=5, transform=TF)
    rows = torch.cat([i for _x, _y, _g, i in dl]).tolist()
    assert rows == list(range(len(ev.image_ids("test"))))
    labels = torch.cat([y for _x, y, _g, _i in dl])
    assert labels.tolist() == ev.labels("test").tolist()
    assert ev.eval(labels, split="test").splits["test"].average == 1.0  # straight into the Evaluator
    again = torch.cat([i for _x, _y, _g, i in dl]).tolist()
    assert again == rows  # not shuffled: every pass is the same
