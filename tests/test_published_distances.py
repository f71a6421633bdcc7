"""Issue 43 (and issue 46 D6, D10): an exported task publishes every pair's meta-graph distance, read from the repo
alone with the artifact's answers; the facts it publishes cannot change unseen (spec_version 6 records their
sha256); an older export's impossible facts are refused by their structure; a refusal never aborts the process."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hardening_inputs import assert_one_line_error, run_cli
from spec_versions import as_spec_version

from metashift_hf.builders.meta_graph_facts import FACTS_FILE
from metashift_hf.builders.pair_distances import PAIRS_FILE
from metashift_hf.demo import DEMO_TASKS
from metashift_hf.hub.export import export_tasks
from metashift_hf.hub.task_open import TaskOrigin, open_task


P12 = "paper-subpop-cat-dog-p12"


@pytest.fixture(scope="module")
def demo_export(demo_build, tmp_path_factory):
    """The demo's tasks exported from the demo build: (artifact, {task: repo folder}, predictions CSV of P12)."""
    world, art = demo_build
    out = tmp_path_factory.mktemp("pairs") / "export"
    origin = TaskOrigin(artifact=art.root, images=world.images_dir, task_options=DEMO_TASKS)
    export_tasks(list(DEMO_TASKS), origin, out)
    repos = {t: out / f"metashift-{t}" for t in DEMO_TASKS}
    data = open_task(repos[P12])
    preds = out.parent / "preds.csv"
    table = data.plan.table()
    table[["image_id"]].assign(prediction=table["label"]).to_csv(preds, index=False)
    return art, repos, preds


def _copy(repo, tmp_path, version=6):
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    if version < 6:
        as_spec_version(copy, P12, version)
    return copy


def _edit(copy, name, change) -> None:
    path = copy / P12 / name
    rows = pq.read_table(path).to_pylist()
    schema = pq.read_schema(path)
    change(rows)
    path.unlink()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def test_distance_task_equals_the_artifact_on_every_pair_of_every_class(demo_export, capsys):
    """`distance --task FOLDER --class C --matrix` prints what `--artifact` prints, for every class of every demo
    export (same pairs, rules, status, numbers bit for bit); Python's reader answers as Artifact.distance."""
    art, repos, _ = demo_export
    checked = 0
    for task, repo in repos.items():
        pairs = open_task(repo).distances
        assert pairs.classes() == sorted(c for c in open_task(repo).classes if c in art.classes())
        for cls in pairs.classes():
            code, want, _ = run_cli(capsys, "distance", "--artifact", art.root, "--class", cls, "--matrix")
            code2, got, err = run_cli(capsys, "distance", "--task", repo, "--class", cls, "--matrix")
            assert code == code2 == 0 and got == want, err
            m, ref = pairs.matrix(cls), art.distance_matrix(cls)
            assert m.names == ref.names
            for (a, b, d), (a2, b2, d2) in zip(m.pairs(), ref.pairs(), strict=True):
                assert (a, b, d.rule, d.status) == (a2, b2, d2.rule, d2.status)
                assert (d.value is None) == (d2.value is None) and abs((d.value or 0) - (d2.value or 0)) <= 1e-9
                checked += 1
        a, b = pairs.matrix("cat").names[:2]
        assert pairs.distance(a, b) == art.distance(a, b) == open_task(repo).meta_graph.distance(a, b)
        outs = [
            run_cli(capsys, "distance", flag, where, a, b)[1]
            for flag, where in (("--artifact", art.root), ("--task", repo))
        ]
        assert outs[0] == outs[1] and "for scale" in outs[0]
    assert checked > 1000


def test_the_facts_file_is_no_split_and_loads_alone(demo_export):
    import datasets

    _, repos, _ = demo_export
    repo = repos[P12]
    assert set(datasets.load_dataset(str(repo), P12)) == {"train", "validation", "test"}
    table = datasets.load_dataset(str(repo), data_files=f"{P12}/{PAIRS_FILE}", split="train")
    assert table.column_names == ["class", "source", "target", "distance", "rule", "status"]
    card = (repo / "README.md").read_text()
    assert "### Pairwise distances" in card and ".distances" in card


