"""Subset names, the context ontologies, candidate subsets and the two MetaShift rules.

A subset is named ``subject(context)``. Candidate subsets are held as one compressed table
(CSR: subset -> sorted image indices into a sorted list of image-id strings) so that the
full-scale build never materialises millions of Python sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from metashift_hf.core.errors import InputFormatError, UnknownNameError, did_you_mean
from metashift_hf.core.names import SubsetName, parse_subset_name, subset_name  # noqa: F401  (re-exported)

from .ontology import (  # noqa: F401  (re-exported)
    ATTRIBUTE_CATEGORY,
    ATTRIBUTE_CONTEXT_ONTOLOGY,
    GENERAL_CATEGORY,
    GENERAL_CONTEXT_ONTOLOGY,
    SCENE_WORDS,
    SCENE_WORDS_ALSO_OBJECT_CONTEXTS,
)
from .scene_graphs import SceneGraphTable


KINDS = ("object", "attribute", "general")


def published_kind(name: str) -> tuple[str, str | None]:
    """Kind and category of a key of the published *full* pickle: general when its subject is a
    general-context word (the published convention writes them first, 'ocean(dog)'), else object."""
    subject, _ = parse_subset_name(name)
    if subject in GENERAL_CATEGORY:
        return "general", GENERAL_CATEGORY[subject]
    return "object", None


def attribute_kind(name: str) -> tuple[str, str | None]:
    """Kind and category of a key of the published *attributes* pickle."""
    _, context = parse_subset_name(name)
    return "attribute", ATTRIBUTE_CATEGORY.get(context)


@dataclass
class CandidateSubsets:
    """Every candidate subset with its images, in CSR form, sorted by name.

    ``names[i]``'s images are ``image_ids[indices[indptr[i]:indptr[i+1]]]`` (sorted, unique).
    Build small ones with :meth:`from_dict`; large ones come from the scene-graph pipeline.
    """

    names: list[str]
    kinds: list[str]
    categories: list[str | None]
    image_ids: list[str]  # sorted unique
    indptr: np.ndarray  # int64, len(names) + 1
    indices: np.ndarray  # int64 image indices
    collisions: int = 0  # names produced by more than one source/kind and merged (union)
    _pos: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._pos = {n: i for i, n in enumerate(self.names)}
        parsed = [parse_subset_name(n) for n in self.names]
        self.subjects = [s for s, _ in parsed]
        self.contexts = [c for _, c in parsed]
        for n, k in zip(self.names, self.kinds):
            if k not in KINDS:
                raise InputFormatError(f"subset {n!r} has kind {k!r}", f"use one of {', '.join(KINDS)}")

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_dict(
        cls,
        mapping: Mapping[str, Iterable[str]],
        kind: str | Mapping[str, str] = "object",
        category: Mapping[str, str | None] | None = None,
    ) -> "CandidateSubsets":
        """From ``{'dog(frisbee)': ['1', '2', ...], ...}``; ``kind`` is one kind for all or per name."""
        names = list(mapping)
        sets = [{str(i) for i in mapping[n]} for n in names]
        kinds = [kind if isinstance(kind, str) else kind.get(n, "object") for n in names]
        cats = [(category or {}).get(n) for n in names]
        image_ids = sorted(set().union(*sets)) if sets else []
        pos = {im: i for i, im in enumerate(image_ids)}
        sub = np.repeat(np.arange(len(names), dtype=np.int64), [len(s) for s in sets])
        img = np.fromiter((pos[i] for s in sets for i in s), dtype=np.int64, count=int(sub.size))
        return cls.from_codes(names, kinds, cats, image_ids, sub, img)

    @classmethod
    def from_codes(
        cls,
        names: Sequence[str],
        kinds: Sequence[str],
        categories: Sequence[str | None],
        image_ids: Sequence[str],
        subset_codes: np.ndarray,
        image_codes: np.ndarray,
    ) -> "CandidateSubsets":
        """From parallel arrays of (subset code, image index); duplicates are dropped.

        ``names`` must be unique; ``image_ids`` sorted and unique. Vectorised: one sort.
        """
        if len(set(names)) != len(names):
            raise InputFormatError("duplicate subset names given to CandidateSubsets", "merge duplicates first")
        order = np.argsort(np.asarray(names, dtype=object), kind="stable")
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names), dtype=np.int64)
        n_img = max(len(image_ids), 1)
        key = np.unique(
            rank[np.asarray(subset_codes, dtype=np.int64)] * n_img + np.asarray(image_codes, dtype=np.int64)
        )
        sub_sorted = key // n_img
        counts = np.bincount(sub_sorted, minlength=len(names))
        indptr = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(
            names=[names[i] for i in order],
            kinds=[kinds[i] for i in order],
            categories=[categories[i] for i in order],
            image_ids=list(image_ids),
            indptr=indptr,
            indices=(key % n_img).astype(np.int64),
        )

    @classmethod
    def combine(cls, parts: Sequence["CandidateSubsets"]) -> "CandidateSubsets":
        """Union of several candidate sets. A name present in several parts gets the union of its
        images and the kind of the first part that has it (counted in ``collisions``)."""
        parts = [p for p in parts if p is not None]
        if len(parts) == 1:
            return parts[0]
        image_ids = sorted(set().union(*(p.image_ids for p in parts)))
        lookup = np.asarray(image_ids, dtype=object)
        names: list[str] = []
        kinds: list[str] = []
        cats: list[str | None] = []
        where: dict[str, int] = {}
        subs, imgs = [], []
        collisions = 0
        for p in parts:
            remap = np.searchsorted(lookup, np.asarray(p.image_ids, dtype=object)).astype(np.int64)
            codes = np.empty(len(p.names), dtype=np.int64)
            for i, n in enumerate(p.names):
                if n in where:
                    collisions += 1
                else:
                    where[n] = len(names)
                    names.append(n)
                    kinds.append(p.kinds[i])
                    cats.append(p.categories[i])
                codes[i] = where[n]
            subs.append(np.repeat(codes, np.diff(p.indptr)))
            imgs.append(remap[p.indices] if p.indices.size else p.indices)
        out = cls.from_codes(names, kinds, cats, image_ids, np.concatenate(subs), np.concatenate(imgs))
        out.collisions = collisions + sum(p.collisions for p in parts)
        return out

    # -- access ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._pos

    def index(self, name: str) -> int:
        if name not in self._pos:
            raise UnknownNameError(
                f"unknown subset {name!r}{did_you_mean(name, self.names)}",
                "use a name listed in the candidate subsets",
            )
        return self._pos[name]

    def sizes(self) -> np.ndarray:
        return np.diff(self.indptr)

    def members(self, name: str) -> np.ndarray:
        """Sorted unique int64 image indices of one subset."""
        i = self.index(name)
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    def images(self, name: str) -> frozenset[str]:
        return frozenset(self.image_ids[j] for j in self.members(name).tolist())

    def select(self, keep: np.ndarray) -> "CandidateSubsets":
        """Only the subsets where the boolean mask ``keep`` is true (image list unchanged)."""
        idx = np.flatnonzero(keep)
        sizes = self.sizes()[idx]
        indptr = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=indptr[1:])
        pieces = [self.indices[self.indptr[i] : self.indptr[i + 1]] for i in idx.tolist()]
        out = CandidateSubsets(
            names=[self.names[i] for i in idx],
            kinds=[self.kinds[i] for i in idx],
            categories=[self.categories[i] for i in idx],
            image_ids=self.image_ids,
            indptr=indptr,
            indices=np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64),
            collisions=self.collisions,
        )
        return out


@dataclass
class RuleResult:
    """Outcome of the two rules on a CandidateSubsets (arrays aligned with its names)."""

    big_enough: np.ndarray  # bool: subset has >= min_images_per_subset images
    kept: np.ndarray  # bool: big enough AND its subject is a class
    classes: list[str]  # sorted


@dataclass
class KeptSubsets:
    """The rules' outcome at subset level (what the per-class analysis reads): kept subsets in name order."""

    classes: list[str]  # sorted
    sid: np.ndarray  # int64 positions (name order) of the kept subsets among all candidates
    names: list[str]
    subjects: list[str]
    sizes: np.ndarray  # int64 image counts


