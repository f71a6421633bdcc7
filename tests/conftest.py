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