def _weight_down(rows):
    rows[0]["edges"][0]["weight"] -= 0.01


def _self_edge(rows):
    rows[0]["edges"] = [*rows[0]["edges"], {"target": rows[0]["subset"], "weight": 0.5}]


def _halve_distances(rows):
    for row in rows:
        if row["distance_to_largest_community"] is not None:
            row["distance_to_largest_community"] /= 2


def _first(key, change):
    def edit(rows):
        rows[0][key] = change(rows[0][key])

    return edit


# the plausible edits of issue 43, on a current export: refused by the digest its spec records
EDITS = {
    "distance x1.01": (FACTS_FILE, _first("distance_to_largest_community", lambda d: d * 1.01)),
    "community changed": (FACTS_FILE, _first("community", lambda c: c + 1)),
    "n_images + 1": (FACTS_FILE, _first("n_images", lambda n: n + 1)),
    "X-33 n_images 1e9": (FACTS_FILE, _first("n_images", lambda n: 10**9)),
    "edge weight - 0.01": (FACTS_FILE, _weight_down),
    "a self-edge": (FACTS_FILE, _self_edge),
    "a pair's distance x1.01": (PAIRS_FILE, _first("distance", lambda d: d * 1.01)),
    "X-37 every distance halved": (FACTS_FILE, _halve_distances),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_plausible_edit_is_refused_by_bugs_and_distance(demo_export, tmp_path, capsys, edit):
    _, repos, preds = demo_export
    name, change = EDITS[edit]
    copy = _copy(repos[P12], tmp_path)
    _edit(copy, name, change)
    code, _, err = run_cli(capsys, "bugs", "--task", copy, "--predictions", preds, "--out", tmp_path / "bugs")
    assert_one_line_error(code, err, name, "changed after export")
    assert not (tmp_path / "bugs").exists()
    code, _, err = run_cli(capsys, "distance", "--task", copy, "--class", "cat", "--matrix")
    assert_one_line_error(code, err, name, "changed after export")


def test_a_removed_facts_file_is_refused(demo_export, tmp_path, capsys):
    _, repos, _ = demo_export
    copy = _copy(repos[P12], tmp_path)
    (copy / P12 / PAIRS_FILE).unlink()
    code, _, err = run_cli(capsys, "distance", "--task", copy, "--class", "cat", "--matrix")
    assert_one_line_error(code, err, PAIRS_FILE, "is missing")


def _edges(change):
    def edit(rows):
        for r in rows:
            if r["edges"]:
                r["edges"] = change(r)

    return edit


# issue 46 D6 on an export made before spec_version 6 (no digest): impossible facts refused by their structure
IMPOSSIBLE = {
    "X-27 weights 2.0": (_edges(lambda r: [{**e, "weight": 2.0} for e in r["edges"]]), "weight outside (0, 1]"),
    "X-28 weights -0.5": (_edges(lambda r: [{**e, "weight": -0.5} for e in r["edges"]]), "weight outside (0, 1]"),
    "X-29 edge to an unlisted subset": (
        _edges(lambda r: [*r["edges"], {"target": "cat(ghost)", "weight": 0.5}]),
        "names a subset the file does not list",
    ),
    "X-30 self-edges": (_edges(lambda r: [*r["edges"], {"target": r["subset"], "weight": 0.5}]), "to itself"),
    "X-39 class swapped": (_first("class", lambda c: "dog"), "subset listed once"),
    "X-41 n_images below its images": (_first("n_images", lambda n: 1), "has n_images 1"),
}


@pytest.mark.parametrize("case", list(IMPOSSIBLE))
def test_impossible_facts_of_an_older_export_are_refused(demo_export, tmp_path, capsys, caplog, case):
    _, repos, preds = demo_export
    change, message = IMPOSSIBLE[case]
    copy = _copy(repos[P12], tmp_path, version=5)
    code, _, err = run_cli(capsys, "bugs", "--task", copy, "--predictions", preds, "--out", tmp_path / "ok")
    assert code == 0 and "unverified" in err  # the pristine older export reads, with a warning
    _edit(copy, FACTS_FILE, change)
    code, _, err = run_cli(capsys, "bugs", "--task", copy, "--predictions", preds, "--out", tmp_path / "bugs")
    assert_one_line_error(code, err, FACTS_FILE, message)


def test_an_export_without_pairwise_distances_names_the_fix(demo_export, tmp_path, capsys):
    """A repo exported before the pairs were published: a clear error naming both ways out."""
    _, repos, _ = demo_export
    copy = _copy(repos[P12], tmp_path, version=5)
    (copy / P12 / PAIRS_FILE).unlink()
    code, _, err = run_cli(capsys, "distance", "--task", copy, "cat(sofa)", "cat(bed)")
    assert_one_line_error(code, err, "publishes no pairwise distances", "export the task again", "--artifact")


@pytest.mark.slow
def test_d10_a_refusal_after_a_load_never_aborts(demo_export, tmp_path):
    """D10 (X-39, X-41, X-42): `bugs` refused an older export's facts correctly, then the process aborted (exit 134,
    'terminate called without an active exception') in about 3 runs of 8: pyarrow's I/O thread still releasing a
    Python buffer at interpreter shutdown (metashift_hf.cli.settle_arrow_threads). Each run a fresh copy (so
    `datasets` reads its shards again, as the failing runs did)."""
    _, repos, preds = demo_export
    codes = []
    for i in range(6):
        copy = tmp_path / f"copy{i}"
        shutil.copytree(repos[P12], copy)
        as_spec_version(copy, P12, 5)
        _edit(copy, FACTS_FILE, _first("class", lambda c: "dog"))
        r = subprocess.run(
            [sys.executable, "-m", "metashift_hf", "bugs", "--task", str(copy), "--predictions", str(preds),
             "--out", str(tmp_path / f"bugs{i}"), "-q"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert "terminate called" not in r.stderr and "error:" in r.stderr, r.stderr[-2000:]
        codes.append(r.returncode)
    assert codes == [2] * 6


def test_pair_file_checks_itself(demo_export):
    """A pairs table that is not every pair once, or whose answer is malformed, is refused by name."""
    from metashift_hf.builders.pair_distances import PairDistances
    from metashift_hf.core.errors import InputFormatError

    art, repos, _ = demo_export
    table = PairDistances.of_artifact(art, ["cat", "dog"]).to_arrow()
    assert (
        PairDistances.from_arrow(table, "F", ["cat", "dog"], 5).matrix("cat").names == art.distance_matrix("cat").names
    )
    bad = {
        "a pair dropped": table.slice(1),
        "a negative distance": table.set_column(3, "distance", pa.array(np.where(np.arange(table.num_rows) == 0, -1.0, table.column("distance").to_numpy(zero_copy_only=False)))),
        "a rule without a number": table.set_column(3, "distance", pa.array([None] * table.num_rows, pa.float64())),
    }  # fmt: skip
    for what, t in bad.items():
        with pytest.raises(InputFormatError, match="F"):
            PairDistances.from_arrow(t, "F", ["cat", "dog"], 5)
    with pytest.raises(InputFormatError, match="not a class of the task"):
        PairDistances.from_arrow(table, "F", ["cat"], 5)


def _evaluate_script(task: str, preds: str, out: str) -> str:
    """evaluate's Python API on ``task`` with an ImageNet-index predictions file (a custom coverage: no WordNet)."""
    return (
        "from metashift_hf.evaluate import evaluate\n"
        "from metashift_hf.evaluate.config import EvalConfig\n"
        "cfg = EvalConfig(coverage={'cat': [281], 'dog': [207]}, min_subset_size=5, plots=False, progress=False)\n"
        f"evaluate('predictions:{preds}', {task!r}, {out!r}, settings=cfg)\n"
    )


def test_evaluate_report_records_the_folder_origin(demo_export, tmp_path):
    """report.json of an evaluation on a folder: task_origin with the sha256 of the published shift_spec.json."""
    import hashlib
    import json

    import pandas as pd

    from metashift_hf.evaluate import evaluate
    from metashift_hf.evaluate.config import EvalConfig

    _, repos, preds = demo_export
    index = tmp_path / "index.csv"
    p = pd.read_csv(preds)
    p.assign(imagenet_index=p["prediction"].map({"cat": 281, "dog": 207}))[["image_id", "imagenet_index"]].to_csv(
        index, index=False
    )
    cfg = EvalConfig(coverage={"cat": [281], "dog": [207]}, min_subset_size=5, plots=False, progress=False)
    evaluate(f"predictions:{index}", str(repos[P12]), tmp_path / "eval", settings=cfg)
    origin = json.loads((tmp_path / "eval" / "report.json").read_text())["run"]["task_origin"]
    published = hashlib.sha256((repos[P12] / P12 / "shift_spec.json").read_bytes()).hexdigest()
    assert origin["kind"] == "folder" and origin["folder"] == str(repos[P12]) and origin["spec_sha256"] == published
    assert published in (tmp_path / "eval" / "report.md").read_text()


@pytest.mark.slow
def test_from_a_hub_repo_and_offline_from_its_cache(demo_build, demo_export, tmp_path):
    """`distance --task NS/REPO` equals --artifact on every pair, online and offline from the cache; the card's
    block runs verbatim from a fresh HF_HOME; report.json of an evaluation on the repo records its commit."""
    import hashlib
    import json
    import re

    import pandas as pd

    from fixtures.fake_hub import client_env, running_hub
    from metashift_hf.commands.distance import matrix_csv

    world, art = demo_build
    _, _, preds = demo_export
    out = tmp_path / "export"
    origin = TaskOrigin(artifact=art.root, images=world.images_dir, task_options=DEMO_TASKS)
    export_tasks([P12], origin, out, namespace="tester")
    repo_id = f"tester/metashift-{P12}"
    index = tmp_path / "index.csv"
    p = pd.read_csv(preds)
    p.assign(imagenet_index=p["prediction"].map({"cat": 281, "dog": 207}))[["image_id", "imagenet_index"]].to_csv(
        index, index=False
    )

    def run(args, env):
        r = subprocess.run([sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout

    with running_hub() as (endpoint, state):
        env = client_env(endpoint, str(tmp_path / "home"), "hf_test_write_token_123")
        publish = ["-m", "metashift_hf", "publish", "--from-export", str(out), "--namespace", "tester"]
        run([*publish, "--allow-synthetic"], env)
        for cls in ("cat", "dog"):
            want = matrix_csv(art.distance_matrix(cls), terminal=True)
            assert run(["-m", "metashift_hf", "distance", "--task", repo_id, "--class", cls, "--matrix"], env) == want
            offline = {**env, "HF_HUB_OFFLINE": "1"}
            assert (
                run(["-m", "metashift_hf", "distance", "--task", repo_id, "--class", cls, "--matrix"], offline) == want
            )
        card = state.repos[("dataset", repo_id)].head.files["README.md"].content.decode()
        block = re.search(r"### Pairwise distances.*?```python\n(.*?)```", card, re.S).group(1)
        fresh = client_env(endpoint, str(tmp_path / "fresh-home"), None)
        assert "kept subsets; d(" in run(["-c", block], fresh)
        run(["-c", _evaluate_script(repo_id, str(index), str(tmp_path / "eval"))], fresh)
        commit = state.repos[("dataset", repo_id)].head.oid
    task_origin = json.loads((tmp_path / "eval" / "report.json").read_text())["run"]["task_origin"]
    published = hashlib.sha256((out / f"metashift-{P12}" / P12 / "shift_spec.json").read_bytes()).hexdigest()
    assert task_origin["kind"] == "hub" and task_origin["repo_id"] == repo_id
    assert task_origin["spec_sha256"] == published and task_origin["commit"] == commit
