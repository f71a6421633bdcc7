"""How to use a task, as its card shows it: the recommended metric, loading and scoring examples, and
evaluation commands with time estimates (eval_cost.json)."""

from __future__ import annotations

import json
import shlex
from importlib import resources
from typing import Any

from metashift_hf.tasks import subpopbench

from .card_task import CardTask
from .shift_words import is_no_shift_level


def recommended_metric(info: CardTask) -> str:
    """How to score and report this task, by shift type (what `metashift-hf score` computes)."""
    kind = info.spec.shift_type
    if getattr(info.spec, "registry", None) is not None:
        return (
            "Report **accuracy per class and per context with 95% intervals, the worst context and the context bugs** "
            "of pretrained ImageNet-1k classifiers (top-1 counted correct when it lies under the class's matched "
            "WordNet synset, or restricted to the task's classes), as `metashift-hf evaluate` computes them."
        )
    if kind == "conditional":
        val = info.group_rows.get("validation") or {}
        few = (
            (
                f" The `validation` split is small per group (as few as {min(val.values()):,} images in a group: "
                f"{', '.join(f'`{g}` {n:,}' for g, n in sorted(val.items(), key=lambda x: x[1])[:3])}), so "
                "worst-group accuracy on it is noisy: select models on it with care and report intervals."
            )
            if val
            else ""
        )
        return (
            "Report **average and worst-group accuracy on `test`** (groups: the `group` field), each with a 95% "
            "interval, and the training minority fraction p." + few
        )
    if kind in ("marginal", "joint"):
        return (
            "Report **accuracy on `test` (out of distribution) next to in-distribution accuracy** (`id_test`, "
            "else `validation`), the gap between them, and per-group accuracy (`group` field), each with a 95% "
            "interval; name the distance d of the shift."
        )
    if info.spec.task_id == subpopbench.TASK_ID:
        return (
            "Report **worst-group and average accuracy on `test`** (groups: the `group` field) with 95% intervals, "
            "as SubpopBench does; its `adjusted_accuracy` is the unweighted mean of the group accuracies "
            "(`metashift-hf score` prints it as `SubpopBench adjusted_accuracy`, beside our adjusted average, which "
            "weights each group by its share of train)."
        )
    if is_no_shift_level(info.spec):
        return (
            "No shift by design between train and test (a no-shift control): report accuracy on `test` next to "
            "in-distribution accuracy (`id_test`) and the gap, and per-group accuracy (`group` field), with 95% "
            "intervals, as the reference point of its family's shifted levels."
        )
    return "No designed shift: report per-group accuracy (`group` field) with 95% intervals."


def load_example(info: CardTask) -> str:
    row = {"image": "<PIL.Image: the original JPEG>", **info.example}
    return "```python\n{\n" + "\n".join(f"    {k!r}: {v!r}," for k, v in row.items()) + "\n}\n```"


def score_example(info: CardTask) -> str:
    """The Evaluator snippet: ID and OOD in one call where the task has both (the ID split as
    ``tasks.splits.split_roles`` picks it), else the test split alone."""
    splits = info.split_rows
    iid = next((s for s in ("id_test", "validation") if s in splits), None)
    lines = [
        "```python",
        "import numpy as np",
        "import metashift_hf",
        "",
        "ev = metashift_hf.Evaluator(ds)  # rows are matched by image_id: ds may be shuffled or select()-ed",
    ]
    if iid and "test" in splits and not info.spec.collection:
        lines += [
            f'y_id = np.zeros(len(ds["{iid}"]), dtype=np.int64)  # your model\'s class indices, in ds["{iid}"] row order',
            'y_ood = np.zeros(len(ds["test"]), dtype=np.int64)  # the same for ds["test"]',
            f'print(ev.eval({{"{iid}": y_id, "test": y_ood}}))  # average, worst group and class, intervals, ID vs OOD',
        ]
    else:
        lines += [
            'y_pred = np.zeros(len(ds["test"]), dtype=np.int64)  # your model\'s class indices, in ds["test"] row order',
            'print(ev.eval(y_pred, split="test"))  # average, worst group and class, intervals',
        ]
    lines += [
        'groups = ev.grouping("group", split="train")  # integer group ids (and their names) for reweighting or GroupDRO',
        "```",
    ]
    return "\n".join(lines)


