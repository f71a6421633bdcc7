"""Figures published with MetaShift (paper, pickles, matching): the one place they live.

``metashift-hf stats`` compares a build against them; the cards quote them.
"""

from __future__ import annotations


PUBLISHED_FULL: dict[str, float] = {
    "candidate_keys": 17_938,
    "kept_subsets_any_class": 13_543,  # keys with >= 25 images
    "classes": 410,
    "subsets": 12_868,
    "subsets_per_class": 31.4,
    "images_per_subset": 200.4,
    "candidate_images": 72_596,  # unique images over all keys of the published pickle
    "distinct_contexts": 1_853,
    "general_contexts": 37,
    "attribute_contexts": 114,
    "object_contexts": 1_702,
}
PUBLISHED_ATTRIBUTES: dict[str, float] = {
    "candidate_keys": 4_962,
    "subjects": 337,
    "candidate_images": 59_663,
    "classes": 66,
    "subsets": 679,
}
PUBLISHED_RULES: dict[str, float] = {
    "min_images_per_subset": 25,
    "min_subsets_per_class": 5,  # a class needs MORE than this many kept subsets
    "edge_threshold": 0.2,  # the original code's; the paper's text says 0.1
    "spectral_dim": 5,
}
# ImageNet matching of the 1,262 vocabulary names over the full pickle's keys (first WordNet noun sense
# that is a node of the hierarchy; a subset counts when subject and context both matched, no size rule).
# "paper": the published tree imagenet1k_node_names.json (published figures); "wordnet": the WordNet 3.0
# hypernym closure of the 1,000 classes (figures from the project's reference notes, not the paper).
PUBLISHED_MATCH: dict[str, dict[str, float]] = {
    "paper": {
        "vocabulary_names": 1_262,
        "matched_names": 427,
        "subsets": 5_040,
        "classes": 261,
        "imagenet_leaves_covered": 867,
    },
    "wordnet": {
        "vocabulary_names": 1_262,
        "matched_names": 442,
        "subsets": 5_409,
        "classes": 270,
        "imagenet_leaves_covered": 873,
    },
}
