"""Acceptance: the published matching figures on the shared reference files, exactly."""

from __future__ import annotations

import pytest

from metashift_hf import wordnet_match
from metashift_hf.core.errors import InputFormatError, UnknownNameError
from metashift_hf.tasks.match_artifact import MatchInputs, run_match
from metashift_hf.wordnet_match.hierarchy import load_hierarchy
from metashift_hf.wordnet_match.match import match, match_name, read_subset_names, read_vocabulary


@pytest.fixture(scope="module")
def ref(shared_ref):
    return shared_ref / "metashift"


@pytest.fixture(scope="module")
def inputs(ref):
    return read_vocabulary(ref / "class_hierarchy.json"), read_subset_names(ref / "candidate-subset-names.txt")


@pytest.fixture(scope="module")
def paper(wn, ref, inputs):
    tree = load_hierarchy(f"tree:{ref / 'imagenet1k_node_names.json'}", wn)
    return tree, match(*inputs, tree, wn)


@pytest.fixture(scope="module")
def wordnet(wn, inputs):
    tree = load_hierarchy("wordnet", wn)
    return tree, match(*inputs, tree, wn)


def _figures(result):
    f = result.figures
    return (f["vocabulary_names"], f["matched_names"], f["subsets"], f["classes"], f["imagenet_leaves_covered"])


def test_inputs_read_as_published(inputs):
    vocabulary, subsets = inputs
    assert len(vocabulary) == 1262 and len(subsets) == 17938


def test_published_tree_figures_exactly(paper):
    _, result = paper
    assert _figures(result) == (1262, 427, 5040, 261, 867)
    # the 867 leaves include airplane, a leaf only because its child sits under "child  ren"
    assert result.figures["imagenet_classes_covered"] == 866


def test_wordnet_hierarchy_figures(wordnet):
    _, result = wordnet
    assert _figures(result) == (1262, 442, 5409, 270, 873)
    assert result.figures["imagenet_classes_covered"] == 873
    assert result.figures["hierarchy_nodes"] == 1859


def test_match_rows_explain_themselves(paper, wordnet, wn):
    tree, result = paper
    couch = result.row("couch")
    assert (couch.synset, couch.wnid) == ("sofa.n.01", "n04256520")
    assert "sense 1 of 3" in couch.reason and couch.imagenet_indices == (831,)
    ocean = result.row("ocean")
    assert not ocean.matched and "none of its 2 noun senses" in ocean.reason
    cat = result.row("cat")
    # published coverage rule: any noun sense counts, so big cats (cat's sense big_cat.n.01) are in
    assert 291 in cat.imagenet_indices and 291 not in cat.sense_indices  # lion
    airplane = result.row("airplane")
    assert airplane.matched and airplane.imagenet_indices == () and airplane.leaves == ("n02691156",)
    airliner = match_name("airliner", tree, wn)
    assert not airliner.matched and "'child  ren' of n02691156" in airliner.reason
    assert wordnet[1].row("airplane").imagenet_indices == (404,)  # the WordNet closure sees the airliner
    nothing = match_name("qwzxv", tree, wn)
    assert not nothing.matched and "no WordNet noun sense" in nothing.reason
    with pytest.raises(UnknownNameError, match="did you mean 'couch'"):
        result.row("couhc")


def test_selected_subsets_need_both_names_matched(paper):
    _, result = paper
    selected = {s.subset for s in result.selected()}
    assert {"cat(sofa)", "dog(car)", "horse(fence)"} <= selected
    assert "dog(frisbee)" not in selected  # frisbee has no ImageNet-1k node
    assert "ocean(dog)" not in selected  # ocean has no node
    assert all(result.row(s.subject).matched and result.row(s.context).matched for s in result.selected())
    assert len(result.subsets_of("cat")) == 69


def test_bad_input_files(tmp_path):
    names = tmp_path / "names.txt"
    names.write_text("cat(sofa)\ndog frisbee\n")
    with pytest.raises(InputFormatError, match=r"names.txt:2"):
        read_subset_names(names)
    vocab = tmp_path / "vocab.json"
    vocab.write_text('{"animal": "cat"}')
    with pytest.raises(InputFormatError, match="not a list"):
        read_vocabulary(vocab)
    vocab.write_text('["cat", 3]')
    with pytest.raises(InputFormatError, match="3 is not a name"):
        read_vocabulary(vocab)
    with pytest.raises(InputFormatError, match="does not exist"):
        read_vocabulary(tmp_path / "absent.txt")


def test_written_output_is_deterministic_and_loads_back(tmp_path, ref, wn, wordnet_cache):
    inputs = MatchInputs(
        hierarchy=f"tree:{ref / 'imagenet1k_node_names.json'}",
        subset_names=ref / "candidate-subset-names.txt",
        vocabulary=ref / "class_hierarchy.json",
        cache_dir=wordnet_cache,
    )
    first = run_match(inputs, out=tmp_path / "a")
    run_match(inputs, out=tmp_path / "b")
    for name in ("match.json", "match_table.parquet", "subsets.parquet", "classes.parquet", "tasks.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    loaded = wordnet_match.load_match(tmp_path / "a")
    assert _figures(loaded) == (1262, 427, 5040, 261, 867)
    assert loaded.table == first.table
    assert [s.subset for s in loaded.selected()] == [s.subset for s in first.selected()]
    assert loaded.tasks == first.tasks and len(first.tasks) > 4000
    assert wordnet_match.registry(tmp_path / "a")[0].task_id == first.tasks[0].task_id