# The measured per-image cost of evaluate's model pass (benchmarks/bench_eval.py cost --write), package data:
# the cards' time estimates are that cost x the images a command scores, never a number typed into a template.
EVAL_COST_FILE = "eval_cost.json"


QUICK_SAMPLE = 100  # the quick variant's --sample: images of the test split


QUICK_IMAGE_SIZE = 128  # the quick variant's --image-size


FULL_IMAGE_SIZE = 224  # EfficientNet-Lite0's own input side (models.lite0), the full command's


def eval_cost() -> dict[str, Any]:
    """The measured cost file: ``seconds_per_image`` by input side (\"224\", \"128\"), the ``machine`` it was measured on."""
    return json.loads((resources.files("metashift_hf.cards") / EVAL_COST_FILE).read_text(encoding="utf-8"))


def estimated_seconds(images: int, image_size: int, cost: dict[str, Any]) -> int:
    """Seconds of Lite0's model pass over ``images`` at ``image_size`` px: the measured per-image cost x images (>= 1)."""
    return max(1, round(cost["seconds_per_image"][str(image_size)] * images))


def _duration(seconds: int) -> str:
    return f"about {seconds:,} s" + (f" ({seconds / 60:.0f} min)" if seconds >= 120 else "")


def _quick_variant(info: CardTask, task: str) -> str:
    """The quick evaluate (test split, a sample, 128 px) with its time and the full run's, both from the measured cost."""
    test = info.split_images.get("test")
    if not test:
        return ""
    cost = eval_cost()
    quick = min(QUICK_SAMPLE, test)
    full = sum(info.split_images.values())  # no image is in two splits
    full_s = estimated_seconds(full, FULL_IMAGE_SIZE, cost)
    quick_s = estimated_seconds(quick, QUICK_IMAGE_SIZE, cost)
    return (
        f"Or a quick look: the test split only, {quick:,} of its {test:,} images, fed at {QUICK_IMAGE_SIZE} px instead "
        f"of the model's {FULL_IMAGE_SIZE} (the report says it is not the full-resolution score). EfficientNet-Lite0's model pass "
        f"on {cost['machine']}: {_duration(quick_s)} for this, {_duration(full_s)} for the {full:,} images of the "
        f"full run above (measured {cost['seconds_per_image'][str(QUICK_IMAGE_SIZE)]} and "
        f"{cost['seconds_per_image'][str(FULL_IMAGE_SIZE)]} s per image by `benchmarks/bench_eval.py cost`; model loading and "
        "scoring add a few seconds):\n\n"
        f"```bash\nmetashift-hf evaluate --model efficientnet-lite0 --task {task} --splits test --sample {QUICK_SAMPLE} "
        f"--image-size {QUICK_IMAGE_SIZE} --out eval-quick\n```\n\n"
    )


def usage(info: CardTask) -> str:
    """Commands that run as written with only this package and this repo (tests run them verbatim)."""
    task = f"{shlex.quote(info.repo_id)} --config {info.task_id}"
    if (
        getattr(info.spec, "registry", None) is not None
    ):  # matched to ImageNet-1k: what a pretrained classifier gets right
        return (
            "Evaluate a pretrained ImageNet-1k classifier (`--model efficientnet-lite0`, whose weights ship with "
            "the package, or another model of the registry: docs/evaluate.md): accuracy per class and per context "
            "with intervals, worst context and context bugs:\n\n"
            f"```bash\nmetashift-hf evaluate --model efficientnet-lite0 --task {task} --out eval-lite0\n```\n\n"
            f"{_quick_variant(info, task)}"
            f"Or score your own model's predictions on the task's classes from Python:\n\n{score_example(info)}"
        )
    return (
        "Score your model inside its training loop (numpy or torch arrays; the truth and the groups come from the "
        f"task):\n\n{score_example(info)}\n\nOr from the shell: an ERM baseline (a linear probe on EfficientNet-Lite0 "
        "features), then the scores of its predictions (`score` takes any model's .csv with `image_id` and "
        "`prediction` or `prob_<class>` columns):\n\n"
        f"```bash\nmetashift-hf train --task {task} --probe linear --out runs-erm\n"
        f"metashift-hf score --task {task} --predictions runs-erm/seed-0/predictions.csv --out scores-erm\n```"
    )
