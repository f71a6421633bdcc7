"""Hardening, round 3 (issue 22 part 5): terminal-safe listings.

Names come from the data. ``classes``, ``subsets``, ``tasks`` and ``distance`` print them with every
control character escaped (core.names.terminal_safe), so a name can neither recolour the terminal,
move the cursor, reorder text nor split a line; ``build --tags`` refuses such tags, as export does.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hardening_inputs import assert_one_line_error, run_cli

from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core.names import control_char, terminal_safe


EVIL = "cat\x1b[31m"  # an escape sequence that turns the terminal red
CONTEXTS = ["sofa\nFAKE LINE", "r\rug", "bed\u202etxt.exe", "tv\x07", "floor", "lamp"]  # newline, CR, bidi, bell
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what must never reach the terminal


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """An artifact (from an older build or a pickle) whose class and context names hold control characters."""
    rng = np.random.default_rng(5)
    pool = [f"i{k}" for k in range(150)]
    subsets = {
        f"{s}({c})": sorted(rng.choice(pool, 40, replace=False).tolist()) for s in (EVIL, "dog") for c in CONTEXTS
    }
    return build_artifact(
        CandidateSubsets.from_dict(subsets), tmp_path_factory.mktemp("h") / "art", BuildOptions(), plots=False
    ).root


def _clean(stdout: str) -> None:
    assert RAW.search(stdout) is None, repr(stdout[:400])
    assert "FAKE LINE" not in stdout.replace("\\x0aFAKE LINE", "")  # the newline in a name never starts a line


def test_terminal_safe_escapes_controls_only():
    assert terminal_safe("a\x1b[31mb\nc\u202ed\u00e9 e") == "a\\x1b[31mb\\x0ac\\u202ed\u00e9 e"
    assert terminal_safe(3) == "3" and control_char("plain name (ok)") is None and control_char("x\ty") == "\t"


@pytest.mark.parametrize("argv", [["classes"], ["subsets"], ["subsets", "--all"], ["tasks", "list"]])
def test_listings_escape_control_characters(hostile, capsys, argv):
    code, stdout, err = run_cli(capsys, *argv, "--artifact", hostile)
    assert code == 0, err
    _clean(stdout)
    assert "cat\\x1b[31m" in stdout
    if argv[0] == "subsets":
        assert "sofa\\x0aFAKE LINE" in stdout and "bed\\u202etxt.exe" in stdout and "tv\\x07" in stdout


def test_tasks_show_escapes_control_characters(hostile, capsys):
    code, stdout, err = run_cli(capsys, "tasks", "show", "class-cat_31m", "--artifact", hostile)
    assert code == 0, err
    _clean(stdout)
    assert "cat\\x1b[31m" in stdout


def test_distance_escapes_names_on_the_terminal_and_keeps_them_in_the_file(hostile, tmp_path, capsys):
    a, b = f"{EVIL}(floor)", f"{EVIL}(sofa\nFAKE LINE)"
    for extra in ([], ["--value"]):
        code, stdout, err = run_cli(capsys, "distance", "--artifact", hostile, a, b, *extra)
        assert code == 0, err
        _clean(stdout)
    code, stdout, err = run_cli(capsys, "distance", "--artifact", hostile, "--class", EVIL, "--matrix")
    assert code == 0, err
    _clean(stdout)
    assert "cat\\x1b[31m(sofa\\x0aFAKE LINE)" in stdout
    out = tmp_path / "m.csv"
    code, stdout, err = run_cli(capsys, "distance", "--artifact", hostile, "--class", EVIL, "--matrix", "--out", out)
    assert code == 0, err
    _clean(stdout)
    assert EVIL in out.read_text()  # the file is data: names exactly as they are


@pytest.mark.parametrize("tag", ["cat\x1b[31m", "ca\u202et", "do\x07g", "so\nfa"])
def test_build_tags_refuses_control_characters(tmp_path, capsys, tag):
    csv = tmp_path / "tags.csv"
    quoted = '"' + tag + '"'
    csv.write_text("image_id,tag\n" + "".join(f"im{i},{quoted if i % 2 else 'dog'}\nim{i},sofa\n" for i in range(30)))
    code, _, err = run_cli(capsys, "build", "--tags", csv, "--out", tmp_path / "art")
    assert_one_line_error(code, err, "control character")
    assert RAW.search(err) is None and not (tmp_path / "art").exists()