def apply_rules(
    candidates: CandidateSubsets,
    min_images_per_subset: int = 25,
    min_subsets_per_class: int = 5,
    max_subsets_per_class: int = 0,
) -> RuleResult:
    """A subset is big enough with at least ``min_images_per_subset`` images; a subject is a class
    when it has MORE than ``min_subsets_per_class`` big-enough subsets (the original's '> 5').
    ``max_subsets_per_class`` (0: no cap) keeps a class's largest subsets only, ties by name."""
    big = candidates.sizes() >= min_images_per_subset
    count: dict[str, int] = {}
    for subject, ok in zip(candidates.subjects, big.tolist()):
        if ok:
            count[subject] = count.get(subject, 0) + 1
    classes = sorted(s for s, n in count.items() if n > min_subsets_per_class)
    is_class = set(classes)
    kept = big & np.fromiter((s in is_class for s in candidates.subjects), dtype=bool, count=len(candidates))
    if max_subsets_per_class:
        sizes = candidates.sizes()
        by_class: dict[str, list[int]] = {}
        for i in np.flatnonzero(kept).tolist():  # name order, so a stable sort by size breaks ties by name
            by_class.setdefault(candidates.subjects[i], []).append(i)
        for rows in by_class.values():
            if len(rows) > max_subsets_per_class:
                order = sorted(rows, key=lambda i: -int(sizes[i]))
                kept[order[max_subsets_per_class:]] = False
    return RuleResult(big_enough=big, kept=kept, classes=classes)


