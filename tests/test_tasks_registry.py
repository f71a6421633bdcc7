"""Binary/multiclass task definitions, the registry, and the `match` / `tasks` commands."""

from __future__ import annotations

import json

import pytest

from metashift_hf import wordnet_match
from metashift_hf.cli import main
from metashift_hf.wordnet_match.hierarchy import load_hierarchy
from metashift_hf.wordnet_match.match import match, read_subset_names, vocabulary_of
from metashift_hf.wordnet_match.tasks import binary_task_id, binary_tasks, multiclass_task


CONTEXTS = ["sofa", "bed", "chair", "table", "laptop", "car"]
SUBSETS = (
    [f"cat({c})" for c in CONTEXTS]
    + [f"dog({c})" for c in CONTEXTS]
    + [f"animal({c})" for c in CONTEXTS]  # animal.n.01 is above dog: never paired with it
    + [f"couch({c})" for c in CONTEXTS[1:]]
    + ["couch(cat)"]  # couch -> sofa.n.01, same node as sofa
    + [f"sofa({c})" for c in ["cat", "dog", "bed", "chair", "table"]]
    + [f"dining table({c})" for c in CONTEXTS[:5]]
    + [f"horse({c})" for c in CONTEXTS[:4]]  # only 4 subsets
    + ["ocean(dog)", "cat(ocean)"]  # ocean has no ImageNet node
)


@pytest.fixture(scope="module")
def small(tmp_path_factory, wn):
    folder = tmp_path_factory.mktemp("small")
    names = folder / "names.txt"
    names.write_text("\n".join(SUBSETS) + "\n")
    subsets = read_subset_names(names)
    tree = load_hierarchy("wordnet", wn)
    return names, tree, match(vocabulary_of(subsets), subsets, tree, wn)


def _ids(tasks):
    return [t.task_id for t in tasks]


def test_binary_definition(small, wn):
    _, tree, result = small
    tasks = binary_tasks(result, tree, wn)
    ids = _ids(tasks)
    assert ids == sorted(ids)
    assert "bin-cat-dog" in ids and "bin-dining_table-dog" in ids
    assert not any("animal" in i and "dog" in i for i in ids)  # nested: animal.n.01 is above dog.n.01
    assert "bin-couch-sofa" not in ids  # both name sofa.n.01
    assert not any("horse" in i for i in ids)  # 4 < 5 subsets
    assert "bin-cat-horse" in _ids(binary_tasks(result, tree, wn, min_subsets=4))
    # cat (organism) and sofa (artifact) meet at whole.n.02, depth 3: paired at level <= 3 only
    assert "bin-cat-sofa" in ids
    assert "bin-cat-sofa" not in _ids(binary_tasks(result, tree, wn, level=4))
    assert "bin-cat-dog" in _ids(binary_tasks(result, tree, wn, level=11))  # carnivore.n.01 at depth 11
    assert "bin-cat-dog" not in _ids(binary_tasks(result, tree, wn, level=12))
    cat_dog = next(t for t in tasks if t.task_id == "bin-cat-dog")
    assert (cat_dog.lca_name, cat_dog.lca_depth, cat_dog.n_subsets) == (
        "carnivore.n.01",
        11,
        (6, 6),
    )  # cat(ocean) not selected
    assert cat_dog.n_images is None  # names only: sizes unknown


def test_path_similarity_equals_nltk(small, wn):
    _, tree, result = small
    for task in binary_tasks(result, tree, wn, min_subsets=1, level=0):
        a, b = (wn.synset(s) for s in task.synsets)
        assert task.path_similarity == pytest.approx(a.path_similarity(b), abs=1e-6), task.task_id


def test_ids_are_stable_and_readable():
    assert binary_task_id("dog", "cat") == binary_task_id("cat", "dog") == "bin-cat-dog"
    assert binary_task_id("coffee table", "t-shirt") == "bin-coffee_table-t-shirt"


def test_multiclass_any_k_and_absent_classes(small, wn):
    _, tree, result = small
    task = multiclass_task(result, tree, wn, ["dog", "cat", "sofa"])
    assert task.task_id == "mc-cat-dog-sofa" and task.available and task.subset_rule == "kept"
    assert task.lca_name == "whole.n.02"
    absent = multiclass_task(result, tree, wn, ["cat", "zebra"], "pets")
    assert not absent.available and "zebra" in absent.reason and absent.task_id == "pets"
    ocean = multiclass_task(result, tree, wn, ["cat", "ocean"])
    assert ocean.available and "ocean" in ocean.reason  # present, but no ImageNet-1k node


def test_match_and_tasks_commands(small, tmp_path, capsys, monkeypatch, wordnet_cache):
    names, _, _ = small
    monkeypatch.setenv("METASHIFT_HF_CACHE", str(wordnet_cache))
    out = tmp_path / "m"
    assert main(["match", "--subset-names", str(names), "--hierarchy", "wordnet", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "names -> " in text and "binary tasks" in text and f"wrote {out}" in text
    figures = json.loads((out / "match.json").read_text())
    assert figures["classes"] == len(wordnet_match.load_match(out).classes())

    assert main(["tasks", "list", "--match", str(out), "--kind", "binary", "--class", "dog"]) == 0
    listed = capsys.readouterr().out
    assert "bin-cat-dog" in listed and "imagenet-5" not in listed and "bin-cat-sofa" not in listed

    assert main(["tasks", "list", "--match", str(out), "--kind", "multiclass"]) == 0
    listed = capsys.readouterr().out
    assert "imagenet-5" in listed and "unavailable:" in listed and "airplane" in listed

    assert main(["tasks", "show", "bin-cat-dog", "--match", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["task"]
    assert shown["classes"] == ["cat", "dog"] and shown["lca_name"] == "carnivore.n.01"
    assert main(["tasks", "show", "bin-cat-dog", "--match", str(out)]) == 0
    assert "lowest common ancestor carnivore.n.01" in capsys.readouterr().out

    assert main(["tasks", "show", "bin-dog-cat", "--match", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: no task 'bin-dog-cat'" in err and "bin-cat-dog" in err and "fix:" in err

    assert (
        main(["match", "--explain", "couch", "ocean(dog)", "--hierarchy", "wordnet", "--subset-names", str(names)])
        == 0
    )
    text = capsys.readouterr().out
    assert "sofa.n.01" in text and "ocean(dog): not selected" in text and "subject of 6 selected" in text

    assert main(["match", "--hierarchy", "wordnet"]) == 2
    assert "no input" in capsys.readouterr().err
    assert main(["match", "--subset-names", str(names), "--hierarchy", "wordnet"]) == 2
    assert "needs --out" in capsys.readouterr().err
    # a new folder: an --out holding the earlier match is refused before the hierarchy is looked at
    assert main(["match", "--subset-names", str(names), "--hierarchy", "bogus", "--out", str(tmp_path / "m2")]) == 2
    assert "unknown hierarchy" in capsys.readouterr().err
    assert main(["tasks", "list"]) == 2
