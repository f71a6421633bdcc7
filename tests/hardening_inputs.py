"""Hostile and clumsy inputs for the tests/test_hardening_*.py files, generated small and fast."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from metashift_hf import cli
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.provenance import SourceInfo


def small_subsets() -> dict[str, set[str]]:
    """Two classes with enough subsets to survive the default rules (seeded)."""
    rng = np.random.default_rng(3)
    d: dict[str, set[str]] = {}
    for subject in ("cat", "dog"):
        pool = [f"{subject}-{i}" for i in range(150)]
        for k in range(6):
            d[f"{subject}(ctx{k})"] = set(rng.choice(pool, 40, replace=False).tolist())
    return d


def write_candidate_pickle(path: Path) -> Path:
    path.write_bytes(pickle.dumps(small_subsets(), protocol=4))
    return path


def tiny_artifact(out: Path):
    """A real artifact folder (no plots) in well under a second: user data (source custom) whose
    builder gave a licence, so publish takes it (tests/test_hardening_provenance.py: without one)."""
    subsets = {k: sorted(v) for k, v in small_subsets().items()}
    return build_artifact(
        CandidateSubsets.from_dict(subsets),
        out,
        BuildOptions(),
        plots=False,
        source_info=SourceInfo(license="cc-by-4.0"),
    )


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the command line in-process; return (exit status, stdout, stderr)."""
    code = cli.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    """Exit 2 with `error:` and `fix:` lines, no traceback, mentioning each needle."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[-2].startswith("error: ") and lines[-1].startswith("  fix: "), err
    for needle in needles:
        assert needle in err, (needle, err)


def run_cli_bounded(*argv, timeout: float = 60, cwd=None):
    """Run the command line in a child process that is killed after ``timeout`` seconds.

    For inputs that made earlier versions hang or exhaust memory: the test then fails instead of
    hanging the suite. Returns the CompletedProcess (``returncode`` -9 / None when killed).
    """
    import subprocess
    import sys

    try:
        return subprocess.run(
            [sys.executable, "-m", "metashift_hf", *map(str, argv)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"metashift-hf {' '.join(map(str, argv))} ran past {timeout} s") from exc
