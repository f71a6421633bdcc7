"""Hierarchy-aware and restricted scoring, group counts and context bugs on hand-checked cases."""

import numpy as np
import pandas as pd
import pytest

from metashift_hf.core.errors import EmptyResultError, InputFormatError, UnknownNameError
from metashift_hf.evaluate.predictions import HeadOutputs as Predictions
from metashift_hf.evaluate.scoring import NO_CLASS, score_images
from metashift_hf.scoring.bugs import context_bugs
from metashift_hf.scoring.groups import group_table, id_vs_ood, worst_subsets


# ImageNet-1k indices: 281 tabby cat, 285 Egyptian cat, 207 golden retriever, 208 Labrador,
# 339 sorrel (horse), 603 horse cart, 923 plate.
COVER = {"cat": [281, 282, 283, 284, 285], "dog": list(range(151, 269)), "horse": [339]}


def _table():
    return pd.DataFrame(
        {
            "image_id": ["a", "b", "c", "d", "e", "f"],
            "split": ["test", "test", "test", "validation", "validation", "validation"],
            "label": ["cat", "cat", "dog", "dog", "horse", "horse"],
            "contexts": [["sofa"], ["sofa", "bed"], ["grass"], [], ["white"], ["white", "cart"]],
            "community": [0, 1, 0, -1, 0, 0],
        }
    )


def _preds(top1, logits=None):
    return Predictions(list("abcdef"), np.array(top1, dtype=np.int64), logits)


def test_hierarchy_scoring_hand_checked():
    # a: tabby -> cat ok; b: Labrador -> wrong, predicted class dog; c: golden retriever -> dog ok;
    # d: plate -> wrong, no class; e: sorrel -> ok; f: horse cart is not under horse (an artefact) -> wrong
    scored = score_images(
        _table(), _preds([281, 208, 207, 923, 339, 603]), COVER, "hierarchy", ["cat", "dog", "horse"]
    )
    assert scored["correct"].tolist() == [True, False, True, False, True, False]
    assert scored["pred_class"].tolist() == ["cat", "dog", "dog", NO_CLASS, "horse", NO_CLASS]


def test_restricted_scoring_uses_max_leaf_logit_per_class():
    logits = np.zeros((6, 1000), dtype=np.float32)
    logits[0, 285] = 5  # cat leaf wins
    logits[1, 923] = 9  # plate dominates overall, but among task classes dog (207: 2) beats cat (281: 1)
    logits[1, 207], logits[1, 281] = 2, 1
    logits[2, 339] = 3  # horse beats dog -> wrong
    logits[3, 250] = 1  # dog leaf
    logits[4, 339] = 1
    # f: all zeros -> a tie between every class; ties go to the first class in task order (cat) -> wrong
    scored = score_images(_table(), _preds(logits.argmax(1), logits), COVER, "restricted", ["cat", "dog", "horse"])
    assert scored["pred_class"].tolist() == ["cat", "dog", "horse", "dog", "horse", "cat"]
    assert scored["correct"].tolist() == [True, False, False, True, True, False]
    # the same plate image under hierarchy scoring is simply wrong
    hier = score_images(_table(), _preds(logits.argmax(1), logits), COVER, "hierarchy", ["cat", "dog", "horse"])
    assert hier["correct"].tolist()[1] is False


def test_restricted_needs_logits_and_classes_need_leaves():
    with pytest.raises(InputFormatError, match="restricted scoring needs logits"):
        score_images(_table(), _preds([281] * 6), COVER, "restricted", ["cat", "dog", "horse"])
    with pytest.raises(EmptyResultError, match="horse"):
        score_images(_table(), _preds([281] * 6), {**COVER, "horse": []}, "hierarchy", ["cat", "dog", "horse"])
    with pytest.raises(UnknownNameError, match="scoring mode"):
        score_images(_table(), _preds([281] * 6), COVER, "top5", ["cat", "dog", "horse"])


def test_group_counts_contexts_overlap_and_gap():
    scored = score_images(
        _table(), _preds([281, 208, 207, 923, 339, 603]), COVER, "hierarchy", ["cat", "dog", "horse"]
    )
    g = group_table(scored, ["cat", "dog", "horse"])
    get = lambda level, cls="", group="": g[(g.level == level) & (g["class"] == cls) & (g.group == group)].iloc[0]
    assert (get("overall").n, get("overall").correct) == (6, 3)
    assert (get("class", "cat").n, get("class", "cat").correct) == (2, 1)
    # b is in both cat(sofa) and cat(bed): counted once in each
    assert (get("context", "cat", "sofa").n, get("context", "cat", "sofa").correct) == (2, 1)
    assert (get("context", "cat", "bed").n, get("context", "cat", "bed").correct) == (1, 0)
    assert get("context", "cat", "sofa").subset == "cat(sofa)"
    # communities from the table column; -1 (image d) is in none
    assert (get("community", "cat", "0").n, get("community", "cat", "1").n) == (1, 1)
    assert "-1" not in set(g[g.level == "community"].group)
    # communities from a subset map: an image in two subsets of one community counts once
    g2 = group_table(
        scored, ["cat", "dog", "horse"], {"horse(white)": 0, "horse(cart)": 0, "cat(sofa)": 0, "cat(bed)": 2}
    )
    comm = g2[(g2.level == "community") & (g2["class"] == "horse")]
    assert comm[["group", "n", "correct"]].values.tolist() == [["0", 2, 1]]
    gap = id_vs_ood(g, "validation", "test")
    assert gap["id"]["accuracy"] == pytest.approx(1 / 3) and gap["ood"]["accuracy"] == pytest.approx(2 / 3)
    assert gap["gap"] == pytest.approx(-1 / 3) and gap["relative_drop"] == pytest.approx(-1.0)
    assert id_vs_ood(g, "id_test", "test") is None
    worst = worst_subsets(g, min_n=1)
    # accuracy first, then larger n, then name
    assert worst.subset.tolist() == ["cat(bed)", "horse(cart)", "cat(sofa)", "horse(white)", "dog(grass)"]
    assert worst_subsets(g, min_n=2).subset.tolist() == ["cat(sofa)", "horse(white)"]


def test_context_bug_detected_and_bh_applied():
    rng = np.random.default_rng(0)
    n = 200
    # 40 images in dog(water) all wrong; the other 160 dog images all right except a few
    contexts = [["water"] if i < 40 else (["grass"] if i % 2 else ["sofa"]) for i in range(n)]
    table = pd.DataFrame(
        {"image_id": [str(i) for i in range(n)], "split": "test", "label": "dog", "contexts": contexts, "community": 0}
    )
    top1 = np.where(np.arange(n) < 40, 923, 207)
    top1[rng.choice(np.arange(40, n), 8, replace=False)] = 923
    scored = score_images(table, Predictions(list(table.image_id), top1, None), COVER, "hierarchy", ["dog"])
    g = group_table(scored, ["dog"])
    bugs = context_bugs(scored, g, min_n=10)
    by = bugs.set_index("group")
    assert bool(by.at["water", "bug"]) and not by.at["grass", "bug"] and not by.at["sofa", "bug"]
    assert by.at["water", "rest_n"] == 160 and by.at["water", "rest_correct"] == 152
    assert (by["q_value"] >= by["p_value"]).all()
