"""The evaluation report: report.json, report.md, per_group.csv, predictions.csv and one chart per class."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa

from metashift_hf.wordnet_match.imagenet import imagenet_classes

from ..core.errors import InputFormatError
from ..core.fsutil import atomic_dir, write_parquet
from ..core.names import file_stem, markdown_safe, terminal_safe
from ..models import LabelMap
from ..scoring.per_group import from_group_table, write_per_group
from .config import EvalConfig
from .predictions import HeadOutputs


REPORT_KIND = "evaluation report"  # the marker kind of an evaluate --out folder (core.fsutil)


def _clean(value: Any) -> Any:
    """JSON-safe values: NaN -> None, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is pd.NA:
        return None
    return value


class EvalReport(Mapping):
    """Metrics of one evaluation, dict-like (``report["overall"]["accuracy"]``), plus ``summary()``."""

    def __init__(self, metrics: dict[str, Any], out: Path | None = None) -> None:
        self.metrics = _clean(metrics)
        self.out = out

    def __getitem__(self, key: str) -> Any:
        return self.metrics[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.metrics)

    def __len__(self) -> int:
        return len(self.metrics)

    def __repr__(self) -> str:
        o = self.metrics["overall"]
        return f"EvalReport(model={self.metrics['run']['model']['name']!r}, task={self.metrics['run']['task_id']!r}, accuracy={o['accuracy']:.4f}, n={o['n']})"

    def summary(self) -> str:
        m = self.metrics
        run, o = m["run"], m["overall"]
        lines = [
            f"{terminal_safe(run['model']['name'])} on {terminal_safe(run['task_id'])}  "
            f"(scoring: {run['mode']}, hierarchy: {terminal_safe(run['hierarchy'])})",
            *quick_lines(run),
            *headline_lines(m.get("headline"), _pct),
            f"all scored splits pooled: accuracy {_pct(o['accuracy'])} [{_pct(o['ci'][0])}, {_pct(o['ci'][1])}]  n={o['n']}",
        ]
        gap = m.get("id_vs_ood")
        if gap:
            drop = "n/a" if gap["relative_drop"] is None else _pct(gap["relative_drop"])
            lines.append(
                f"ID ({gap['id_split']}) {_pct(gap['id']['accuracy'])} vs OOD ({gap['ood_split']}) "
                f"{_pct(gap['ood']['accuracy'])}: gap {_pct(gap['gap'])}, relative drop {drop}"
            )
        lines.append(
            f"{'class':<16}{'n':>7}{'accuracy':>10}  {'95% CI':<17}worst context (n >= {m['min_subset_size']})"
        )
        for cls, c in m["classes"].items():
            w = c.get("worst_context")
            worst = f"{w['subset']} {_pct(w['accuracy'])} (n={w['n']})" if w else "-"
            lines.append(
                f"{cls:<16}{c['n']:>7}{_pct(c['accuracy']):>10}  [{_pct(c['ci'][0])}, {_pct(c['ci'][1])}]".ljust(52)
                + worst
            )
        ws = m.get("worst_subset")
        if ws:
            lines.append(
                f"worst subset: {ws['subset']} {_pct(ws['accuracy'])} [{_pct(ws['ci'][0])}, {_pct(ws['ci'][1])}] n={ws['n']}"
            )
        bugs = m["context_bugs"]
        lines.append(
            f"context bugs (one-sided two-proportion test, BH q < {m['bug_test']['alpha']} over {m['bug_test']['n_tests']} tests): {len(bugs)}"
        )
        for b in bugs[:10]:
            d = b.get("distance_to_largest_community")
            dist = "" if d is None else f", distance to largest community {d:.3f}"
            lines.append(
                f"  {b['subset']}: {_pct(b['accuracy'])} (n={b['n']}) vs rest {_pct(b['rest_accuracy'])} (n={b['rest_n']}), q={b['q_value']:.2g}{dist}"
            )
        if self.out:
            lines.append(f"report: {self.out / 'report.md'}")
        return "\n".join(lines)


def quick_lines(run: dict) -> list[str]:
    """A line saying that the run is not the model's full-resolution score (--image-size), else none."""
    side = run.get("image_size")
    return (
        []
        if side is None
        else [
            f"quick run: images fed at {side}x{side} px (--image-size), not the model's own "
            "input size: scores are not its full-resolution scores"
        ]
    )


