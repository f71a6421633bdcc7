"""Issue 42 part 3: orchestration is made of named steps. No library function is over 120 lines (from its ``def``
line to its last line, docstring included); a command's argparse declaration (``register`` in
``metashift_hf/commands/``) is a list of flags, not logic, and is left out."""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("metashift_hf", "builders", "wordnet_match", "cards")
MAX_LINES = 120


def long_functions(source: str, rel: str, limit: int = MAX_LINES) -> dict[str, int]:
    """``"rel:name" -> lines`` of every function or method of ``source`` longer than ``limit`` lines (nested ones
    too), argparse ``register`` functions of a command module aside."""
    out = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name == "register" and rel.startswith("metashift_hf/commands/"):
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > limit:
            out[f"{rel}:{node.name}"] = lines
    return out


def test_the_rule_sees_a_long_function():
    """The check can fail: a long function, method or nested function is named; a command's register is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    source = f"def long():\n{body}\n\nclass C:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    assert set(long_functions(source, "m.py")) == {"m.py:long", "m.py:m"}
    assert long_functions(source, "m.py")["m.py:long"] == MAX_LINES + 1
    assert long_functions(f"def register(subparsers):\n{body}\n", "metashift_hf/commands/x.py") == {}
    assert long_functions(f"def register(subparsers):\n{body}\n", "metashift_hf/space/x.py") != {}
    assert long_functions(f"def short():\n{body[: body.rindex(chr(10))]}\n", "m.py") == {}  # exactly 120 lines


def test_no_library_function_is_over_120_lines():
    found = {}
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            found.update(long_functions(path.read_text(encoding="utf-8"), rel))
    assert not found, f"over {MAX_LINES} lines (make each a short composition of named steps): {found}"
