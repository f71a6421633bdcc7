"""Packages are layers: checked on the installed layout (a wheel built from this checkout).

Editable installs map ``builders/``, ``wordnet_match/`` and ``cards/`` under ``metashift_hf`` with an
import hook that static analysers cannot follow, so the checks run on the unpacked wheel instead.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("metashift_hf", "builders", "wordnet_match", "cards")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The wheel of this checkout, unpacked: what `pip install .` puts in site-packages."""
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy of the sources: setuptools reuses a checkout's build/ folder, where a module
    # that was moved or deleted since the last build would linger and be analysed
    src = out / "src"
    for name in (*SOURCE_DIRS, "pyproject.toml", "README.md"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
        copy(
            ROOT / name,
            src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
        )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        check=True,
        cwd=out,
        capture_output=True,
    )
    wheel = next(out.glob("metashift_hf-*.whl"))
    target = out / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    return target


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(site)}


def test_wheel_puts_nothing_generic_at_the_top(site):
    tops = {p.name for p in site.iterdir() if not p.name.endswith(".dist-info")}
    assert tops == {"metashift_hf"}
    pkg = site / "metashift_hf"
    for sub in ("builders", "wordnet_match", "cards", "core"):
        assert (pkg / sub / "__init__.py").is_file(), sub
    assert sorted(p.name for p in (pkg / "cards" / "templates").glob("*.md")) == [
        "about.md",
        "citation_coco.md",
        "citation_vg.md",
        "index_card.md",
        "task_card.md",
        "task_section.md",
    ]


def test_import_linter_contracts_hold(site, tmp_path):
    # Run from an empty folder so that the checkout's metashift_hf/ is not what gets analysed.
    run = subprocess.run(
        ["lint-imports", "--config", str(ROOT / "pyproject.toml")],
        cwd=tmp_path,
        env=_env(site),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "BROKEN" not in run.stdout and "0 broken" in run.stdout


_CYCLES = """
import json, grimp, networkx as nx
g = grimp.build_graph("metashift_hf")
d = nx.DiGraph()
for m in g.modules:
    for i in g.find_modules_directly_imported_by(m):
        d.add_edge(m, i)
print(json.dumps(sorted(sorted(c) for c in nx.simple_cycles(d))))
"""


def test_no_module_cycles(site, tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", _CYCLES], cwd=tmp_path, env=_env(site), capture_output=True, text=True, check=True
    )
    assert json.loads(run.stdout) == []


def local_own_imports() -> list[str]:
    """Imports of the project's own modules inside functions with no comment saying why."""
    found = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            tree = ast.parse("\n".join(lines))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom):
                        own = node.level > 0 or (node.module or "").split(".")[0] == "metashift_hf"
                    elif isinstance(node, ast.Import):
                        own = any(a.name.split(".")[0] == "metashift_hf" for a in node.names)
                    else:
                        continue
                    said_why = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
                    if own and not said_why:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return sorted(set(found))


def test_no_function_local_imports_of_own_modules():
    assert local_own_imports() == []


def test_import_builders_fails_from_the_wheel(site, tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", "import builders"], cwd=tmp_path, env=_env(site), capture_output=True, text=True
    )
    assert run.returncode != 0 and "No module named 'builders'" in run.stderr
