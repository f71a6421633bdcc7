"""Properties of the two output escapers (core/names.py): terminal_safe and markdown_safe (issue 29.4)."""

from __future__ import annotations

import html
import re

from hypothesis import given
from hypothesis import strategies as st

from metashift_hf.core.names import control_char, markdown_safe, terminal_safe


TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    [
        "a|b",
        "<script>x</script>",
        "[x](http://e.vil)",
        "\x1b]8;;http://e.vil\x07t\x1b]8;;\x07",
        "\x1b[31mred\nrow",
        "`*_~\\",
    ]
)


def _render(md: str) -> str:
    """What a Markdown renderer shows for markdown_safe's output: backslash escapes, then HTML entities."""
    return html.unescape(re.sub(r"\\(.)", r"\1", md, flags=re.S))


@given(TEXT)
def test_terminal_safe_leaves_no_control_and_is_idempotent(text):
    out = terminal_safe(text)
    assert control_char(out) is None and terminal_safe(out) == out


@given(TEXT)
def test_markdown_safe_has_no_control_no_live_markup_and_renders_back(text):
    out = markdown_safe(text)
    assert control_char(out) is None and "<" not in out and ">" not in out
    assert re.search(r"(?<!\\)(?:\\\\)*[`*_\[\]|~]", out) is None  # every markup character is escaped
    assert _render(out) == terminal_safe(text)  # round trip: the reader sees the name, control characters as escapes


HOSTILE_CLASSES = ["cat|<b>x</b>", "[dog](http://e.vil)"]
HOSTILE_CONTEXT = "sofa\x1b[31m|<img src=x>"


def test_report_md_shows_hostile_class_and_context_names_as_text(tmp_path):
    """A dataset's class and context names are data: evaluate's report.md escapes them where they are written
    (a '|' never splits a table row, no live HTML or link, no terminal escape) — issue 29.4."""
    import datasets
    import numpy as np

    from fixtures.tasks import sample_jpegs
    from metashift_hf.evaluate import EvalConfig, evaluate

    paths = sample_jpegs(tmp_path / "img", 6)
    labels = [i % 2 for i in range(len(paths))]
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "image_id": datasets.Value("string"),
            "label": datasets.ClassLabel(names=HOSTILE_CLASSES),
            "context": datasets.Value("string"),
            "contexts": datasets.List(datasets.Value("string")),
            "group": datasets.Value("string"),
            "community": datasets.Value("int64"),
        }
    )
    rows = {
        "image": [{"bytes": p.read_bytes(), "path": None} for p in paths],
        "image_id": [p.stem for p in paths],
        "label": labels,
        "context": [HOSTILE_CONTEXT] * len(paths),
        "contexts": [[HOSTILE_CONTEXT]] * len(paths),
        "group": [f"{HOSTILE_CLASSES[y]}({HOSTILE_CONTEXT})" for y in labels],
        "community": [0] * len(paths),
    }
    own = datasets.DatasetDict(
        {"test": datasets.Dataset.from_dict(rows, features=features)}
    )  # no shift spec: "custom"

    def model(images):
        return np.tile(np.arange(1000, dtype=np.float32), (len(images), 1))

    evaluate(
        model,
        own,
        tmp_path / "report",
        settings=EvalConfig(
            coverage={HOSTILE_CLASSES[0]: [999], HOSTILE_CLASSES[1]: [0]},
            min_subset_size=1,
            progress=False,
            plots=False,
        ),
    )
    md = (tmp_path / "report" / "report.md").read_text()
    assert "\x1b" not in md and "<b>" not in md and "<img" not in md
    assert not re.search(r"(?<!\\)\]\(", md)  # no live link
    assert markdown_safe(HOSTILE_CLASSES[0]) in md and markdown_safe(HOSTILE_CONTEXT) in md  # shown, as text
    tables: list[list[str]] = []
    for line, before in zip(md.splitlines(), [""] + md.splitlines()):
        if line.startswith("|"):
            (tables[-1].append(line) if before.startswith("|") else tables.append([line]))
    cells = lambda row: len(re.findall(r"(?<!\\)\|", row))  # noqa: E731 -- unescaped pipes split cells
    assert tables and all(cells(row) == cells(table[0]) for table in tables for row in table)
