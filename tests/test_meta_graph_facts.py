"""Issue 26.4: an exported task carries its meta-graph facts (each context subset's community and distance to
its class's largest community), so `bugs` and `evaluate` give the same per-group communities and distances
from an exported folder as from the artifact; a tampered facts file is refused."""

from __future__ import annotations

import shutil

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spec_versions import as_spec_version

from metashift_hf.builders.meta_graph_facts import FACTS_FILE, MetaGraphFacts
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError
from metashift_hf.evaluate import evaluate
from metashift_hf.evaluate.config import EvalConfig
from metashift_hf.hub import api
from metashift_hf.hub.export import export_tasks
from metashift_hf.hub.shards import repo_files
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin, open_task
from metashift_hf.research.bugs import find_bugs


TASK = "shift-conditional-cat-dog-delta30"


@pytest.fixture(scope="module")
def exported(builder_world, tmp_path_factory):
    """TASK exported from the builder world: (artifact, repo folder, predictions with one planted bug)."""
    art = builder_world["artifact"]
    out = tmp_path_factory.mktemp("facts") / "export"
    export_tasks([TASK], TaskOrigin(artifact=art.root, images=builder_world["folder"]), out)
    tp = api.plan(TaskRef(TASK, artifact=art.root))
    counts = pd.Series([c for r in tp.splits["test"] if r.label == "cat" for c in r.contexts]).value_counts()
    wrong = counts.index[0]  # the largest context of the test cats: all of it predicted wrong
    preds = pd.DataFrame(
        [
            {
                "image_id": r.image_id,
                "prediction": "dog" if split == "test" and r.label == "cat" and wrong in r.contexts else r.label,
            }
            for split, rows in tp.splits.items()
            for r in rows
        ]
    )
    return art, out / f"metashift-{TASK}", preds


def _rows(tp):
    return [(r.label, r.contexts) for rows in tp.splits.values() for r in rows]


def test_export_writes_the_facts_datasets_can_load(exported):
    art, repo, _ = exported
    path = repo / TASK / FACTS_FILE
    assert f"{TASK}/{FACTS_FILE}" in repo_files(repo)  # publish uploads it
    tp = api.plan(TaskRef(TASK, artifact=art.root))
    facts = MetaGraphFacts.read(path, "facts", tp.classes, _rows(tp))
    assert facts == MetaGraphFacts.of_artifact(art, _rows(tp))
    every = {f"{r.label}({c})" for rows in tp.splits.values() for r in rows for c in r.contexts}
    assert set(facts.subsets) == every
    kept = art.communities("cat")
    assert all(facts.subsets[s].community == kept.get(s, -1) for s in every if s.startswith("cat("))
    assert any(f.distance_to_largest_community for f in facts.subsets.values())
    assert any(f.edges for f in facts.subsets.values())
    # a `datasets` user loads it on its own; it is not a split of the task's config
    table = datasets.load_dataset(str(repo), data_files=f"{TASK}/{FACTS_FILE}", split="train")
    assert sorted(table["subset"]) == sorted(every) and "community" in table.column_names
    assert set(datasets.load_dataset(str(repo), TASK)) == set(tp.splits)
    card = (repo / "README.md").read_text()
    assert "### Meta-graph facts" in card and f'data_files="{TASK}/{FACTS_FILE}"' in card
    read_back = open_task(repo).meta_graph
    assert read_back.subsets == facts.subsets and read_back.distances is not None  # with every pair's distance


def test_bugs_from_the_folder_give_the_artifact_distances(exported, tmp_path, capsys):
    art, repo, preds = exported
    preds.to_csv(tmp_path / "p.csv", index=False)
    for form, task in {
        "artifact": ["--task", TASK, "--artifact", str(art.root)],
        "folder": ["--task", str(repo)],
    }.items():
        assert (
            main(
                [
                    "bugs",
                    *task,
                    "--predictions",
                    str(tmp_path / "p.csv"),
                    "--min-n",
                    "5",
                    "--out",
                    str(tmp_path / form),
                    "-q",
                ]
            )
            == 0
        )
    capsys.readouterr()
    text = {form: (tmp_path / form / "per_group.csv").read_text() for form in ("artifact", "folder")}
    assert text["artifact"] == text["folder"]
    groups = pd.read_csv(tmp_path / "folder" / "per_group.csv")
    bugs = groups[(groups["level"] == "context") & (groups["bug"].astype(str) == "True")]
    assert len(bugs) and bugs["distance_to_largest_community"].notna().any()
    assert groups.loc[groups["level"] == "context", "community"].notna().all()


