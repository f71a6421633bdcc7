"""End to end on the real shared JPEGs with the real EfficientNet-Lite0 weights.

The top-1 classes pinned below were checked by eye against the images (e.g. 2375429 shows two white
horses in harness -> 'horse cart'; 2405722 a white cockatoo; vg/5 a desk with a monitor and shelves).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


pytest.importorskip("torch")
datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.slow  # a real model over real images

from metashift_hf.core.errors import InputFormatError, MetashiftError, MissingImagesError, UnknownNameError  # noqa: E402
from metashift_hf.evaluate import EvalConfig, evaluate  # noqa: E402
from metashift_hf.evaluate.predict import predict  # noqa: E402
from metashift_hf.evaluate.predictions import load_scorer  # noqa: E402
from metashift_hf.models import load_model, require_torch  # noqa: E402
from metashift_hf.scoring.per_group import PER_GROUP_COLUMNS  # noqa: E402


# image id -> (folder, ImageNet-1k top-1 index, its name), verified by looking at each image
TOP1 = {
    "2375429": ("gqa", 603, "horse cart"),  # two white draft horses in harness
    "2405722": ("gqa", 89, "sulphur-crested cockatoo"),  # white cockatoo, palms behind
    "1339": ("gqa", 923, "plate"),  # plate of noodles, chicken and beans on a table
    "2354786": ("gqa", 468, "cab"),  # a Jaguar car in a street at night
    "n166008": ("gqa", 934, "hotdog"),  # a man biting into a long sandwich
    "2368326": ("gqa", 698, "palace"),  # old town street with a clock tower
    "5": ("vg", 526, "desk"),  # room with a desk, monitor and bookshelves
    "2415125": ("vg", 579, "grand piano"),  # man and child with a suitcase beside a piano
    "2": ("vg", 920, "traffic light"),  # street corner with a traffic/pedestrian light
}

CLASSES = ["bird", "bus", "car", "horse", "piano", "table"]
# split, image id, folder, label (by eye), contexts, community
ROWS = [
    ("validation", "2354786", "gqa", "car", ["night", "street"], 0),
    ("test", "2", "vg", "car", ["street"], 0),
    ("test", "1", "vg", "car", ["street", "tree"], 1),
    ("test", "2415126", "vg", "bus", ["blue"], 0),
    ("validation", "2375429", "gqa", "horse", ["white", "fence"], 0),
    ("validation", "2405722", "gqa", "bird", ["white", "tree"], 0),
    ("validation", "5", "vg", "table", ["room", "chair"], 0),
    ("test", "4", "vg", "table", ["couch", "room"], 1),
    ("test", "1339", "gqa", "table", ["plate"], 1),
    ("validation", "2415125", "vg", "piano", ["room"], 0),
]
# hierarchy mode (WordNet 3.0 hierarchy), checked by hand: cab is under car.n.01, desk under table.n.02,
# grand piano under piano.n.01, cockatoo under bird.n.01; horse cart is NOT under horse.n.01, golf cart
# is not a bus, traffic light / parking meter are not cars, sliding door / plate are not tables.
HIERARCHY_CORRECT = {
    "2354786": True,
    "2": False,
    "1": False,
    "2415126": False,
    "2375429": False,
    "2405722": True,
    "5": True,
    "4": False,
    "1339": False,
    "2415125": True,
}
# restricted to the six classes: the horse-cart image becomes 'horse', the plate image 'table', the
# street with a traffic light 'car'; the bus (seen as a golf cart) becomes 'car'.
RESTRICTED_PRED = {
    "2354786": "car",
    "2": "car",
    "1": "bus",
    "2415126": "car",
    "2375429": "horse",
    "2405722": "bird",
    "5": "table",
    "4": "piano",
    "1339": "table",
    "2415125": "piano",
}


def _task(ref: Path):
    feats = datasets.Features(
        {
            "image": datasets.Image(),
            "image_id": datasets.Value("string"),
            "label": datasets.ClassLabel(names=CLASSES),
            "contexts": datasets.Sequence(datasets.Value("string")),
            "group": datasets.Value("string"),
            "community": datasets.Value("int64"),
        }
    )
    out = {}
    for split in ("validation", "test"):
        rows = [r for r in ROWS if r[0] == split]
        out[split] = datasets.Dataset.from_dict(
            {
                "image": [
                    {"bytes": (ref / "images" / f / f"{i}.jpg").read_bytes(), "path": f"{i}.jpg"}
                    for _, i, f, *_ in rows
                ],
                "image_id": [r[1] for r in rows],
                "label": [CLASSES.index(r[3]) for r in rows],
                "contexts": [r[4] for r in rows],
                "group": [f"{r[3]}({r[4][0]})" for r in rows],
                "community": [r[5] for r in rows],
            },
            features=feats,
        )
    return datasets.DatasetDict(out)


@pytest.fixture(scope="module")
def model():
    return load_model("efficientnet-lite0")


@pytest.fixture(scope="module")
def task(shared_ref):
    return _task(shared_ref)


@pytest.fixture(scope="module")
def run_hier(tmp_path_factory, model, task):
    out = tmp_path_factory.mktemp("eval") / "hier"
    report = evaluate(model, task, out=out, settings=EvalConfig(min_subset_size=1, progress=False, save_logits=True))
    return report, out


def test_top1_predictions_are_real(shared_ref, model):
    ids = sorted(TOP1)
    read = lambda i: (shared_ref / "images" / TOP1[i][0] / f"{i}.jpg").read_bytes()
    preds = predict(model, ids, read, batch_size=4, progress=False)
    assert dict(zip(ids, preds.top1.tolist())) == {i: TOP1[i][1] for i in ids}
    # batching does not change the numbers (beyond float noise)
    again = predict(model, ids, read, batch_size=len(ids), workers=1, progress=False)
    np.testing.assert_allclose(preds.logits, again.logits, rtol=1e-4, atol=1e-4)
    card = model.card()
    assert card["weights_sha256"] == "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
    assert card["preprocessing"]["crop"] == 224 and card["preprocessing"]["resize"] == 256


def test_hierarchy_scoring_hand_checked(run_hier):
    report, out = run_hier
    pred = pd.read_csv(out / "predictions.csv", dtype={"image_id": str})
    assert dict(zip(pred.image_id, pred.correct)) == HIERARCHY_CORRECT
    assert report["overall"]["n"] == 10 and report["overall"]["correct"] == 4
    assert report["run"]["hierarchy"] == "wordnet"
    assert report["run"]["hierarchy_detail"]["classes"]["horse"]["synset"] == "horse.n.01"
    gap = report["id_vs_ood"]
    assert (gap["id_split"], gap["ood_split"]) == ("validation", "test")
    assert gap["id"]["accuracy"] == pytest.approx(0.8) and gap["ood"]["accuracy"] == 0.0
    assert gap["relative_drop"] == pytest.approx(1.0)
    for name in ("report.json", "report.md", "per_group.csv", "predictions.csv"):
        assert (out / name).stat().st_size > 0
    assert sorted(p.name for p in (out / "plots").iterdir()) == [f"{c}.png" for c in CLASSES]
    assert (out / "plots" / "car.png").read_bytes()[:4] == b"\x89PNG"
    assert "horse" in report.summary() and "ID (validation) 80.0% vs OOD (test) 0.0%" in report.summary()


def _wilson(k, n, z=1.959963984540054):
    # written out independently of metashift_hf.scoring.stats
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    a = 2 * n * p + z * z
    b = z * math.sqrt(z * z + 4 * n * p * (1 - p))
    return ((a - b) / (2 * (n + z * z)), (a + b) / (2 * (n + z * z)))


def test_report_numbers_recomputed_from_csv(run_hier):
    report, out = run_hier
    pred = pd.read_csv(out / "predictions.csv", dtype={"image_id": str}, keep_default_na=False)
    groups = pd.read_csv(out / "per_group.csv", keep_default_na=False, dtype={"split": str, "name": str, "class": str})
    assert list(groups.columns) == list(PER_GROUP_COLUMNS)
    js = json.loads((out / "report.json").read_text())
    pred["ctx"] = [set(c.split("|")) if c else set() for c in pred.contexts]
    for _, g in groups.iterrows():
        part = pred if g.split == "overall" else pred[pred.split == g.split]
        if g.level == "all":
            assert g["name"] == g.split
        elif g.level == "class":
            part = part[part.label == g["class"]]
        elif g.level == "context":
            ctx = g["name"][len(g["class"]) + 1 : -1]  # the subset is class(context)
            part = part[(part.label == g["class"]) & part.ctx.map(lambda s: ctx in s)]
        elif g.level == "community":
            assert g["name"] == f"{g['class']}/{g.community}"
            part = part[(part.label == g["class"]) & (part.community == int(g.community))]
        else:
            raise AssertionError(g.level)
        assert (g.n, g.correct) == (len(part), int(part.correct.sum())), (g.level, g["class"], g["name"])
        assert float(g.accuracy) == pytest.approx(part.correct.mean())
        lo, hi = _wilson(g.correct, g.n)
        assert (float(g.ci_low), float(g.ci_high)) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))
    row = lambda level, split="overall", name="overall": groups[
        (groups.level == level) & (groups.split == split) & (groups["name"] == name)
    ].iloc[0]
    assert js["overall"]["accuracy"] == pytest.approx(float(row("all").accuracy))
    assert js["overall"]["ci"] == [pytest.approx(float(row("all").ci_low)), pytest.approx(float(row("all").ci_high))]
    for c in CLASSES:
        assert js["classes"][c]["n"] == int(row("class", name=c).n)
        assert js["classes"][c]["accuracy"] == pytest.approx(float(row("class", name=c).accuracy))
    a_id, a_ood = float(row("all", "validation", "validation").accuracy), float(row("all", "test", "test").accuracy)
    assert js["id_vs_ood"]["gap"] == pytest.approx(a_id - a_ood)
    assert js["id_vs_ood"]["relative_drop"] == pytest.approx((a_id - a_ood) / a_id)
    ctx = groups[groups.level == "context"].copy()
    ctx["accuracy"] = ctx.accuracy.astype(float)
    worst = ctx.sort_values(["accuracy", "n", "name"], ascending=[True, False, True]).iloc[0]
    assert js["worst_subset"]["subset"] == worst["name"]
    # context tests: rest = the class's images outside the subset
    tested = ctx[ctx.p_value != ""]
    assert len(tested) == js["bug_test"]["n_tests"] > 0
    for _, g in tested.iterrows():
        context = g["name"][len(g["class"]) + 1 : -1]
        rest = pred[(pred.label == g["class"]) & ~pred.ctx.map(lambda s: context in s)]
        assert (int(g.rest_n), int(g.rest_correct)) == (len(rest), int(rest.correct.sum()))


def test_restricted_mode(tmp_path, model, task):
    report = evaluate(
        model, task, out=tmp_path / "r", settings=EvalConfig(mode="restricted", min_subset_size=1, progress=False)
    )
    pred = pd.read_csv(tmp_path / "r" / "predictions.csv", dtype={"image_id": str})
    assert dict(zip(pred.image_id, pred.pred_class)) == RESTRICTED_PRED
    assert report["overall"]["correct"] == sum(RESTRICTED_PRED[i] == r[3] for r in ROWS for i in [r[1]]) == 7
    assert report["run"]["mode"] == "restricted"


def test_precomputed_predictions_match_the_model(tmp_path, task, run_hier):
    base, out = run_hier
    pq = out / "logits.parquet"  # written by --save-logits: the round trip must reproduce the run
    saved = pd.read_parquet(pq)
    ids = saved.image_id.tolist()
    assert sorted(ids) == sorted(r[1] for r in ROWS) and all(len(v) == 1000 for v in saved.logits)
    csv = tmp_path / "top1.csv"
    pd.DataFrame({"image_id": ids, "imagenet_index": [int(np.argmax(v)) for v in saved.logits]}).to_csv(
        csv, index=False
    )
    for spec in (f"predictions:{pq}", f"predictions:{csv}"):
        rep = evaluate(spec, task, settings=EvalConfig(min_subset_size=1, progress=False))
        assert rep["overall"] == base["overall"] and rep["classes"] == base["classes"]
        assert rep["run"]["model"]["file_sha256"]
    rest = evaluate(f"predictions:{pq}", task, settings=EvalConfig(mode="restricted", progress=False))
    assert rest["overall"]["correct"] == 7
    with pytest.raises(InputFormatError, match="restricted scoring needs logits"):
        evaluate(
            f"predictions:{csv}", task, out=tmp_path / "never", settings=EvalConfig(mode="restricted", progress=False)
        )
    assert not (tmp_path / "never").exists()  # nothing half-written
    pd.DataFrame({"image_id": ids[:3], "imagenet_index": [1, 2, 3]}).to_csv(tmp_path / "few.csv", index=False)
    with pytest.raises(MissingImagesError, match="7 of the task's 10"):
        evaluate(f"predictions:{tmp_path / 'few.csv'}", task, settings=EvalConfig(progress=False))
    pd.DataFrame({"image_id": ids, "imagenet_index": [1000] * 10}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(InputFormatError, match="0-999"):
        load_scorer(f"predictions:{tmp_path / 'bad.csv'}")
    with pytest.raises(InputFormatError, match="does not exist"):
        load_scorer(f"predictions:{tmp_path / 'nope.csv'}")


def test_same_inputs_same_outputs(tmp_path, model, task, run_hier):
    report, out = run_hier
    again = evaluate(model, task, out=tmp_path / "again", settings=EvalConfig(min_subset_size=1, progress=False))
    for name in ("report.json", "per_group.csv", "predictions.csv", "report.md"):
        a, b = (out / name).read_text(), (tmp_path / "again" / name).read_text()
        assert a.replace(str(out), "OUT") == b.replace(str(tmp_path / "again"), "OUT"), name
    assert (out / "plots" / "table.png").read_bytes() == (tmp_path / "again" / "plots" / "table.png").read_bytes()
    assert again["run"]["task_content_hash"] == report["run"]["task_content_hash"]


def test_callable_model_and_bad_outputs(task):
    calls = []

    def always_tabby(images):
        calls.append(len(images))
        assert all(im.mode == "RGB" for im in images)
        out = np.zeros((len(images), 1000), dtype=np.float32)
        out[:, 281] = 1.0  # tabby cat: never correct for these classes
        return out

    rep = evaluate(always_tabby, task, settings=EvalConfig(batch_size=4, progress=False))
    assert rep["overall"]["correct"] == 0 and sum(calls) == 10 and max(calls) == 4
    assert rep["run"]["model"]["name"] == "callable:always_tabby"
    with pytest.raises(InputFormatError, match=r"shape \(4, 10\)"):
        evaluate(lambda ims: np.zeros((len(ims), 10)), task, settings=EvalConfig(batch_size=4, progress=False))


def test_unavailable_models_give_clear_errors(monkeypatch, tmp_path):
    import sys

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))  # no cached weights, whatever this machine holds
    with pytest.raises(MetashiftError, match="torchvision") as e:  # installed ([all]): its weights are not cached
        load_model("torchvision:resnet50")
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "torchvision", None)  # as if the torchvision extra were absent
        with pytest.raises(MetashiftError, match="torchvision") as e:
            load_model("torchvision:resnet50")
        assert "metashift-hf[torchvision]" in e.value.fix
        m.setitem(sys.modules, "timm", None)
        with pytest.raises(MetashiftError, match="timm"):
            load_model("timm:resnet50")
    with pytest.raises(UnknownNameError, match="unknown --model"):
        load_model("resnet")
    monkeypatch.setitem(__import__("sys").modules, "torch", None)  # as if the eval extra were absent
    with pytest.raises(MetashiftError) as e:
        require_torch()
    assert "metashift-hf[eval]" in e.value.fix


def test_tree_hierarchy_and_unmatched_class(shared_ref, task, run_hier, tmp_path):
    from metashift_hf.core.errors import EmptyResultError
    from metashift_hf.evaluate.coverage import class_coverage

    tree = f"tree:{shared_ref / 'metashift' / 'imagenet1k_node_names.json'}"
    ids = [r[1] for r in ROWS]
    pred = pd.read_csv(run_hier[1] / "predictions.csv", dtype={"image_id": str}).set_index("image_id")
    pd.DataFrame({"image_id": ids, "imagenet_index": [pred.at[i, "pred_index"] for i in ids]}).to_csv(
        tmp_path / "p.csv", index=False
    )
    rep = evaluate(f"predictions:{tmp_path / 'p.csv'}", task, settings=EvalConfig(hierarchy=tree, progress=False))
    assert rep["run"]["hierarchy"] == tree
    # the published tree covers the same leaves for these six classes, so the verdicts agree
    assert rep["overall"] == run_hier[0]["overall"]
    with pytest.raises(EmptyResultError, match="sky") as e:
        class_coverage(["dog", "sky"], "wordnet")
    assert "--hierarchy" in e.value.fix
