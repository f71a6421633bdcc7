"""Issue 37, area B5: a tags table's ids and names, and ``build --tags`` on a full disk, a FIFO or a folder.

Review cases (../shared/reviews/hardening-round5-cases.tsv): N-G05 (zero-width space in a tag), N-G11 (a 300-character
tag), N-G18 (empty image_id cells), N-G39 (a huge --memory-limit), N-G42/N-G43/N-G44 (a FIFO, /dev/zero, a folder as
the tags file), N-G49/N-G50 (build --tags onto a full disk: DuckDB's error).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import unicodedata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metashift_hf.builders.tag_store import TagCandidates, check_memory_limit
from metashift_hf.builders.tags import MAX_TAG_BYTES, TagsFile, TagTable, read_tags_file
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError
from metashift_hf.core.names import CONTROL_RANGES, control_char, terminal_safe
from metashift_hf.core.options import OptionError, byte_size


def _rows(n: int = 240, cat: str = "cat") -> list[tuple[str, str]]:
    """``cat`` on 200 images with 8 contexts on about a third each (cat(c0..c7) have > 25 images), ``dog`` on 40."""
    return [
        (f"im{i:03d}", t)
        for i in range(n)
        for t in [cat if i < 200 else "dog"] + [f"c{j}" for j in range(8) if (i + j) % 3 == 0]
    ]


def _csv(path: Path, rows, header: str = "image_id,tag") -> Path:
    path.write_text(header + "\n" + "".join(f"{a},{b}\n" for a, b in rows), encoding="utf-8")
    return path


def _streamed(path: Path, tmp_path: Path) -> None:
    """The build's path: the file streamed into DuckDB (``TagCandidates`` over a ``TagsFile``)."""
    with TagCandidates(TagsFile(path)) as cands:
        cands.open(tmp_path / "spill")


# -- image ids --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad_id, match",
    [
        ("", "2 rows have an empty or blank image_id"),  # N-G18: '' is not null to pyarrow
        ("   ", "2 rows have an empty or blank image_id"),
        ("im\x1b[31m", "contains the invisible or control character \\\\x1b"),
        ("im\u200b", "contains the invisible or control character \\\\u200b"),
        ("im\u2066", "contains the invisible or control character \\\\u2066"),
    ],
)
def test_blank_and_invisible_image_ids_are_refused(bad_id, match, tmp_path):
    """N-G18: empty image_id cells became one fake image '' in 132 subsets (rc 0); blank and control/invisible ids
    likewise name no image. Refused in memory and streamed alike."""
    rows = _rows() + [(bad_id, "cat"), (bad_id, "c1")]
    with pytest.raises(InputFormatError, match=match):
        TagTable.from_columns([a for a, _ in rows], [b for _, b in rows])
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image_id": [a for a, _ in rows], "tag": [b for _, b in rows]}), path)
    with pytest.raises(InputFormatError, match=match):
        read_tags_file(path)
    with pytest.raises(InputFormatError, match=match):
        _streamed(path, tmp_path)


def test_empty_csv_id_cells_fail_the_build(tmp_path, capsys):
    """N-G18 end to end: ``build --tags`` on a CSV with empty image_id cells exits 2 naming the rows, writes nothing."""
    path = tmp_path / "t.csv"
    path.write_text(
        "image_id,tag\n" + "".join(f"{a},{b}\n" for a, b in _rows()) + ",cat\n,c1\n,c2\n", encoding="utf-8"
    )
    out = tmp_path / "art"
    assert main(["build", "--tags", str(path), "--out", str(out), "--no-plots", "--quiet"]) == 2
    assert "3 rows have an empty or blank image_id" in capsys.readouterr().err
    assert not out.exists()


# -- tag names --------------------------------------------------------------------------------------------------------
def test_a_zero_width_space_in_a_tag_is_refused(tmp_path):
    """N-G05: 'cat' and 'cat' + U+200B were two classes both printed as 'cat'."""
    rows = _rows() + [(f"im{i:03d}", "cat\u200b") for i in range(30)]
    with pytest.raises(InputFormatError, match="invisible or control character \\\\u200b"):
        TagTable.from_columns([a for a, _ in rows], [b for _, b in rows])
    with pytest.raises(InputFormatError, match="invisible or control character \\\\u200b"):
        _streamed(_csv(tmp_path / "t.csv", rows), tmp_path)
    assert terminal_safe("cat\u200b") == "cat\\u200b"  # and a listing never prints it as 'cat'


def test_every_format_character_is_refused():
    """N-G05's class: every Unicode format character (category Cf) of this Python's Unicode, the variation
    selectors, Hangul fillers and tag characters are in the one refused set (core/names.py CONTROL_RANGES)."""
    cf = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    missing = [hex(c) for c in cf if control_char(f"a{chr(c)}b") is None]
    assert not missing, f"format characters not refused (add them to CONTROL_RANGES): {missing[:20]}"
    for c in (0x034F, 0x115F, 0x3164, 0xFE0F, 0xFFA0, 0xE0041, 0xE0100, 0x00, 0x1B, 0x85, 0x2028):
        assert control_char(f"x{chr(c)}") == chr(c), hex(c)
    for fine in ("café", "t-shirt", "living room", "自転車", "Ærø"):
        assert control_char(fine) is None
    assert all(a <= b for a, b in CONTROL_RANGES)


