"""Streaming scene-graph reader, validation errors, and candidate subsets from scene graphs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from metashift_hf.builders.scene_graphs import iter_scene_graphs, read_scene_graphs
from metashift_hf.builders.subsets import ATTRIBUTE_CATEGORY, SCENE_WORDS, candidates_from_scene_graphs
from metashift_hf.core.errors import InputFormatError


def obj(name, rels=(), attrs=()):
    return {
        "name": name,
        "x": 0,
        "y": 0,
        "w": 1,
        "h": 1,
        "attributes": list(attrs),
        "relations": [{"name": "near", "object": t} for t in rels],
    }


HAND = {
    "1": {
        "width": 10,
        "height": 8,
        "location": "indoors",
        "objects": {"a": obj("dog", ["b"], ["white", "dark", "fluffy"]), "b": obj("sofa"), "c": obj("cat")},
    },
    "2": {
        "width": 10,
        "height": 8,
        "weather": "sunny",
        "objects": {"a": obj("dog", ["o", "g"]), "o": obj("ocean", ["k"]), "g": obj("grass"), "k": obj("boat")},
    },
    "n3": {
        "width": 10,
        "height": 8,
        "objects": {"m1": obj("man", ["m2"], ["short"]), "m2": obj("man"), "t": obj("tree")},
    },
    "4": {"width": 10, "height": 8, "location": "somewhere", "objects": {"x": obj("man"), "y": obj("tree", ["x"])}},
}


def write(path: Path, data, indent=None) -> Path:
    path.write_text(json.dumps(data, indent=indent, ensure_ascii=False), encoding="utf-8")
    return path


def as_dict(c) -> dict[str, tuple[str, frozenset]]:
    return {n: (k, c.images(n)) for n, k in zip(c.names, c.kinds)}


# ---------------------------------------------------------------------------------------------- reader
@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 22])
@pytest.mark.parametrize("indent", [None, 2])
def test_reader_matches_json_load_across_chunk_boundaries(tmp_path, monkeypatch, chunk, indent):
    data = dict(HAND)
    data["ü-5"] = {"width": 3, "height": 4, "objects": {"z": obj("café table", [], ["naïve"])}}  # multi-byte
    path = write(tmp_path / "sg.json", data, indent)
    got = list(iter_scene_graphs(path, chunk=chunk))
    assert got == list(data.items())


def test_reader_is_lazy(tmp_path):
    # the first image is yielded before the damaged tail is read: one image at a time, not json.load
    path = tmp_path / "sg.json"
    path.write_text('{"1": {"width": 1, "height": 1, "objects": {}}, "2": {"width": [}', encoding="utf-8")
    it = iter_scene_graphs(path)
    assert next(it)[0] == "1"
    with pytest.raises(InputFormatError) as e:
        next(it)
    assert str(path) in e.value.what and "image '2'" in e.value.what
    assert "byte 64" in e.value.what  # offset of the stray '}' (a value was expected there)


def test_malformed_json_reports_byte_offset(tmp_path):
    good = json.dumps(HAND)
    path = tmp_path / "trunc.json"
    path.write_text(good[:-40], encoding="utf-8")
    with pytest.raises(InputFormatError) as e:
        list(iter_scene_graphs(path, chunk=16))
    assert str(path) in e.value.what and "malformed JSON at byte" in e.value.what and "image 'n3'" not in e.value.what
    assert "re-download" in e.value.fix
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"width": 1, "height": 1, "objects": {}} "2": {}}', encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"byte 47.*expected ','"):
        list(iter_scene_graphs(bad))
    extra = tmp_path / "extra.json"
    extra.write_text('{"1": {"width": 1, "height": 1, "objects": {}}} x', encoding="utf-8")
    with pytest.raises(InputFormatError, match="extra data"):
        list(iter_scene_graphs(extra))
    notobj = tmp_path / "list.json"
    notobj.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(InputFormatError, match="byte 0"):
        list(iter_scene_graphs(notobj))
    with pytest.raises(InputFormatError, match="does not exist"):
        list(iter_scene_graphs(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda d: d["1"]["objects"]["a"]["relations"].append({"name": "on", "object": "zz"}),
            "image '1': object 'a' has relation 'on' pointing to object 'zz', which is not in this image's objects",
        ),
        (lambda d: d["2"]["objects"]["g"].pop("name"), "image '2': object 'g' has no 'name'"),
        (lambda d: d["2"]["objects"]["g"].pop("relations"), "image '2': object 'g' has no 'relations'"),
        (lambda d: d["2"]["objects"]["g"].__setitem__("attributes", "green"), "object 'g' 'attributes' is a str"),
        (lambda d: d["1"].pop("objects"), "image '1': missing key 'objects'"),
        (lambda d: d["1"].pop("width"), "image '1': missing key 'width'"),
        (lambda d: d["1"].__setitem__("height", -3), "'height' is -3"),
        (lambda d: d["1"]["objects"]["b"].__setitem__("name", "so(fa)"), "cannot be part of a subset name"),
        (lambda d: d["1"]["objects"]["b"].__setitem__("name", ["sofa"]), "'name' is ['sofa']"),
        (lambda d: d["1"].__setitem__("location", {"x": 1}), "'location' is {'x': 1}"),
        (lambda d: d["1"]["objects"]["a"]["attributes"].append({"x": 1}), "has attribute {'x': 1}, expected a string"),
        (lambda d: d["1"]["objects"].__setitem__("b", [1]), "object 'b' is a list"),
        (lambda d: d.__setitem__("9", [1]), "image '9': scene graph is a list"),
    ],
)
def test_validation_errors_name_file_image_and_key(tmp_path, mutate, message):
    data = json.loads(json.dumps(HAND))
    mutate(data)
    path = write(tmp_path / "sg.json", data)
    with pytest.raises(InputFormatError) as e:
        read_scene_graphs([path])
    assert str(path) in e.value.what and message in e.value.what
    assert e.value.fix


def test_duplicate_image_across_files(tmp_path):
    a = write(tmp_path / "a.json", {"1": HAND["1"]})
    b = write(tmp_path / "b.json", {"1": HAND["1"]})
    with pytest.raises(InputFormatError, match=r"image '1' appears twice: in .*a.json and .*b.json"):
        read_scene_graphs([a, b])


def test_extraction_and_image_metadata(tmp_path):
    path = write(tmp_path / "sg.json", HAND)
    sg = read_scene_graphs([path])
    assert sg.image_ids == ["1", "2", "n3", "4"]
    assert sg.obj_counts.tolist() == [3, 4, 3, 2] and sg.rel_counts.tolist() == [1, 3, 1, 1]
    assert [sg.vocab[c] for c in sg.obj_names[:3]] == ["dog", "sofa", "cat"]
    # only ontology attributes are kept ('fluffy' is not in the 27 categories)
    assert [(sg.vocab[o], sg.vocab[w]) for o, w in zip(sg.attr_objects, sg.attr_words)] == [
        ("dog", "white"),
        ("dog", "dark"),
        ("man", "short"),
    ]
    meta = sg.meta.to_pylist()
    assert meta[0]["location"] == "indoors" and meta[1]["weather"] == "sunny"
    assert json.loads(meta[1]["objects"]) == HAND["2"]["objects"]
    import hashlib

    assert sg.sha256 == [hashlib.sha256(path.read_bytes()).hexdigest()]


# ---------------------------------------------------------------------------------------------- subsets
def test_relation_pairing_and_conventions(tmp_path):
    sg = read_scene_graphs([write(tmp_path / "sg.json", HAND)])
    got = as_dict(candidates_from_scene_graphs(sg, kinds=("object", "general", "attribute")))
    assert got["dog(sofa)"] == ("object", frozenset({"1"}))
    assert "sofa(dog)" not in got and "dog(cat)" not in got  # relation pairing is one-directional
    assert "dog(ocean)" not in got  # place words are general contexts, written first
    assert got["ocean(dog)"] == ("general", frozenset({"2"}))
    assert got["ocean(boat)"][0] == "general"  # relation ocean->boat and general co-occurrence: one subset
    assert got["dog(grass)"] == ("object", frozenset({"2"}))  # grass is also an object context
    assert got["grass(dog)"] == ("general", frozenset({"2"}))
    assert got["indoors(dog)"] == ("general", frozenset({"1"})) and got["indoors(cat)"][0] == "general"
    assert got["sunny(boat)"] == ("general", frozenset({"2"}))
    assert not any(n.startswith("somewhere(") for n in got)  # only ontology location/weather values
    assert got["man(man)"] == ("object", frozenset({"n3"}))
    assert got["tree(man)"] == ("object", frozenset({"4"}))
    assert got["dog(white)"] == ("attribute", frozenset({"1"})) and got["dog(dark)"][0] == "attribute"
    assert "dog(fluffy)" not in got and got["man(short)"] == ("attribute", frozenset({"n3"}))


def test_kinds_categories_and_context_option(tmp_path):
    sg = read_scene_graphs([write(tmp_path / "sg.json", HAND)])
    c = candidates_from_scene_graphs(sg, general_context_as="context", kinds=("object", "general", "attribute"))
    got = as_dict(c)
    assert got["dog(ocean)"] == ("general", frozenset({"2"})) and got["dog(indoors)"] == ("general", frozenset({"1"}))
    assert "ocean(dog)" not in got and "indoors(dog)" not in got
    cat = dict(zip(c.names, c.categories))
    assert cat["dog(ocean)"] == "place" and cat["dog(indoors)"] == "location" and cat["boat(sunny)"] == "weather"
    assert cat["dog(dark)"] == "color" and cat["man(short)"] == "length" and cat["dog(sofa)"] is None
    only_obj = candidates_from_scene_graphs(sg, kinds=("object",))
    assert set(only_obj.kinds) == {"object"} and "dog(sofa)" in only_obj


def test_cooccurrence_pairing(tmp_path):
    sg = read_scene_graphs([write(tmp_path / "sg.json", HAND)])
    got = as_dict(candidates_from_scene_graphs(sg, pairing="cooccurrence"))
    assert got["dog(sofa)"] == got["sofa(dog)"] == got["dog(cat)"] == ("object", frozenset({"1"}))
    assert got["man(man)"] == ("object", frozenset({"n3"}))  # two men in n3
    assert "tree(tree)" not in got  # one tree only
    assert "man(tree)" in got and got["man(tree)"][1] == frozenset({"n3", "4"})


def naive(data: dict, pairing: str, as_: str, kinds) -> dict[str, tuple[str, frozenset]]:
    """Direct dict-of-sets reference of the documented rules (small inputs only)."""
    from metashift_hf.builders.subsets import GENERAL_CATEGORY, SCENE_WORDS_ALSO_OBJECT_CONTEXTS

    out: dict[str, dict[str, set]] = {k: {} for k in ("general", "object", "attribute")}

    def add(kind, s, c, img):
        out[kind].setdefault(f"{s}({c})", set()).add(img)

    def gen(word, name, img):
        add("general", *((word, name) if as_ == "subject" else (name, word)), img)

    for img, rec in data.items():
        objs = rec["objects"]
        names = [o["name"] for o in objs.values()]
        uniq = sorted(set(names))
        drop = lambda c: c in SCENE_WORDS and c not in SCENE_WORDS_ALSO_OBJECT_CONTEXTS  # noqa: E731
        if "object" in kinds:
            if pairing == "relation":
                for o in objs.values():
                    for r in o["relations"]:
                        c = objs[r["object"]]["name"]
                        if not drop(c):
                            add("object", o["name"], c, img)
            else:
                for s in uniq:
                    for c in uniq:
                        if (s != c or names.count(s) > 1) and not drop(c):
                            add("object", s, c, img)
        if "general" in kinds:
            for field in ("location", "weather"):
                w = rec.get(field)
                if w is not None and GENERAL_CATEGORY.get(w) == field:
                    for n in uniq:
                        gen(w, n, img)
            for w in uniq:
                if w in SCENE_WORDS:
                    for n in uniq:
                        if n != w:
                            gen(w, n, img)
        if "attribute" in kinds:
            for o in objs.values():
                for a in o["attributes"]:
                    if a in ATTRIBUTE_CATEGORY:
                        add("attribute", o["name"], a, img)
    merged: dict[str, tuple[str, frozenset]] = {}
    for kind in ("general", "object", "attribute"):
        for n, imgs in out[kind].items():
            k, prev = merged.get(n, (kind, frozenset()))
            merged[n] = (k, prev | frozenset(imgs))
    return merged


@pytest.mark.parametrize("pairing, block", [("relation", None), ("cooccurrence", None), ("cooccurrence", 37)])
@pytest.mark.parametrize("as_", ["subject", "context"])
def test_vectorised_equals_naive_reference(tmp_path, monkeypatch, pairing, block, as_):
    import sys

    import metashift_hf.builders.subsets as bs

    if block is not None:  # many small pair blocks instead of one
        monkeypatch.setattr(bs, "_PAIR_BLOCK", block)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from synthetic_gqa import generate

    path = tmp_path / "syn.json"
    generate(path, n_images=300, seed=5, n_names=120, exponent=0.8)
    data = json.loads(path.read_text())
    kinds = ("object", "general", "attribute")
    c = candidates_from_scene_graphs(read_scene_graphs([path]), pairing=pairing, general_context_as=as_, kinds=kinds)
    ref = naive(data, pairing, as_, kinds)
    assert as_dict(c) == ref
    assert c.names == sorted(c.names)
    assert any(k == "general" for k, _ in ref.values()) and any(k == "attribute" for k, _ in ref.values())
    for i in range(len(c)):
        m = c.indices[c.indptr[i] : c.indptr[i + 1]]
        assert np.all(np.diff(m) > 0)


# ---------------------------------------------------------------------------------------------- split read
def _tables_equal(a, b) -> None:
    assert a.image_ids == b.image_ids and a.vocab == b.vocab and a.sha256 == b.sha256
    for f in (
        "obj_counts",
        "obj_names",
        "rel_counts",
        "rel_subjects",
        "rel_targets",
        "attr_counts",
        "attr_objects",
        "attr_words",
        "location",
        "weather",
    ):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.meta.equals(b.meta)


@pytest.fixture(scope="module")
def big_file(tmp_path_factory) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from synthetic_gqa import generate

    path = tmp_path_factory.mktemp("split") / "sg.json"
    generate(path, n_images=400, seed=2, n_names=60)
    return path


def test_split_read_equals_sequential(big_file, monkeypatch):
    import metashift_hf.builders.scene_graphs as sgm

    sequential = read_scene_graphs([big_file], workers=1)
    monkeypatch.setattr(sgm, "SPLIT_MIN_BYTES", 0)
    split = sgm._split_point(big_file)
    assert split is not None and split[0] > big_file.stat().st_size // 2
    _tables_equal(sequential, read_scene_graphs([big_file], workers=2))
    # a split guess that is not a top-level key is never verified: the first reader reads everything
    text = big_file.read_text()
    nested = text.index('"name"', len(text) // 2)
    monkeypatch.setattr(sgm, "_split_point", lambda p: (nested, "name"))
    _tables_equal(sequential, read_scene_graphs([big_file], workers=2))


def test_split_read_reports_errors_of_the_second_half(big_file, tmp_path, monkeypatch):
    import metashift_hf.builders.scene_graphs as sgm

    data = json.loads(big_file.read_text())
    last = list(data)[-1]
    first_obj = next(iter(data[last]["objects"].values()))
    first_obj["relations"].append({"name": "on", "object": "missing-1"})
    bad = write(tmp_path / "bad.json", data)
    with pytest.raises(InputFormatError) as sequential:
        read_scene_graphs([bad], workers=1)
    monkeypatch.setattr(sgm, "SPLIT_MIN_BYTES", 0)
    with pytest.raises(InputFormatError) as split:
        read_scene_graphs([bad], workers=2)
    assert split.value.what == sequential.value.what and "missing-1" in split.value.what
    assert split.value.fix == sequential.value.fix
    truncated = tmp_path / "trunc.json"
    truncated.write_text(bad.read_text()[:-100])
    with pytest.raises(InputFormatError) as e1:
        read_scene_graphs([truncated], workers=1)
    with pytest.raises(InputFormatError) as e2:
        read_scene_graphs([truncated], workers=2)
    assert e1.value.what == e2.value.what and "malformed JSON at byte" in e2.value.what


def test_split_read_duplicate_across_halves(big_file, tmp_path, monkeypatch):
    import metashift_hf.builders.scene_graphs as sgm

    text = big_file.read_text()
    ids = list(json.loads(text))
    dup = tmp_path / "dup.json"
    dup.write_text(text.replace(json.dumps(ids[-1]) + ":", json.dumps(ids[0]) + ":"))
    monkeypatch.setattr(sgm, "SPLIT_MIN_BYTES", 0)
    for workers in (1, 2):
        with pytest.raises(InputFormatError, match=f"image '{ids[0]}' appears twice"):
            read_scene_graphs([dup], workers=workers)


def test_empty_file_is_an_error(tmp_path):
    sg = read_scene_graphs([write(tmp_path / "empty.json", {})])
    assert sg.image_ids == []
    with pytest.raises(InputFormatError, match="hold no images"):
        candidates_from_scene_graphs(sg)