# ------------------------------------------------------------------------------------------------
# candidate subsets from scene graphs (vectorised: integer codes, numpy pair generation, one sort)
# ------------------------------------------------------------------------------------------------
_KIND_PRECEDENCE = ("general", "object", "attribute")  # a name produced by several kinds takes the first
_DENSE_PAIR_LIMIT = 1 << 26  # vocab**2 up to this: pair presence as a dense bool table
_PAIR_BLOCK = 1 << 23  # pairs generated per block in co-occurrence mode (bounds peak memory)


def _pairs_within_images(entries: np.ndarray, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each entry j (a unique (image, name) row), every row of the same image: (j, other) index
    pairs, including j itself. ``start/stop`` bound the image's rows for each entry."""
    k = stop - start
    total = int(k.sum())
    first = np.repeat(entries, k)
    offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    return first, np.repeat(start, k) + offset


def candidates_from_scene_graphs(
    sg: "SceneGraphTable",
    *,
    pairing: str = "relation",
    general_context_as: str = "subject",
    kinds: Sequence[str] = ("object", "general"),
) -> CandidateSubsets:
    """Candidate subsets from a :class:`builders.scene_graphs.SceneGraphTable`.

    - object contexts ``subject(context)``: ``relation`` pairing uses each scene-graph relation
      (the object holding the relation is the subject, its target the context); ``cooccurrence``
      pairs every two object names in the image (a name with itself when it occurs twice).
      Place/room words are not object contexts (they are general contexts), except 'grass'.
    - general contexts: the image's ``location``/``weather`` field values and place/room words
      among its objects, over every object name in the image: ``ocean(dog)``
      (``general_context_as='context'`` writes ``dog(ocean)``).
    - attribute contexts ``subject(attribute)``: attributes in the 27-category ontology.
    """
    if len(sg.image_ids) == 0:
        raise InputFormatError(
            f"scene-graph files {', '.join(sg.files)} hold no images",
            "pass GQA train_sceneGraphs.json / val_sceneGraphs.json",
        )
    V = len(sg.vocab)
    rows = _NameRows.of(sg)
    streams: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in _KIND_PRECEDENCE}
    if "object" in kinds:
        streams["object"] = _object_pairs(sg, rows, pairing)
    if "general" in kinds:
        streams["general"] = _general_pairs(sg, rows, general_context_as)
    if "attribute" in kinds:
        streams["attribute"] = [(sg.attr_objects * V + sg.attr_words, np.repeat(rows.img_of, sg.attr_counts))]
    pairs, kind_idx, seen_in = _present_pairs(streams, V)
    subj, ctx = (pairs // V).tolist(), (pairs % V).tolist()
    names = [f"{sg.vocab[s]}({sg.vocab[c]})" for s, c in zip(subj, ctx)]
    name_order = np.argsort(np.asarray(names, dtype=object), kind="stable")
    indptr, members = _membership(streams, pairs, name_order, sg.image_ids)
    kinds_out, cats_out = [], []
    for r in name_order.tolist():
        kinds_out.append(_KIND_PRECEDENCE[kind_idx[r]])
        word = sg.vocab[subj[r]] if general_context_as == "subject" else sg.vocab[ctx[r]]
        cats_out.append(_category(kinds_out[-1], word, sg.vocab[ctx[r]]))
    return CandidateSubsets(
        names=[names[r] for r in name_order.tolist()],
        kinds=kinds_out,
        categories=cats_out,
        image_ids=sorted(sg.image_ids),
        indptr=indptr,
        indices=members,
        collisions=int((seen_in > 1).sum()),
    )


@dataclass(frozen=True)
class _NameRows:
    """The unique (image, object name) rows of a scene-graph table, sorted by image then name, with each image's
    range of rows (``row_start``/``row_stop`` per row) and how often the name occurs in the image."""

    img_of: np.ndarray  # 0..N-1: image positions in the table
    u_img: np.ndarray
    u_name: np.ndarray
    ucount: np.ndarray
    row_start: np.ndarray
    row_stop: np.ndarray

    @classmethod
    def of(cls, sg: "SceneGraphTable") -> "_NameRows":
        V, N = len(sg.vocab), len(sg.image_ids)
        img_of = np.arange(N, dtype=np.int64)
        ukey, ucount = np.unique(np.repeat(img_of, sg.obj_counts) * V + sg.obj_names, return_counts=True)
        u_img, u_name = ukey // V, ukey % V
        del ukey
        bounds = np.searchsorted(u_img, np.arange(N + 1, dtype=np.int64))
        return cls(img_of, u_img, u_name, ucount, bounds[u_img], bounds[u_img + 1])


def _dropped_contexts(vocab: Sequence[str]) -> np.ndarray:
    """Place/room words, which are general contexts, not object contexts (except 'grass')."""
    is_scene = np.fromiter((w in SCENE_WORDS for w in vocab), dtype=bool, count=len(vocab))
    also = np.fromiter((w in SCENE_WORDS_ALSO_OBJECT_CONTEXTS for w in vocab), dtype=bool, count=len(vocab))
    return is_scene & ~also


def _object_pairs(sg: "SceneGraphTable", rows: _NameRows, pairing: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(subject * V + context, image) of the object contexts: each relation, or every two names of an image."""
    V, drop_ctx = len(sg.vocab), _dropped_contexts(sg.vocab)
    if pairing == "relation":
        rel_img = np.repeat(rows.img_of, sg.rel_counts)
        keep = ~drop_ctx[sg.rel_targets]
        return [(sg.rel_subjects[keep] * V + sg.rel_targets[keep], rel_img[keep])]
    if pairing != "cooccurrence":
        raise InputFormatError(f"unknown pairing {pairing!r}", "use 'relation' or 'cooccurrence'")
    out = []
    n = rows.u_img.size
    cum = np.cumsum(rows.row_stop - rows.row_start)
    lo = 0
    while lo < n:  # in blocks of about _PAIR_BLOCK pairs, so memory stays bounded
        hi = max(int(np.searchsorted(cum, (cum[lo - 1] if lo else 0) + _PAIR_BLOCK, side="right")), lo + 1)
        j, other = _pairs_within_images(
            np.arange(lo, min(hi, n), dtype=np.int64), rows.row_start[lo:hi], rows.row_stop[lo:hi]
        )
        s, c = rows.u_name[j], rows.u_name[other]
        keep = ((j != other) | (rows.ucount[j] >= 2)) & ~drop_ctx[c]
        out.append((s[keep] * V + c[keep], rows.u_img[j[keep]]))
        lo = hi
    return out


def _general_pairs(
    sg: "SceneGraphTable", rows: _NameRows, general_context_as: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(pair, image) of the general contexts: the image's location/weather values and place/room words among its
    objects, over every object name in the image (``general_context_as`` says which side the word is on)."""
    vocab, V = sg.vocab, len(sg.vocab)
    is_scene = np.fromiter((w in SCENE_WORDS for w in vocab), dtype=bool, count=V)
    field_word = np.fromiter((GENERAL_CATEGORY.get(w) in ("location", "weather") for w in vocab), dtype=bool, count=V)

    def general_pair(word: np.ndarray, name: np.ndarray) -> np.ndarray:
        return word * V + name if general_context_as == "subject" else name * V + word

    out = []
    for field_codes in (sg.location, sg.weather):
        g = field_codes[rows.u_img]
        m = g >= 0
        m[m] = field_word[g[m]]
        out.append((general_pair(g[m], rows.u_name[m]), rows.u_img[m]))
    scene_rows = np.flatnonzero(is_scene[rows.u_name])
    j, other = _pairs_within_images(scene_rows, rows.row_start[scene_rows], rows.row_stop[scene_rows])
    keep = j != other
    out.append((general_pair(rows.u_name[j[keep]], rows.u_name[other[keep]]), rows.u_img[j[keep]]))
    return out


def _present_pairs(
    streams: Mapping[str, list[tuple[np.ndarray, np.ndarray]]], V: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (subject, context) pair that exists (sorted), the kind each is kept as (the first of
    :data:`_KIND_PRECEDENCE` it appears in) and in how many kinds it appears."""
    present: dict[str, np.ndarray] = {}
    for kind in _KIND_PRECEDENCE:
        ps = [p for p, _ in streams[kind]]
        if V * V <= _DENSE_PAIR_LIMIT:
            flags = np.zeros(V * V, dtype=bool)
            for p in ps:
                flags[p] = True
            present[kind] = np.flatnonzero(flags)
        else:
            present[kind] = np.unique(np.concatenate(ps)) if ps else np.zeros(0, dtype=np.int64)
    pairs = np.unique(np.concatenate(list(present.values())))
    kind_idx = np.full(pairs.size, -1, dtype=np.int64)
    seen_in = np.zeros(pairs.size, dtype=np.int64)
    for i, kind in enumerate(_KIND_PRECEDENCE):
        has = np.isin(pairs, present[kind], assume_unique=True)
        seen_in += has
        kind_idx[(kind_idx < 0) & has] = i
    return pairs, kind_idx, seen_in


def _membership(
    streams: Mapping[str, list[tuple[np.ndarray, np.ndarray]]],
    pairs: np.ndarray,
    name_order: np.ndarray,
    image_ids: Sequence[str],
) -> tuple[np.ndarray, np.ndarray]:
    """Each subset's images as CSR (``indptr``, image positions in sorted id order), subsets in name order; the
    streams are emptied as they are read (memory)."""
    N = len(image_ids)
    order = np.argsort(np.asarray(image_ids, dtype=object), kind="stable")
    rank = np.empty(N, dtype=np.int64)
    rank[order] = np.arange(N, dtype=np.int64)
    name_rank = np.empty(pairs.size, dtype=np.int64)
    name_rank[name_order] = np.arange(pairs.size, dtype=np.int64)
    # one sorted key per (subset, image): subset rank * N + image rank
    chunks = []
    for kind in _KIND_PRECEDENCE:
        for p, img in streams[kind]:
            chunks.append(name_rank[np.searchsorted(pairs, p)] * N + rank[img])
        streams[kind].clear()
    keys = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    del chunks
    keys.sort()
    if keys.size:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    counts = np.bincount(keys // N, minlength=pairs.size)
    indptr = np.zeros(pairs.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, keys % N


def _category(kind: str, general_word: str, context: str) -> str | None:
    """A subset's category: a general context's (location, weather, place...), an attribute's, none for objects."""
    if kind == "general":
        return GENERAL_CATEGORY.get(general_word)
    if kind == "attribute":
        return ATTRIBUTE_CATEGORY.get(context)
    return None