@pytest.mark.parametrize("length", [300, 100_000])
def test_a_tag_longer_than_the_bound_is_refused(length, tmp_path):
    """N-G11: a 300-character tag was an OSError (file name too long) when plots were written; a 100,000-character
    tag made a 100,006-character task id. Refused when the tags are read, in memory and streamed."""
    rows = _rows(cat="x" * length)
    with pytest.raises(InputFormatError, match=f"is {length} bytes long in UTF-8, more than {MAX_TAG_BYTES}"):
        TagTable.from_columns([a for a, _ in rows], [b for _, b in rows])
    with pytest.raises(InputFormatError, match="bytes long in UTF-8") as err:
        _streamed(_csv(tmp_path / "t.csv", rows), tmp_path)
    assert len(err.value.what) < 400  # the message quotes the start of the tag, not all of it


def test_a_tag_at_the_bound_builds_with_plots(tmp_path):
    """N-G11: a tag of MAX_TAG_BYTES (2-byte letters: half as many) is a class whose plot file name and ids fit."""
    tag = "é" * (MAX_TAG_BYTES // 2)
    out = tmp_path / "art"
    assert main(["build", "--tags", str(_csv(tmp_path / "t.csv", _rows(cat=tag))), "--out", str(out), "--quiet"]) == 0
    assert any(p.name.startswith("éé") for p in out.rglob("*.png"))
    with pytest.raises(InputFormatError, match="bytes long"):
        TagTable.from_columns(["1"], ["é" * (MAX_TAG_BYTES // 2 + 1)])


# -- the tags file itself ---------------------------------------------------------------------------------------------
def test_a_fifo_a_device_and_a_folder_are_named_as_such(tmp_path):
    """N-G42/N-G43/N-G44: a FIFO, /dev/zero and a folder were each 'does not exist' (a FIFO is never opened: it would
    block until written to)."""
    fifo = tmp_path / "tags.csv"
    os.mkfifo(fifo)
    cases = [(fifo, "is a FIFO"), (tmp_path, "is a folder"), (tmp_path / "none.csv", "does not exist")]
    if Path("/dev/zero").exists():
        cases.append((Path("/dev/zero"), "is a device"))
    for path, what in cases:
        with pytest.raises(InputFormatError, match=what):
            TagsFile(path)
    link = tmp_path / "link.csv"
    link.symlink_to(_csv(tmp_path / "real.csv", _rows()))
    assert TagsFile(link).has_category is False  # a link to a regular file is read


# -- --memory-limit ---------------------------------------------------------------------------------------------------
def test_a_huge_memory_limit_is_not_called_too_small(capsys, tmp_path):
    """N-G39: --memory-limit 99999999999999999999TB was 'must be at least 64 MiB'."""
    for value in ("99999999999999999999TB", "9" * 400, 2**64):
        with pytest.raises(OptionError, match="too large") as err:
            byte_size(value, "memory_limit")
        assert "at least" not in err.value.what
    with pytest.raises(OptionError, match="at least 64 MiB"):
        byte_size("1MB", "memory_limit")
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with pytest.raises(OptionError, match="more than this machine's memory"):
        check_memory_limit(physical + 2**30)
    assert check_memory_limit("64MiB") == 64 << 20
    path = _csv(tmp_path / "t.csv", _rows())
    args = ["build", "--tags", str(path), "--out", str(tmp_path / "a"), "--no-plots", "--quiet", "--memory-limit"]
    with pytest.raises(SystemExit) as exit_:  # refused by the option's argparse type
        main([*args, "99999999999999999999TB"])
    assert exit_.value.code == 2 and "too large" in capsys.readouterr().err
    assert main([*args, f"{physical + 2**30}"]) == 2
    assert "more than this machine's memory" in capsys.readouterr().err


# -- a full disk ------------------------------------------------------------------------------------------------------
def _file_size_limit(limit: int):
    def apply() -> None:  # in the child: writes past `limit` bytes fail with EFBIG instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs RLIMIT_FSIZE")
def test_duckdb_failing_to_write_gets_the_write_error(tmp_path):
    """N-G49/N-G50: ``build --tags`` where DuckDB's database cannot grow (a full disk; here a file-size limit, which
    fails writes with EFBIG the same way) was a _duckdb.FatalException traceback. Now one error/fix line, exit 2,
    and no output or temporary folder left."""
    path = _csv(tmp_path / "t.csv", _rows())
    out = tmp_path / "out" / "art"
    out.parent.mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "metashift_hf", "build", "--tags", str(path), "--out", str(out), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_file_size_limit(120_000),
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and "Exception" not in res.stderr
    assert "cannot write" in res.stderr and "File too large" in res.stderr and "DuckDB database" in res.stderr
    assert "fix: free space or choose a writable location" in res.stderr
    assert list(out.parent.iterdir()) == []
