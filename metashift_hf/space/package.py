"""How a Space installs metashift-hf: the package's own wheel, built into the Space folder and named in
``requirements.txt`` by relative path (no package index holds metashift-hf yet), or another requirement line
(``--package REQ``: a wheel URL, ``metashift-hf @ git+https://...``, a version on an index).

The wheel is built from a copy of the source tree in a temporary folder (setuptools writes ``build/`` and
``*.egg-info`` where it builds: never into the user's checkout), without build isolation or an index (the build
needs only setuptools, already installed). Before a push, :func:`check_requirements` asks pip to resolve every
line of ``requirements.txt`` from the Space folder (``pip install --dry-run --no-deps``: what the Space's build
will ask for, each line's metadata only; a local wheel resolves without network).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import metashift_hf

from ..core.errors import InputFormatError
from ..core.options import OptionError


WHEELS = "wheels"  # the Space folder's sub-folder holding the built wheel (rewritten whole by each `space`)
PROJECT = "metashift-hf"
# what setuptools reads to build the wheel (pyproject's packages and package-dir); caches never copied
SOURCE_PARTS = ("pyproject.toml", "README.md", "LICENSE", "metashift_hf", "builders", "wordnet_match", "cards")
PIP_TIMEOUT_S = 600
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip entry holds
PACKAGE_FIX = "give --package one requirement line, e.g. 'metashift-hf @ https://example.org/metashift_hf.whl'"


def check_package(package: str | None) -> str | None:
    """``--package``: one requirement line. A newline (or carriage return) would add lines of its own to
    requirements.txt (``--extra-index-url ...``), a leading ``-`` is a pip option, not a requirement."""
    if package is None:
        return None
    if any(c in package for c in "\r\n\x00") or not package.strip():
        raise OptionError(f"--package {package!r} is not one requirement line", PACKAGE_FIX)
    if package.strip().startswith("-"):
        raise OptionError(f"--package {package!r} is a pip option, not a requirement", PACKAGE_FIX)
    return package.strip()


def source_tree() -> Path:
    """The checkout this package runs from (its pyproject names metashift-hf), else a clear refusal."""
    root = Path(metashift_hf.__file__).resolve().parents[1]
    pyproject = root / "pyproject.toml"
    try:  # the project's name line (tomllib is Python 3.11+; the package supports 3.10)
        named = f'\nname = "{PROJECT}"\n' in pyproject.read_text(encoding="utf-8")
    except OSError:
        named = False
    if not named:
        raise InputFormatError(
            f"metashift-hf runs from {root}, not from a source checkout: its wheel cannot be built for the Space",
            PACKAGE_FIX,
        )
    return root


def build_wheel(dest: Path) -> Path:
    """The package's wheel, built from a temporary copy of the source tree into ``dest``; its path."""
    root = source_tree()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    with tempfile.TemporaryDirectory(prefix="metashift-wheel-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for part in SOURCE_PARTS:
            path = root / part
            if path.is_dir():
                shutil.copytree(path, src / part, ignore=ignore)
            elif path.is_file():
                shutil.copy2(path, src / part)
        out = Path(tmp) / "wheel"
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        # a fixed zip timestamp: the same source gives the same wheel bytes (a second push makes no commit)
        env = {**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        done = subprocess.run(
            [*cmd, "-w", str(out), str(src)], capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=env
        )
        wheels = sorted(out.glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise InputFormatError(
                f"building metashift-hf's wheel failed: {(done.stderr or done.stdout).strip()[-600:]}", PACKAGE_FIX
            )
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheels[0], dest / wheels[0].name))


def requirement_for(wheel: Path, folder: Path) -> str:
    """The requirements.txt line of a wheel inside the Space folder: its path relative to the folder."""
    return "./" + wheel.relative_to(folder).as_posix()


def check_requirements(folder: Path) -> None:
    """pip resolves every line of ``folder``'s requirements.txt from the folder (as the Space's build will), or a
    refusal naming what pip said. Each line's metadata only: a local wheel is read, an index gives metadata."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q"]
    try:
        done = subprocess.run(
            [*cmd, "--disable-pip-version-check", "-r", "requirements.txt"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise InputFormatError(
            f"pip did not resolve {folder / 'requirements.txt'} in {PIP_TIMEOUT_S} s", "check the network"
        ) from None
    if done.returncode != 0:
        said = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()][-3:]
        raise InputFormatError(
            f"pip cannot install {folder / 'requirements.txt'} (the Space would not build): {' '.join(said)}",
            "write the Space again without --package (the package's own wheel) or " + PACKAGE_FIX,
        )
