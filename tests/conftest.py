"""Tests are offline and talk only to loopback. Fixtures live in tests/fixtures/ (registered here);
reference data is read from ../shared/reference/ through the ``shared_ref`` fixture."""

from __future__ import annotations

import pytest


pytest_plugins = [
    "fixtures.reference",
    "fixtures.environment",
    "fixtures.wordnet",
    "fixtures.worlds",
    "fixtures.tasks",
    "fixtures.space",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that asks for shared_ref (directly or through a fixture) is marked, so that
    # `-m "not needs_shared"` selects what a clean checkout runs.
    for item in items:
        if "shared_ref" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.needs_shared)
