"""Real timm / torchvision architectures with random weights, loaded as --model would load them (issue 27 part 1)."""

import io
import json
import socket

import numpy as np
import pandas as pd
import pytest
from PIL import Image


torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
tv = pytest.importorskip("torchvision")

from fixtures.zoo import world  # noqa: E402,F401  (world: the module fixture; a matched cat/dog artifact and images)
from metashift_hf.cli import main  # noqa: E402
from metashift_hf.core.errors import MetashiftError  # noqa: E402
from metashift_hf.core.fsutil import sha256_file  # noqa: E402
from metashift_hf.models import ecosystem  # noqa: E402


def _images(n=2, side=48):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(buf, "PNG")
        out.append(buf.getvalue())
    return out


def _check_logits(clf, model):
    prepared = [clf.prepare(b) for b in _images()]
    got = clf.logits(prepared)
    with torch.inference_mode():
        want = model.eval()(torch.from_numpy(np.stack(prepared))).numpy()
    assert got.shape == (2, 1000)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_timm_local_dir_logits_match_direct_call(tmp_path):
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False)
    timm.models.save_for_hf(model, tmp_path / "r18", safe_serialization=True)  # timm's local-dir layout
    clf = ecosystem.timm_model(f"local-dir:{tmp_path / 'r18'}")
    assert clf.name == f"timm:local-dir:{tmp_path / 'r18'}"
    _check_logits(clf, model)


def test_torchvision_logits_match_direct_call(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    # random weights cannot carry the published sha256 prefix: the check is tested in test_models_hardening.py
    monkeypatch.setattr(ecosystem, "verify_checkpoint", lambda path, ref: sha256_file(path))
    torch.manual_seed(0)
    model = tv.models.resnet18(weights=None)
    url = tv.models.get_model_weights("resnet18").DEFAULT.url
    (tmp_path / "checkpoints").mkdir()
    torch.save(model.state_dict(), tmp_path / "checkpoints" / url.rsplit("/", 1)[-1])
    _check_logits(ecosystem.torchvision_model("resnet18"), model)


def test_timm_name_never_touches_the_network(tmp_path, monkeypatch):
    """The offline switch is applied at call time, after huggingface_hub was imported (it was not: a request went out)."""
    import huggingface_hub.constants as hub_constants  # imported before the load, as in a real session

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    attempts = []

    def refuse(self, address, *a, **k):
        attempts.append(address)
        raise ConnectionRefusedError("test: no network")

    monkeypatch.setattr(socket.socket, "connect", refuse)

    def no_lookup(host, *a, **k):  # a request starts with a name lookup, before any connect
        attempts.append(host)
        raise socket.gaierror("test: no network")

    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    with pytest.raises(MetashiftError, match="local cache") as err:
        ecosystem.timm_model("resnet18")
    assert attempts == []
    assert "local-dir" in err.value.fix
    assert hub_constants.HF_HUB_OFFLINE is False  # restored after the load


@pytest.mark.parametrize("which", ["torchvision", "timm"])
def test_broken_torchvision_is_an_error_line(monkeypatch, which):
    def broken(name, what, extra):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(ecosystem, "require_module", broken)
    with pytest.raises(MetashiftError, match="does not match the installed torch") as err:
        getattr(ecosystem, f"{which}_model")("resnet18")
    assert "torch==2.14.1 torchvision==0.29.1" in err.value.fix


def _direct_logits(model, transform, image_paths) -> np.ndarray:
    """The model called directly on each image through its library's own transform (timm's or torchvision's)."""
    batch = torch.stack([transform(Image.open(p).convert("RGB")) for p in image_paths])
    with torch.inference_mode():
        return model.eval()(batch).numpy()


@pytest.mark.parametrize("form", ["timm", "torchvision"])
def test_evaluate_cli_logits_equal_the_model_called_directly(form, world, tmp_path, monkeypatch, capsys):
    """``metashift-hf evaluate --model timm:local-dir:F`` / ``torchvision:NAME`` (random weights, local only): the
    logits the CLI saves equal the model called directly through timm's / torchvision's own preprocessing, as the
    hf: path is checked in test_zoo (issue 27 part 1)."""
    torch.manual_seed(0)
    if form == "timm":
        model = timm.create_model("resnet18", pretrained=False)
        timm.models.save_for_hf(model, tmp_path / "r18", safe_serialization=True)
        spec = f"timm:local-dir:{tmp_path / 'r18'}"
        # timm's validate.py rule (issue 36): the pretrained config's test size (resnet18: 288 px, crop 1.0)
        transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model, use_test_size=True))
    else:
        monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
        monkeypatch.setattr(ecosystem, "verify_checkpoint", lambda path, ref: sha256_file(path))  # random weights
        model = tv.models.resnet18(weights=None)
        weights = tv.models.get_model_weights("resnet18").DEFAULT
        (tmp_path / "checkpoints").mkdir()
        torch.save(model.state_dict(), tmp_path / "checkpoints" / weights.url.rsplit("/", 1)[-1])
        spec, transform = "torchvision:resnet18", weights.transforms()
    out = tmp_path / "ev"
    args = [
        "evaluate",
        "--model",
        spec,
        "--task",
        "bin-cat-dog",
        "--artifact",
        str(world / "artifact"),
        "--images",
        str(world / "images"),
        "--sample",
        "12",
        "--out",
        str(out),
        "--save-logits",
        "--no-progress",
    ]
    assert main(args) == 0, capsys.readouterr().err
    got = pd.read_parquet(out / "logits.parquet")
    direct = _direct_logits(model, transform, [world / "images" / f"{i}.jpg" for i in got["image_id"]])
    np.testing.assert_allclose(np.stack(got["logits"]), direct, rtol=1e-5, atol=1e-5)
    assert json.loads((out / "report.json").read_text())["run"]["model"]["kind"] == form
