"""Build inputs are one registry (issue 34 part 4): one class per source, the command's flags read by each
entry, and no builders/cards/wordnet_match function with 10 or more parameters."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from metashift_hf.builders import build_inputs as bi
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.core.errors import InputFormatError, UnknownNameError
from metashift_hf.wordnet_match.hierarchy import HIERARCHIES, load_hierarchy


ROOT = Path(__file__).resolve().parents[1]


def _flags(**given) -> argparse.Namespace:
    base = dict(
        scene_graphs=[],
        candidate_subsets=None,
        attributes_pickle=None,
        coco_annotations=[],
        tags=None,
        hf_dataset=None,
        tag_column=None,
        id_column=None,
        image_column=None,
        hf_split="train",
    )
    return argparse.Namespace(**{**base, **given})


def test_one_entry_per_source_in_order():
    assert bi.BUILD_INPUTS.names() == ("scene-graphs", "published-pickles", "coco", "tags", "hf-dataset")
    for cls in bi.BUILD_INPUTS.values():
        assert issubclass(cls, bi.BuildInput) and cls.flags.startswith("--")


def test_flags_name_exactly_one_input():
    assert bi.input_from_flags(_flags(scene_graphs=["a.json", "b.json"])) == bi.SceneGraphs(("a.json", "b.json"))
    assert bi.input_from_flags(_flags(attributes_pickle="x.pkl")) == bi.PublishedPickles(None, "x.pkl")
    assert bi.input_from_flags(_flags(coco_annotations=["c.json"])).paths() == ["c.json"]
    assert bi.input_from_flags(_flags(tags="t.csv")) == bi.TagsTable("t.csv")
    hub = bi.input_from_flags(_flags(hf_dataset="org/ds", tag_column="labels"))
    assert isinstance(hub, bi.HubMultiLabel) and hub.dataset.tag_column == "labels" and hub.paths() == []
    with pytest.raises(InputFormatError, match="no input given"):
        bi.input_from_flags(_flags())
    with pytest.raises(InputFormatError, match=r"2 sources given \(--scene-graphs, --tags\)"):
        bi.input_from_flags(_flags(scene_graphs=["a.json"], tags="t.csv"))
    with pytest.raises(InputFormatError, match="needs --tag-column"):
        bi.input_from_flags(_flags(hf_dataset="org/ds"))
    with pytest.raises(InputFormatError, match="apply to --hf-dataset only"):
        bi.input_from_flags(_flags(tags="t.csv", tag_column="labels"))


def test_build_refuses_what_is_not_a_build_input(tmp_path):
    with pytest.raises(InputFormatError, match="not a build input"):
        build_from_inputs(tmp_path / "a", ["scene_graphs.json"])
    assert not (tmp_path / "a").exists()


def test_hierarchies_are_one_registry():
    assert HIERARCHIES.names() == ("wordnet", "paper", "tree")
    for bad in ("imagenet", "tree:", "wordnet:x", "paper:y"):
        with pytest.raises(UnknownNameError, match="unknown hierarchy"):
            load_hierarchy(bad, None)


def _parameters(fn: ast.FunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len(names) - (names[:1] in (["self"], ["cls"]))


def test_no_function_of_the_builders_room_takes_ten_parameters():
    long = []
    for folder in ("builders", "cards", "wordnet_match", "metashift_hf/sources"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _parameters(node) >= 10:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} ({_parameters(node)})")
    assert long == []


def test_no_module_of_the_builders_room_over_800_lines():
    big = [
        f"{p.relative_to(ROOT)} ({n})"
        for folder in ("builders", "cards", "wordnet_match", "metashift_hf/sources")
        for p in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > 800
    ]
    assert big == []
