"""Issue 46 (new-user round): the torchvision hash-mismatch fix always said weights='DEFAULT' (wrong when another
member was asked for) and the list of valid weights named DEFAULT twice."""

from __future__ import annotations

import os

import pytest

from metashift_hf.core.errors import ChecksumError, UnknownNameError
from metashift_hf.models import ecosystem


torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")


@pytest.mark.parametrize("member", ["IMAGENET1K_V1", "IMAGENET1K_V2", None])
def test_the_hash_mismatch_fix_downloads_the_weights_asked_for(tmp_path, monkeypatch, member):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    family = tv.models.get_model_weights("resnet50")
    weights = family[member] if member else family.DEFAULT
    cached = tmp_path / "checkpoints" / weights.url.rsplit("/", 1)[-1]
    cached.parent.mkdir()
    cached.write_bytes(os.urandom(1024))
    with pytest.raises(ChecksumError) as err:
        ecosystem.torchvision_model("resnet50" + (f":{member}" if member else ""))
    fix = err.value.fix
    assert f"weights='ResNet50_Weights.{weights.name}'" in fix and "DEFAULT" not in fix
    assert f"delete {cached}" in fix


def test_the_valid_weights_name_default_once_and_what_it_is():
    with pytest.raises(UnknownNameError) as err:
        ecosystem.torchvision_model("resnet50:IMAGENET9K")
    fix = err.value.fix
    assert fix.count("DEFAULT") == 1 and "DEFAULT (= IMAGENET1K_V2)" in fix
    assert "IMAGENET1K_V1" in fix and fix.count("IMAGENET1K_V2") == 2  # in DEFAULT's note and as itself
