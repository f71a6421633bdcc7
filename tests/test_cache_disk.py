"""Hardening round 5, N-G34: a logits/features cache on a full disk was reported as 'cannot write OUT', naming
--out instead of the cache; the error names the cache part and --cache-dir."""

import errno

import numpy as np
import pytest

from metashift_hf.core import parts
from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.parts import PartStore


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_n_g34_a_full_cache_disk_names_the_cache_and_cache_dir(tmp_path, monkeypatch, code):
    def full(*args, **kwargs):
        raise OSError(code, "simulated")

    monkeypatch.setattr(parts.np, "savez", full)
    store = PartStore(tmp_path / "cache", "part", "logits", "owner", "logits cache")
    (tmp_path / "cache").mkdir()
    with pytest.raises(MetashiftError) as err:
        store.write(["a", "b"], np.zeros((2, 3)))
    assert "logits cache: cannot write" in err.value.what and str(tmp_path / "cache") in err.value.what
    assert "--cache-dir" in err.value.fix and "--out" not in err.value.what + err.value.fix
    assert list((tmp_path / "cache").iterdir()) == []  # nothing half-written kept


def test_another_os_error_is_not_dressed_up(tmp_path, monkeypatch):
    monkeypatch.setattr(parts.np, "savez", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EIO, "io")))
    (tmp_path / "c").mkdir()
    with pytest.raises(OSError):
        PartStore(tmp_path / "c", "part", "logits", "owner", "logits cache").write(["a"], np.zeros((1, 2)))