def headline_lines(h: dict | None, pct, safe=terminal_safe) -> list[str]:
    """The headline (scoring.HEADLINE_RULE) and its majority-class baseline, in two lines."""
    if not h:
        return ["headline: no held-out split scored (train is never a headline)"]
    b = h["baseline"]
    return [
        f"headline ({h['split']}, n={h['n']}): balanced accuracy {pct(h['balanced_accuracy'])}, worst group "
        f"{safe(h['worst_group'])} {pct(h['worst_group_accuracy'])}, accuracy {pct(h['accuracy'])} "
        f"[{pct(h['ci'][0])}, {pct(h['ci'][1])}]",
        f"chance (always {safe(b['predicts'])}, the split's majority class): balanced accuracy "
        f"{pct(b['balanced_accuracy'])}, worst group {pct(b['worst_group_accuracy'])}, accuracy {pct(b['accuracy'])}",
    ]


def _pct(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def render_markdown(report: EvalReport, per_group: pd.DataFrame) -> str:
    m = report.metrics
    run = m["run"]
    model = run["model"]
    out = [f"# {markdown_safe(model['name'])} on {markdown_safe(run['task_id'])}", ""]
    out += ["## Run card", "", "| field | value |", "|---|---|"]
    prep = model["preprocessing"]
    prep_txt = (
        prep
        if isinstance(prep, str)
        else ", ".join(
            f"{k}={[round(x, 4) for x in v] if isinstance(v, (list, tuple)) else v}"
            for k, v in prep.items()
            if k != "source"
        )
    )
    for k, v in [
        ("package version", run["package_version"]),
        ("task", run["task_id"]),
        ("task content hash", run["task_content_hash"]),
        ("task origin", origin_words(run.get("task_origin"))),
        ("artifact hash", run.get("artifact_hash")),
        ("model", model["name"]),
        ("weights sha256", model.get("weights_sha256") or model.get("file_sha256")),
        ("preprocessing", prep_txt),
        ("scoring mode", run["mode"]),
        ("hierarchy", run["hierarchy"]),
        ("seed", run["seed"]),
        ("device", model.get("device", "-")),
        ("image size", run.get("image_size") or "the model's own (full resolution)"),
    ]:
        out.append(f"| {k} | {markdown_safe(v)} |")
    out += ["", *(x for line in quick_lines(run) for x in (f"**{line}.**", "")), f"Counting: {m['counting']}.", ""]
    o = m["overall"]
    if m.get("headline"):
        out += ["## Headline", "", *(f"{line}  " for line in headline_lines(m["headline"], _pct, markdown_safe)), ""]
    out += [
        "## All scored splits pooled",
        "",
        f"Accuracy **{_pct(o['accuracy'])}** (95% Wilson [{_pct(o['ci'][0])}, {_pct(o['ci'][1])}]), {o['correct']}/{o['n']} images.",
        "",
    ]
    if m["splits"]:
        gap = m.get("id_vs_ood") or {}
        role = {gap.get("id_split"): "ID", gap.get("ood_split"): "OOD"}
        out += ["| split | role | n | correct | accuracy | 95% CI |", "|---|---|---:|---:|---:|---|"]
        for s, v in m["splits"].items():
            out.append(
                f"| {s} | {role.get(s, '')} | {v['n']} | {v['correct']} | {_pct(v['accuracy'])} | [{_pct(v['ci'][0])}, {_pct(v['ci'][1])}] |"
            )
        out.append("")
    gap = m.get("id_vs_ood")
    if gap:
        drop = "n/a" if gap["relative_drop"] is None else _pct(gap["relative_drop"])
        out += [
            f"ID ({gap['id_split']}) {_pct(gap['id']['accuracy'])} vs OOD ({gap['ood_split']}) {_pct(gap['ood']['accuracy'])}: "
            f"absolute gap {_pct(gap['gap'])}, relative drop (ID − OOD)/ID {drop}.",
            "",
        ]
    out += [
        "## Per class",
        "",
        f"| class | n | accuracy | 95% CI | contexts | worst context (n ≥ {m['min_subset_size']}) |",
        "|---|---:|---:|---|---:|---|",
    ]
    for cls, c in m["classes"].items():
        w = c.get("worst_context")
        worst = f"{markdown_safe(w['subset'])}: {_pct(w['accuracy'])} (n={w['n']})" if w else "—"
        out.append(
            f"| {markdown_safe(cls)} | {c['n']} | {_pct(c['accuracy'])} | [{_pct(c['ci'][0])}, {_pct(c['ci'][1])}] | {c['n_contexts']} | {worst} |"
        )
    out.append("")
    bugs = m["context_bugs"]
    bt = m["bug_test"]
    description = bt["description"].replace("--min-subset-size", str(bt["min_n"]))
    out += [
        "## Context bugs",
        "",
        f"{description} {bt['n_tests']} tests, {len(bugs)} significant at q < {bt['alpha']}.",
        "",
    ]
    if bugs:
        out += [
            "| subset | n | accuracy | rest n | rest accuracy | p | q | community | distance to largest community |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for b in bugs:
            d = b.get("distance_to_largest_community")
            out.append(
                f"| {markdown_safe(b['subset'])} | {b['n']} | {_pct(b['accuracy'])} | {b['rest_n']} | {_pct(b['rest_accuracy'])} | {b['p_value']:.2g} | "
                f"{b['q_value']:.2g} | {'' if b.get('community') is None else b['community']} | {'' if d is None else f'{d:.3f}'} |"
            )
        out.append("")
    out += [
        "## Context subsets",
        "",
        f"All context subsets, worst first ({len(per_group[per_group.level == 'context'])} rows; full table in per_group.csv).",
        "",
        "| subset | n | accuracy | 95% CI | community |",
        "|---|---:|---:|---|---:|",
    ]
    ctx = per_group[per_group.level == "context"].sort_values(
        ["accuracy", "n", "subset"], ascending=[True, False, True], kind="stable"
    )
    for _, r in ctx.head(100).iterrows():
        comm = "" if pd.isna(r["community"]) else int(r["community"])
        out.append(
            f"| {markdown_safe(r['subset'])} | {r['n']} | {_pct(r['accuracy'])} | [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}] | {comm} |"
        )
    if m.get("plots"):
        out += ["", "## Charts", ""] + [f"![{c}]({p})" for c, p in m["plots"].items()]
    return "\n".join(out) + "\n"


def plot_class(
    per_group: pd.DataFrame, cls: str, class_accuracy: float, path: Path, min_n: int, max_bars: int = 60
) -> bool:
    """Horizontal bars of per-context accuracy with Wilson intervals; False when matplotlib is absent."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ModuleNotFoundError:
        return False
    ctx = per_group[(per_group.level == "context") & (per_group["class"] == cls) & (per_group.n >= min_n)]
    total = len(ctx)
    ctx = ctx.sort_values(["accuracy", "n", "subset"], ascending=[True, False, True], kind="stable").head(max_bars)
    if ctx.empty:
        return False
    ctx = ctx.iloc[::-1]  # worst at the top of the chart
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.24 * len(ctx)))
    comm = ctx["community"].fillna(-1).astype(int).tolist()
    palette = plt.get_cmap("tab10")
    colors = [palette(c % 10) if c >= 0 else (0.6, 0.6, 0.6) for c in comm]
    y = range(len(ctx))
    acc = ctx["accuracy"].to_numpy()
    err = [acc - ctx["ci_low"].to_numpy(), ctx["ci_high"].to_numpy() - acc]
    ax.barh(list(y), acc, xerr=err, color=colors, ecolor="black", capsize=2)
    # a 0% bar has no width: a dot at the value and the figure in words keep every result visible
    ax.scatter(acc, list(y), c=colors, edgecolors="black", linewidths=0.5, s=18, zorder=3)
    for yi, a in zip(y, acc):
        ax.annotate(f"{a:.0%}", (a, yi), xytext=(4, 0), textcoords="offset points", va="center", fontsize=6)
    from matplotlib.patches import Patch  # matplotlib is optional: imported with pyplot above

    handles = [
        Patch(
            color=palette(c % 10) if c >= 0 else (0.6, 0.6, 0.6), label=f"community {c}" if c >= 0 else "no community"
        )
        for c in sorted(set(comm))
    ]
    ax.set_yticks(list(y), [f"{g} (n={n})" for g, n in zip(ctx["group"], ctx["n"])], fontsize=7)
    ax.axvline(
        class_accuracy, color="black", linestyle="--", linewidth=1, label=f"class accuracy {class_accuracy:.2f}"
    )
    ax.set_xlim(0, 1)
    ax.set_xlabel("accuracy (95% Wilson interval); colour = meta-graph community")
    ax.set_title(
        f"{cls}: accuracy per context subset (n >= {min_n}; {len(ctx)} of {total} shown, worst at the top)", fontsize=9
    )
    line_handles, _ = ax.get_legend_handles_labels()
    ax.legend(
        handles=line_handles + handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=7,
        title="colour = meta-graph community",
        title_fontsize=7,
        frameon=False,
    )  # outside: never over a bar
    fig.tight_layout()
    # no timestamp in the PNG metadata, so reruns write identical files
    fig.savefig(path, dpi=100, metadata={"Software": None}, bbox_inches="tight")  # keeps the outside legend
    plt.close(fig)
    return True


def origin_words(origin: "Mapping[str, Any] | None") -> str | None:
    """A report's ``task_origin`` (hub/task_data.TaskProvenance) in one line: where, commit and spec digest."""
    if not origin:
        return None
    place = origin.get("repo_id") or origin.get("folder") or origin.get("where")
    commit = f", commit {origin['commit']}" if origin.get("commit") else ""
    return f"{origin.get('kind')} {place}{commit}; shift_spec.json sha256 {origin.get('spec_sha256')}"


def write_report(
    out: str | Path,
    metrics: dict[str, Any],
    per_group: pd.DataFrame,
    per_image: pd.DataFrame,
    logits: pd.DataFrame | None = None,
    *,
    force: bool = False,
    pictures: bool = True,
) -> EvalReport:
    """Write every output into ``out`` atomically (a temporary folder renamed at the end).

    ``logits`` (image_id, logits) is written as logits.parquet, readable back with
    ``--model predictions:OUT/logits.parquet`` (re-score another way without running the model).
    ``pictures=False`` skips the per-class charts (a zoo over many tasks draws one leaderboard picture instead).
    """
    out = Path(out)
    with atomic_dir(out, kind=REPORT_KIND, force=force) as tmp:
        plots: dict[str, str] = {}
        (tmp / "plots").mkdir()
        for cls, c in metrics["classes"].items() if pictures else ():
            name = f"plots/{file_stem(cls)}.png"  # the one safe name of a class's file
            if plot_class(per_group, cls, c["accuracy"], tmp / name, metrics["min_subset_size"]):
                plots[cls] = name
        metrics = {**metrics, "plots": plots}
        report = EvalReport(metrics, out)
        write_per_group(from_group_table(per_group), tmp / "per_group.csv")
        per_image.to_csv(tmp / "predictions.csv", index=False, float_format="%.10g")
        if logits is not None:
            write_parquet(pa.Table.from_pandas(logits, preserve_index=False), tmp / "logits.parquet")
        (tmp / "report.json").write_text(json.dumps(report.metrics, indent=2, sort_keys=False, allow_nan=False) + "\n")
        (tmp / "report.md").write_text(render_markdown(report, per_group))
    return report


def write_evaluation(
    out: str | Path,
    metrics: dict[str, Any],
    groups: pd.DataFrame,
    scored: pd.DataFrame,
    preds: HeadOutputs,
    labels: LabelMap | None,
    cfg: EvalConfig,
) -> EvalReport:
    """One evaluate's report folder (:func:`write_report`): predictions.csv from the scored rows, logits.parquet
    when ``cfg.save_logits``, the per-class charts unless ``cfg.plots`` is False."""
    logits = None
    if cfg.save_logits:
        if preds.logits is None:
            raise InputFormatError(
                "save_logits: these predictions hold only top-1 indices, no logits",
                "drop --save-logits, or give a predictions file with logits",
            )
        logits = pd.DataFrame({"image_id": preds.image_ids, "logits": list(preds.logits)})
    names = None if labels is None or labels.is_imagenet_1k else list(labels.names)
    return write_report(
        out, metrics, groups, _per_image(scored, names), logits, force=cfg.force, pictures=cfg.plots is not False
    )  # None: a single evaluate draws its charts


def _per_image(scored: pd.DataFrame, labels: list[str] | None = None) -> pd.DataFrame:
    """predictions.csv rows: contexts joined by '|', name of the top-1 class (ImageNet-1k or the head's), sorted."""

    names = [c.name.split(",")[0] for c in imagenet_classes()] if labels is None else labels
    per_image = scored.assign(
        contexts=["|".join(sorted(c)) for c in scored["contexts"]], pred_name=[names[i] for i in scored["pred_index"]]
    )
    return per_image.sort_values(["split", "image_id"], kind="stable").reset_index(drop=True)
