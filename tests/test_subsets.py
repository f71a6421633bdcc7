"""Subset names, ontologies, CandidateSubsets and the two rules (incl. the shared 66/679 figure)."""

from __future__ import annotations

import pytest

from metashift_hf.builders.pickles import load_candidate_pickle
from metashift_hf.builders.subsets import (
    ATTRIBUTE_CATEGORY,
    ATTRIBUTE_CONTEXT_ONTOLOGY,
    GENERAL_CONTEXT_ONTOLOGY,
    CandidateSubsets,
    apply_rules,
    parse_subset_name,
    published_kind,
)
from metashift_hf.core.errors import InputFormatError, UnknownNameError


def test_parse_names_with_spaces():
    assert parse_subset_name("dog(frisbee)") == ("dog", "frisbee")
    assert parse_subset_name("light switch(wall)") == ("light switch", "wall")
    assert parse_subset_name("guy(eye glasses)") == ("guy", "eye glasses")


@pytest.mark.parametrize(
    "bad", ["dog", "dog()", "(dog)", "dog(a(b))", "dog(cat", " dog(cat)", "dog( cat)", "dog(cat)x", 3]
)
def test_malformed_names_raise(bad):
    with pytest.raises(InputFormatError) as e:
        parse_subset_name(bad)
    assert repr(bad) in e.value.what and "subject(context)" in e.value.fix


def test_all_published_names_parse(shared_ref):
    names = (shared_ref / "metashift" / "candidate-subset-names.txt").read_text(encoding="utf-8").splitlines()
    assert len(names) == 17938
    parsed = [parse_subset_name(n) for n in names]  # raises on the first malformed one
    assert sum(1 for s, _ in parsed if " " in s) > 0
    # published convention: scene words as subjects ('ocean(dog)'), never as contexts except grass
    scene = set(GENERAL_CONTEXT_ONTOLOGY["place"] + GENERAL_CONTEXT_ONTOLOGY["room"])
    assert {c for _, c in parsed if c in scene} == {"grass"}
    assert published_kind("ocean(dog)") == ("general", "place")
    assert published_kind("dog(grass)") == ("object", None)


def test_ontology_sizes_and_ambiguous_words(shared_ref):
    import json

    ont = json.loads((shared_ref / "metashift" / "ontology.json").read_text())
    assert {k: list(v) for k, v in GENERAL_CONTEXT_ONTOLOGY.items()} == ont["general_context_ontology"]
    assert {k: list(v) for k, v in ATTRIBUTE_CONTEXT_ONTOLOGY.items()} == ont["attribute_context_ontology"]
    assert len(ATTRIBUTE_CONTEXT_ONTOLOGY) == 27
    assert sum(len(v) for v in GENERAL_CONTEXT_ONTOLOGY.values()) == 37
    assert ATTRIBUTE_CATEGORY["dark"] == "color" and ATTRIBUTE_CATEGORY["short"] == "length"


def test_from_dict_and_access():
    c = CandidateSubsets.from_dict({"dog(sofa)": ["3", "1", "1"], "cat(sofa)": ["2"], "dog(bed)": []})
    assert c.names == ["cat(sofa)", "dog(bed)", "dog(sofa)"]
    assert c.image_ids == ["1", "2", "3"]
    assert c.images("dog(sofa)") == frozenset({"1", "3"})
    assert c.sizes().tolist() == [1, 0, 2]
    assert c.kinds == ["object"] * 3 and c.subjects == ["cat", "dog", "dog"]
    with pytest.raises(UnknownNameError, match="did you mean"):
        c.members("dog(sofaa)")
    with pytest.raises(InputFormatError):
        CandidateSubsets.from_dict({"dog(sofa)": ["1"]}, kind="colour")


def test_combine_unions_collisions_and_keeps_first_kind():
    a = CandidateSubsets.from_dict({"table(glass)": ["1", "2"], "dog(ball)": ["5"]})
    b = CandidateSubsets.from_dict({"table(glass)": ["2", "3"], "dog(white)": ["4"]}, kind="attribute")
    c = CandidateSubsets.combine([a, b])
    assert c.names == ["dog(ball)", "dog(white)", "table(glass)"]
    assert c.images("table(glass)") == frozenset({"1", "2", "3"})
    assert c.kinds == ["object", "attribute", "object"] and c.collisions == 1


def _grid(n_subsets: dict[str, int], size: int) -> CandidateSubsets:
    d = {}
    for subject, k in n_subsets.items():
        for j in range(k):
            d[f"{subject}(c{j})"] = [f"{subject}-{j}-{i}" for i in range(size)]
    return CandidateSubsets.from_dict(d)


def test_rules_boundaries():
    # exactly 25 images is kept; a class needs MORE than 5 kept subsets
    c = _grid({"five": 5, "six": 6}, 25)
    r = apply_rules(c)
    assert r.classes == ["six"] and int(r.kept.sum()) == 6 and int(r.big_enough.sum()) == 11
    small = _grid({"six": 6}, 24)
    assert apply_rules(small).classes == []
    assert apply_rules(small, min_images_per_subset=24).classes == ["six"]
    assert apply_rules(c, min_subsets_per_class=4).classes == ["five", "six"]


def test_shared_attribute_pickle_rules(shared_ref):
    c = load_candidate_pickle(shared_ref / "metashift" / "attributes-candidate-subsets.pkl", attributes=True)
    assert len(c) == 4962 and len(c.image_ids) == 59663
    r = apply_rules(c, 25, 5)
    assert len(r.classes) == 66
    assert int(r.kept.sum()) == 679
    assert set(c.kinds) == {"attribute"}
    assert c.categories[c.names.index("horse(white)")] == "color"
    assert "2375429" in c.images("horse(white)")
