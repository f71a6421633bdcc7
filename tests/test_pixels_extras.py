"""Issue 36 (last bullet): ``pip install metashift-hf[all]`` installs no test tools; the ``[test]`` extra holds them,
and the test command (.ci/run -> scripts/test.sh -> scripts/install.sh) installs it."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib


ROOT = Path(__file__).resolve().parents[1]
TEST_TOOLS = {"pytest", "pytest-xdist", "ruff", "import-linter", "hypothesis", "markdown"}


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _packages(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """Every distribution an extra pulls in, through ``metashift-hf[a,b]`` self-references."""
    found: set[str] = set()
    for req in extras[extra]:
        inner = re.fullmatch(r"metashift-hf\[([^\]]+)\]", req)
        if inner:
            for name in inner.group(1).split(","):
                found |= _packages(name.strip(), extras)
        else:
            found.add(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower())
    return found


def test_all_extra_holds_no_test_tools_and_test_extra_holds_them():
    extras = _extras()
    assert not TEST_TOOLS & _packages("all", extras), "[all] is what users install: no pytest, ruff, ..."
    assert TEST_TOOLS <= _packages("test", extras)
    assert {"torch", "timm", "torchvision", "transformers", "matplotlib"} <= _packages("all", extras)


def test_the_test_command_installs_the_test_extra():
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "bash scripts/install.sh" in test_sh and "pytest" in test_sh
    pip = [line for line in (ROOT / "scripts" / "install.sh").read_text().splitlines() if "pip install" in line]
    assert pip and all(re.search(r"-e '\.\[[^\]]*\btest\b[^\]]*\]'", line) for line in pip), pip
    assert all(re.search(r"-e '\.\[[^\]]*\ball\b[^\]]*\]'", line) for line in pip), pip