def test_evaluate_from_the_folder_writes_the_artifact_per_group(exported, tmp_path):
    art, repo, preds = exported
    index = {"cat": 281, "dog": 207}  # the predicted class as an ImageNet-1k index, covered by a custom map
    preds.assign(imagenet_index=[index[p] for p in preds["prediction"]])[["image_id", "imagenet_index"]].to_csv(
        tmp_path / "p.csv", index=False
    )
    cfg = EvalConfig(coverage={"cat": [281], "dog": [207]}, min_subset_size=5, plots=False, progress=False)
    model = f"predictions:{tmp_path / 'p.csv'}"
    evaluate(model, TaskRef(TASK, artifact=art.root), tmp_path / "artifact", settings=cfg)
    evaluate(model, str(repo), tmp_path / "folder", settings=cfg)
    text = {form: (tmp_path / form / "per_group.csv").read_text() for form in ("artifact", "folder")}
    assert text["artifact"] == text["folder"]  # every column, community and distance included
    groups = pd.read_csv(tmp_path / "folder" / "per_group.csv")
    assert groups["distance_to_largest_community"].notna().any()


def _tamper(repo, tmp_path, change, version=5) -> "object":
    """A copy of the export with its facts file changed; ``version`` 5: as an export made before the spec recorded
    the facts' sha256 (then only the file's consistency can refuse it)."""
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy)
    if version < 6:
        as_spec_version(copy, TASK, version)
    path = copy / TASK / FACTS_FILE
    table = pq.read_table(path)
    changed = change(table)
    path.unlink()
    if isinstance(changed, bytes):
        path.write_bytes(changed)
    else:
        pq.write_table(changed, path)
    return copy


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.slice(1), "does not list the task's context subsets"),
        (lambda t: t.set_column(0, "class", pa.array(["bird"] * t.num_rows)), "not a class of the task"),
        (
            lambda t: t.set_column(2, "community", pa.array([str(v) for v in t.column("community").to_pylist()])),
            "not the meta-graph facts schema",
        ),
        (lambda t: t.set_column(3, "distance_to_largest_community", pa.array([-1.0] * t.num_rows)), "not valid"),
        (lambda t: b"PAR1 not a parquet file", "not a readable parquet file"),
    ],
)
def test_a_tampered_facts_file_is_refused(exported, tmp_path, change, message):
    _, repo, _ = exported
    copy = _tamper(repo, tmp_path, change)
    with pytest.raises(InputFormatError, match=message) as exc:
        open_task(copy).meta_graph  # noqa: B018 -- read when first asked for
    assert FACTS_FILE in exc.value.what and exc.value.fix


def test_an_oversized_or_linked_facts_file_is_refused_unread(exported, tmp_path):
    _, repo, _ = exported
    copy = _tamper(repo, tmp_path, lambda t: t)
    path = copy / TASK / FACTS_FILE
    with open(path, "r+b") as f:
        f.truncate(33 * 2**20)
    with pytest.raises(InputFormatError, match="bytes"):
        open_task(copy).meta_graph  # noqa: B018 -- read when first asked for
    path.unlink()
    path.symlink_to(repo / TASK / FACTS_FILE)
    with pytest.raises(InputFormatError, match="is a symbolic link"):  # S-84: named as a link, not 'cannot read'
        open_task(copy).meta_graph  # noqa: B018 -- read when first asked for


def test_an_export_without_facts_reads_with_empty_columns(exported, tmp_path):
    """An export made before the file existed still reads; its communities come from the rows, distances empty."""
    art, repo, preds = exported
    copy = _tamper(repo, tmp_path, lambda t: t)
    (copy / TASK / FACTS_FILE).unlink()
    assert open_task(copy).meta_graph is None
    report = find_bugs(preds, str(copy), min_n=5)
    assert report.tested["distance_to_largest_community"].isna().all()
    assert find_bugs(preds, str(repo), min_n=5).tested["distance_to_largest_community"].notna().any()
