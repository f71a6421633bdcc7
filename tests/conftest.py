"""Shared fixtures. Tests are offline; reference data is read from ../shared/reference/."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED_REF = Path(__file__).resolve().parents[2] / "shared" / "reference"


@pytest.fixture(scope="session")
def shared_ref() -> Path:
    """The shared reference folder beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_REF.is_dir():
        pytest.skip(f"shared reference data not found at {SHARED_REF} (only present on developer/CI machines)")
    return SHARED_REF


@pytest.fixture
def isolated_manifest(monkeypatch, tmp_path):
    """No data-manifest environment variables, and the user cache (with its manifest) in tmp_path."""
    from metashift_hf import manifest as mf

    for role in mf.ROLES:
        monkeypatch.delenv(mf.env_var(role), raising=False)
    monkeypatch.delenv(mf.MANIFEST_ENV, raising=False)
    monkeypatch.setenv("METASHIFT_HF_CACHE", str(tmp_path / "cache"))
