"""Offline WordNet 3.0 (Debian dict files -> nltk corpus in the cache) and the ImageNet-1k class list."""

from __future__ import annotations

import shutil

import pytest

from metashift_hf.core.errors import InputFormatError, UnknownNameError
from metashift_hf.wordnet_match.imagenet import imagenet_classes, imagenet_synsets
from metashift_hf.wordnet_match.wordnet import (
    DEBIAN_DICT_DIR,
    DICT_FILES,
    LEXNAMES,
    WordNetMissingError,
    lexnames_text,
    load_wordnet,
    noun_synsets,
    synset_of_wnid,
    wnid_of,
)


needs_debian = pytest.mark.skipif(
    not (DEBIAN_DICT_DIR / "data.noun").is_file(),
    reason="Debian wordnet-base is not installed (apt-get install wordnet-base wordnet-sense-index)",
)


def test_lexnames_table_is_the_fixed_45_lines():
    lines = lexnames_text().splitlines()
    assert len(lines) == len(LEXNAMES) == 45
    assert lines[0] == "00\tadj.all\t3"
    assert lines[2] == "02\tadv.all\t4"
    assert lines[3] == "03\tnoun.Tops\t1"
    assert lines[5] == "05\tnoun.animal\t1"
    assert lines[28] == "28\tnoun.time\t1"
    assert lines[29] == "29\tverb.body\t2"
    assert lines[43] == "43\tverb.weather\t2"
    assert lines[44] == "44\tadj.ppl\t3"


@needs_debian
def test_debian_files_are_copied_into_the_cache_and_load(wn, wordnet_cache):
    folder = wordnet_cache / "nltk_data" / "corpora" / "wordnet"
    for name in (*DICT_FILES, "lexnames"):
        path = folder / name
        assert path.is_file() and not path.is_symlink(), name
    assert (folder / "lexnames").read_text() == lexnames_text()
    assert wn.get_version() == "3.0"
    assert wn.synset_from_pos_and_offset("n", 2084071).name() == "dog.n.01"
    assert wn.synset("dog.n.01").lexname() == "noun.animal"  # lexnames file read correctly
    # a second call reuses the copy and the loaded reader
    assert load_wordnet(cache_dir=wordnet_cache, use_nltk_corpus=False) is wn


def test_missing_wordnet_names_both_fixes(tmp_path):
    with pytest.raises(WordNetMissingError) as err:
        load_wordnet(cache_dir=tmp_path / "c", dict_dir=tmp_path / "nowhere", use_nltk_corpus=False)
    assert str(tmp_path / "nowhere") in err.value.what
    assert "apt-get install" in err.value.fix and "wordnet-base" in err.value.fix
    assert "python -m nltk.downloader wordnet" in err.value.fix
    assert not (tmp_path / "c").exists()


@needs_debian
def test_incomplete_dict_folder_names_the_missing_files_and_keeps_nothing(tmp_path):
    partial = tmp_path / "dict"
    partial.mkdir()
    for name in ("index.noun", "data.noun"):
        shutil.copyfile(DEBIAN_DICT_DIR / name, partial / name)
    with pytest.raises(WordNetMissingError) as err:
        load_wordnet(cache_dir=tmp_path / "c", dict_dir=partial, use_nltk_corpus=False)
    assert "data.verb" in err.value.what and "index.sense" in err.value.what
    assert not (tmp_path / "c" / "nltk_data" / "corpora" / "wordnet").exists()


@needs_debian
def test_an_existing_nltk_corpus_is_preferred(wn, tmp_path):
    # the cache copy is now on nltk.data.path: it is found as an nltk corpus, no dict files needed
    again = load_wordnet(cache_dir=tmp_path / "unused", dict_dir=tmp_path / "nowhere", use_nltk_corpus=True)
    assert again.synset_from_pos_and_offset("n", 2084071).name() == "dog.n.01"
    assert not (tmp_path / "unused").exists()


@needs_debian
def test_wnid_lookup_errors_are_clear(wn):
    assert wnid_of(synset_of_wnid(wn, "n02084071")) == "n02084071"
    with pytest.raises(InputFormatError, match="not a wnid"):
        synset_of_wnid(wn, "dog", "tree file x.json, node")
    with pytest.raises(UnknownNameError, match="n99999999 is not a WordNet 3.0 noun"):
        synset_of_wnid(wn, "n99999999", "tree file x.json, node")
    with pytest.raises(UnknownNameError):
        synset_of_wnid(wn, "n02084072")  # inside dog's line, not a synset start


@needs_debian
def test_noun_senses_follow_wordnet_order_and_morphy(wn):
    assert [s.name() for s in noun_synsets(wn, "dog")][:2] == ["dog.n.01", "frump.n.01"]
    assert noun_synsets(wn, "dogs") == noun_synsets(wn, "dog")
    assert [s.name() for s in noun_synsets(wn, "coffee table")] == ["coffee_table.n.01"]
    assert noun_synsets(wn, "qwzxv") == []
    assert noun_synsets(wn, "   ") == []
    assert noun_synsets(wn, "dog(cat)/\\") == []


@needs_debian
def test_imagenet_1k_in_class_index_order_all_resolve(wn):
    classes = imagenet_classes()
    assert len(classes) == 1000 and len({c.wnid for c in classes}) == 1000
    assert (classes[0].wnid, classes[0].name.split(",")[0]) == ("n01440764", "tench")
    assert classes[207].wnid == "n02099601" and classes[207].name.startswith("golden retriever")
    assert classes[999].wnid == "n15075141"
    synsets = imagenet_synsets(wn)
    assert all(s.pos() == "n" for s in synsets)
    assert [wnid_of(s) for s in synsets] == [c.wnid for c in classes]


@pytest.mark.slow  # ~12 s: copies and parses the whole WordNet dict twice
@needs_debian
def test_a_wordnet_that_is_not_3_0_is_refused_or_replaced(tmp_path, wn, monkeypatch):
    import metashift_hf.wordnet_match.wordnet as wordnet_module

    fake = tmp_path / "dict31"
    shutil.copytree(DEBIAN_DICT_DIR, fake)
    adj = fake / "data.adj"
    adj.write_bytes(adj.read_bytes().replace(b"WordNet 3.0 Copyright", b"WordNet 3.1 Copyright"))
    with pytest.raises(InputFormatError, match="version '3.1', not 3.0") as err:
        load_wordnet(cache_dir=tmp_path / "c", dict_dir=fake, use_nltk_corpus=False)
    assert "WordNet 3.0" in err.value.fix
    # an nltk corpus of the wrong version is passed over for the dict files
    bad_root = str(tmp_path / "c" / "nltk_data" / "corpora" / "wordnet")
    monkeypatch.setattr(wordnet_module, "_existing_nltk_corpus", lambda: bad_root)
    good = load_wordnet(cache_dir=tmp_path / "c2")
    assert good.get_version() == "3.0" and good.synset("dog.n.01").offset() == 2084071
