"""Issue 34 part 3: one split summary (metashift_hf.scoring.summary). For the same predictions, ``score``,
``Evaluator.eval``, ``train``, ``experiment compare``, ``evaluate`` and the zoo report the same n, accuracy,
Wilson interval, balanced accuracy, worst group and chance baseline, to the last digit."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


torch = pytest.importorskip("torch")

from fixtures.zoo import tiny_backbone, world  # noqa: E402,F401  (world: the module fixture)
from metashift_hf.evaluate import evaluate  # noqa: E402
from metashift_hf.evaluate.config import EvalConfig  # noqa: E402
from metashift_hf.evaluate.coverage import head_coverage  # noqa: E402
from metashift_hf.evaluate.zoo import evaluate_zoo  # noqa: E402
from metashift_hf.hub.task_data import TaskRef  # noqa: E402
from metashift_hf.hub.task_open import TaskOrigin, open_task  # noqa: E402
from metashift_hf.models import CacheConfig, Preprocessing, from_module  # noqa: E402
from metashift_hf.research import compare as compare_mod  # noqa: E402
from metashift_hf.research.compare import run_compare  # noqa: E402
from metashift_hf.research.evaluator import Evaluator  # noqa: E402
from metashift_hf.research.score import score  # noqa: E402
from metashift_hf.research.train import TrainConfig, train  # noqa: E402
from metashift_hf.scoring.groups import GroupScore  # noqa: E402
from metashift_hf.scoring.summary import balanced_accuracy, split_summary  # noqa: E402


TASK = "bin-cat-dog"
QUIET = EvalConfig(progress=False, plots=False)
PREP = Preprocessing(36, 32, "bilinear", (0.5,) * 3, (0.5,) * 3)


def read_csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)  # pandas 3 parses floats round-trip (the test checks the last digit)


class Lookup(torch.nn.Module):
    """Each image's preprocessed pixels -> the 1,000 logits chosen for it (nearest stored image)."""

    def __init__(self, keys: np.ndarray, logits: np.ndarray):
        super().__init__()
        self.register_buffer("keys", torch.from_numpy(keys))
        self.register_buffer("out", torch.from_numpy(logits))
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return self.out[torch.cdist(x.float().flatten(1), self.keys).argmin(dim=1)]


def head_for(predicted: dict[str, str], images: Path, classes) -> object:
    """An ImageNet-head model whose top-1 leaf is a leaf of ``predicted[image_id]`` for every image."""
    coverage, _ = head_coverage(classes, "wordnet", None)
    ids = sorted(predicted)
    keys = np.stack([np.asarray(PREP((images / f"{i}.jpg").read_bytes())).reshape(-1) for i in ids]).astype(np.float32)
    gaps = torch.cdist(torch.from_numpy(keys), torch.from_numpy(keys)) + torch.eye(len(ids)) * 1e9
    assert float(gaps.min()) > 1.0  # every image's pixels are far from every other's: the lookup is exact
    logits = np.zeros((len(ids), 1000), dtype=np.float32)
    for row, i in enumerate(ids):
        logits[row, min(coverage[predicted[i]])] = 5.0
    return from_module(Lookup(keys, logits), PREP, name="lookup")


def test_balanced_accuracy_is_exact_and_order_free():
    counts = [(18, 27), (28, 29), (1, 5), (16, 19), (8, 35), (18, 34), (4, 28), (3, 22), (16, 33), (17, 25)]
    gs = [GroupScore(str(i), "t", n, k, k / n, 0.0, 1.0) for i, (k, n) in enumerate(counts)]
    exact = float(sum(Fraction(k, n) for k, n in counts) / len(counts))
    # np.mean and a plain sum both give ...446 here: a second computation would differ in the last digit
    assert np.mean([g.accuracy for g in gs]) != exact
    assert balanced_accuracy(gs) == balanced_accuracy(gs[::-1]) == exact == 0.4876341628550447
    s = split_summary("test", ["a", "a", "b", "c"], [True, False, True, False], ["g1", "g1", "g2", "g3"], "cba")
    assert s.balanced_accuracy == pytest.approx((0.5 + 1 + 0) / 3) and s.worst_group.group == "g3"
    assert [g.group for g in s.per_class] == ["c", "b", "a"]  # task class order
    # chance: the majority class a; its balanced accuracy is 1/classes
    assert (
        s.chance.predicts == "a" and s.chance.balanced_accuracy == pytest.approx(1 / 3) and s.chance.whole.correct == 2
    )


