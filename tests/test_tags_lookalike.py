"""Issue 46 D9 and D14: look-alike tags (a no-break space or any other Unicode space but ' ') are refused as invisible
characters are; a class tag '..' or '../../pwn' is drawn under a safe file name, and the build says so."""

from __future__ import annotations

import json
import logging
import unicodedata
from pathlib import Path

import pytest

from metashift_hf.builders.plots import have_matplotlib, plot_name
from metashift_hf.builders.scene_graphs import read_scene_graphs
from metashift_hf.builders.tags import TagTable
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.names import control_char, file_stem, terminal_safe


def _rows(cat: str = "cat", prefix: str = "im") -> list[tuple[str, str]]:
    """``cat`` on 200 images with 8 contexts on about a third each, ``dog`` on 40."""
    return [
        (f"{prefix}{i:03d}", t)
        for i in range(240)
        for t in [cat if i < 200 else "dog"] + [f"c{j}" for j in range(8) if (i + j) % 3 == 0]
    ]


def _csv(path: Path, rows) -> Path:
    path.write_text("image_id,tag\n" + "".join(f"{a},{b}\n" for a, b in rows), encoding="utf-8")
    return path


ZS_BUT_SPACE = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Zs" and c != 0x20]


def test_every_unicode_space_but_the_ascii_one_is_refused_T09():
    """T-09: 'so fa' and 'so\\u00a0fa' were two subsets 'bed(so fa)' printed alike; the class: category Zs."""
    assert {0xA0, 0x2000, 0x200A, 0x202F, 0x205F, 0x3000} <= set(ZS_BUT_SPACE)
    missing = [hex(c) for c in ZS_BUT_SPACE if control_char(f"so{chr(c)}fa") != chr(c)]
    assert not missing
    assert control_char("so fa") is None
    assert terminal_safe("so\u00a0fa") == "so\\xa0fa"  # a listing never prints it as 'so fa'


@pytest.mark.parametrize("space", ["\u00a0", "\u2002", "\u202f", "\u3000"])
def test_a_tag_with_a_lookalike_space_is_refused_at_input_T09(space, tmp_path):
    rows = _rows() + [(f"im{i:03d}", f"so{space}fa") for i in range(30)] + [(f"im{i:03d}", "so fa") for i in range(40)]
    with pytest.raises(InputFormatError, match="space other than ' '") as err:
        TagTable.from_columns([a for a, _ in rows], [b for _, b in rows])
    assert terminal_safe(space) in err.value.what
    out = tmp_path / "art"
    assert main(["build", "--tags", str(_csv(tmp_path / "t.csv", rows)), "--out", str(out), "--no-plots", "-q"]) == 2
    assert not out.exists()


def test_a_scene_graph_name_with_a_lookalike_space_is_refused_T09(tmp_path):
    """The same class through the scene-graph input: an object name with a no-break space."""
    graphs = {
        "1": {"width": 10, "height": 10, "objects": {"o1": {"name": "so\u00a0fa", "x": 0, "y": 0, "w": 1, "h": 1,
                                                            "attributes": [], "relations": []}}},
    }  # fmt: skip
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(graphs), encoding="utf-8")
    with pytest.raises(InputFormatError, match="look-alike space"):
        read_scene_graphs([path])


def test_a_class_name_is_plotted_under_a_safe_file_name():
    """T-26/T-27's class: no hidden file, no path outside plots/, and two names never share a file."""
    for name in ["..", ".", "../../pwn", ".._.._pwn", "a/b", "a_b", "a\\b", "c:d", ".hidden"]:
        stem = file_stem(name)
        assert "/" not in stem and "\\" not in stem and not stem.startswith(".") and stem not in (".", "..")
    assert len({file_stem(n) for n in ["../../pwn", ".._.._pwn", "a/b", "a_b"]}) == 4
    for fine in ["cat", "living room", "t-shirt", "自転車", "é" * 50]:
        assert plot_name(fine) == f"{fine}.png"  # names that are file names stay as they are


@pytest.mark.skipif(not have_matplotlib(), reason="matplotlib (the plot extra) is not installed")
def test_dot_dot_class_tags_build_with_their_plots_and_a_word_T26_T27(tmp_path, caplog):
    """T-26 ('../../pwn') and T-27 ('..'): built with no plot for that class and no word."""
    rows = _rows("..") + _rows("../../pwn", prefix="jm")
    out = tmp_path / "work" / "art"
    with caplog.at_level(logging.WARNING):
        assert main(["build", "--tags", str(_csv(tmp_path / "t.csv", rows)), "--out", str(out)]) == 0
    pngs = sorted(p.name for p in (out / "plots").iterdir())
    assert plot_name("..") in pngs and plot_name("../../pwn") in pngs and "dog.png" in pngs
    assert not any(n.startswith(".") for n in pngs)
    said = caplog.text
    assert f"class '..' is no safe file name: its meta-graph is plots/{plot_name('..')}" in said
    assert f"plots/{plot_name('../../pwn')}" in said
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["art"]  # nothing written outside --out
