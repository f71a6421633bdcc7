"""Properties of the two output escapers (core/names.py): terminal_safe and markdown_safe (issue 29.4)."""
from __future__ import annotations

import html
import re

from hypothesis import given
from hypothesis import strategies as st

from metashift_hf.core.names import control_char, markdown_safe, terminal_safe


TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["a|b", "<script>x</script>", "[x](http://e.vil)", "\x1b]8;;http://e.vil\x07t\x1b]8;;\x07", "\x1b[31mred\nrow", "`*_~\\"])


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