@pytest.mark.slow  # ~25 s on 2 busy cores: a training run, a comparison, an evaluate and a zoo
def test_six_entry_points_report_the_same_figures(world, tmp_path, monkeypatch):  # noqa: F811
    art, images = world / "artifact", world / "images"
    task = TaskRef(TASK, artifact=art, images=images)
    plan = open_task(task).plan
    bb = tiny_backbone()
    cfg = TrainConfig(epochs=2, seeds=1)

    # train: its predictions are the ones every other entry point scores
    trained = train(task, tmp_path / "train", cfg, backbone=bb, cache_dir=tmp_path / "cache", progress=False)
    run = trained.runs[0]
    preds = run.predictions

    # score
    s = score(preds, task).splits["test"]
    want = {
        "n": s.n,
        "correct": s.correct,
        "accuracy": s.average,
        "ci": [s.ci_low, s.ci_high],
        "balanced_accuracy": s.balanced_accuracy,
        "worst_group": s.worst_group.group,
        "worst_group_accuracy": s.worst_group.accuracy,
        "chance_balanced_accuracy": s.chance.balanced_accuracy,
        "chance_accuracy": s.chance.whole.accuracy,
    }
    assert 0 < s.correct < s.n and s.balanced_accuracy != s.average  # a mixed result: every figure says something

    def figures(split) -> dict:
        return {
            "n": split.n,
            "correct": split.correct,
            "accuracy": split.average,
            "ci": [split.ci_low, split.ci_high],
            "balanced_accuracy": split.balanced_accuracy,
            "worst_group": split.worst_group.group,
            "worst_group_accuracy": split.worst_group.accuracy,
            "chance_balanced_accuracy": split.chance.balanced_accuracy,
            "chance_accuracy": split.chance.whole.accuracy,
        }

    # train's own scores, its aggregate over seeds and the seed's scores.json
    assert figures(run.scores.splits["test"]) == want
    agg = trained.aggregate()
    assert agg["headline_split"] == "test" and agg["balanced_accuracy"]["mean"] == want["balanced_accuracy"]
    on_disk = json.loads((tmp_path / "train" / "seed-0" / "scores.json").read_text())
    assert on_disk["balanced_accuracy"] == want["balanced_accuracy"] and on_disk["average"] == want["accuracy"]
    assert on_disk["chance"]["balanced_accuracy"] == want["chance_balanced_accuracy"]

    # the Evaluator, on arrays in its row order
    ev = Evaluator(task)
    probs = preds.set_index("image_id").loc[ev.image_ids("test"), [f"prob_{c}" for c in plan.classes]].to_numpy()
    assert figures(ev.eval(probs, split="test").splits["test"]) == want

    # experiment compare: its results.csv rows of the same training (the backbone is the tiny one)
    monkeypatch.setattr(compare_mod, "load_backbone", lambda *a, **k: bb)
    cmp = run_compare(
        ["erm"], [TASK], TaskOrigin(artifact=art, images=images), tmp_path / "cmp", cfg, cache_dir=tmp_path / "cache"
    )
    cmp_preds = read_csv(tmp_path / "cmp" / "runs" / TASK / "erm" / "seed-0" / "predictions.csv")
    pd.testing.assert_frame_equal(
        cmp_preds.astype({"image_id": str}), preds.reset_index(drop=True).astype({"image_id": str}), check_dtype=False
    )  # the same training, so the same predictions
    table = read_csv(tmp_path / "cmp" / "results.csv").set_index("metric")
    assert table.loc["average", "value"] == want["accuracy"]
    assert [table.loc["average", "ci_low"], table.loc["average", "ci_high"]] == want["ci"]
    assert table.loc["balanced_accuracy", "value"] == want["balanced_accuracy"]
    assert table.loc["worst_group", "value"] == want["worst_group_accuracy"]
    assert table.loc["chance_balanced_accuracy", "value"] == want["chance_balanced_accuracy"]
    assert cmp.table.set_index("metric").loc["balanced_accuracy", "value"] == want["balanced_accuracy"]

    # evaluate and the zoo: an ImageNet head whose top-1 is a leaf of the trained prediction, image by image
    model = head_for(dict(zip(preds["image_id"].astype(str), preds["prediction"])), images, plan.classes)
    rep = evaluate(model, task, tmp_path / "eval", settings=QUIET)
    for head in (rep.metrics["headline"], json.loads((tmp_path / "eval" / "report.json").read_text())["headline"]):
        assert head["split"] == "test"
        got = {k: head[k] for k in ("n", "correct", "accuracy", "ci", "balanced_accuracy", "worst_group")}
        got |= {
            "worst_group_accuracy": head["worst_group_accuracy"],
            "chance_balanced_accuracy": head["baseline"]["balanced_accuracy"],
            "chance_accuracy": head["baseline"]["accuracy"],
        }
        assert got == want
    zoo = evaluate_zoo(
        [model], [TASK], TaskOrigin(artifact=art, images=images), tmp_path / "zoo", settings=QUIET,
        cache=CacheConfig(use=False),
    )  # fmt: skip
    csv = read_csv(tmp_path / "zoo" / "leaderboard.csv")  # written with 10 significant digits (%.10g)
    for board, digits in ((zoo.leaderboard, lambda x: x), (csv, lambda x: float(f"{x:.10g}"))):
        rows = board.set_index("model")
        m, b = rows.loc["module:lookup"], rows.loc[[i for i in rows.index if i != "module:lookup"][0]]
        assert int(m["n"]) == want["n"] and int(m["correct"]) == want["correct"]
        assert m["accuracy"] == digits(want["accuracy"])
        assert [m["ci_low"], m["ci_high"]] == [digits(x) for x in want["ci"]]
        assert m["balanced_accuracy"] == digits(want["balanced_accuracy"])
        assert m["worst_group"] == want["worst_group"]
        assert m["worst_group_accuracy"] == digits(want["worst_group_accuracy"])
        assert b["balanced_accuracy"] == digits(want["chance_balanced_accuracy"])
        assert b["accuracy"] == digits(want["chance_accuracy"])
