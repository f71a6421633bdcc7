"""Issue 29 part 1: a published dataset is untrusted input. Its rows are checked against its shift spec on
open (one error naming the split and the first bad rows), its two spec copies must agree, its image cells
are read from their bytes only, and a malformed folder or repo is one clear error (review cases A1-*)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hardening_inputs import assert_one_line_error, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures.tasks import build_tiny_artifact, sample_jpegs, three_split_task
from metashift_hf.cli import main
from metashift_hf.core.errors import InputFormatError, MissingImagesError, UnknownNameError
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin, open_task
from metashift_hf.hub.task_rows import check_rows
from metashift_hf.tasks.spec import GroupSpec, ShiftSpec


TASK = "paper-dg-cat-dog-1"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("rows")
    art = build_tiny_artifact(root / "artifact")
    images = sample_jpegs(root / "images", n=30)
    tasks = [three_split_task(TASK, images), three_split_task("bin-cat-dog", images, matched=True)]
    export_prepared(tasks, TaskOrigin(artifact=art), root / "out", namespace="tester")
    return root


@pytest.fixture
def repo(pristine, tmp_path, monkeypatch):
    """A fresh copy of the exported repo folder of TASK (tests mutate it), read through a cache of its own
    (datasets keys its cache by the files' paths and times, which a copy and an edit within a second keep)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    dest = tmp_path / f"metashift-{TASK}"
    shutil.copytree(pristine / "out" / f"metashift-{TASK}", dest)
    return dest


def shard(repo: Path, split: str) -> Path:
    return next((repo / TASK).glob(f"{split}-*.parquet"))


def mutate(repo: Path, split: str, fn) -> None:
    """Rewrite one split's parquet as ``fn(table) -> table`` (schema metadata kept)."""
    path = shard(repo, split)
    table = pq.read_table(path)
    out = fn(table)
    pq.write_table(out.replace_schema_metadata(table.schema.metadata), path)


def set_column(table: pa.Table, name: str, values) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type))


def refused(repo, match: str, exc=InputFormatError, **kw) -> str:
    with pytest.raises(exc, match=match) as info:
        open_task(TaskRef(repo, **kw)).verify()  # the rows are read when first needed
    return str(info.value)


# --- rows against the spec -------------------------------------------------------------------------------


def test_pristine_export_opens(repo):
    assert len(open_task(repo).plan.splits["test"]) == 10


def test_a1_14_missing_group_column(repo):
    """(A1-14) a split without its group column: one error, not a KeyError traceback."""
    mutate(repo, "test", lambda t: t.drop(["group"]))
    refused(repo, r"split 'test'.*(lacks column|group)")


@pytest.mark.parametrize("how", ["dropped", "nulls"], ids=["A1-15-dropped", "A1-15-nulls"])
def test_a1_15_context_column_filled_with_none(repo, how):
    """(A1-15) a context column dropped from the shard comes back from the card's features filled with None."""
    mutate(
        repo,
        "test",
        lambda t: t.drop(["context"]) if how == "dropped" else set_column(t, "context", [None] * t.num_rows),
    )
    msg = refused(repo, r"split 'test' does not match its shift spec, 10 bad row")
    assert "empty context" in msg and "image 2400020" in msg


def test_a1_16_label_out_of_range(repo):
    """(A1-16) label id 5 in a 2-class task."""
    mutate(repo, "test", lambda t: set_column(t, "label", [5] + t["label"].to_pylist()[1:]))
    refused(repo, r"1 bad row.*image 2400020: label 5 outside 0\.\.1")


def test_a1_17_label_minus_one_is_not_the_last_class(repo):
    """(A1-17) label -1 was read as the last class (numpy indexing)."""
    mutate(repo, "test", lambda t: set_column(t, "label", [-1] + t["label"].to_pylist()[1:]))
    refused(repo, r"label -1 outside 0\.\.1")


def test_a1_18_a1_72_flipped_labels_refused_by_open_score_and_bugs(repo, tmp_path):
    """(A1-18) labels flipped, group/context kept; (A1-72) `bugs` on them reported invented context bugs."""
    mutate(repo, "test", lambda t: set_column(t, "label", [1 - y for y in t["label"].to_pylist()]))
    refused(repo, r"group 'cat\(grass\)' is not class\(context\) 'dog\(grass\)'")
    preds = tmp_path / "p.csv"
    preds.write_text("image_id,prediction\n2400020,cat\n")
    for argv in (
        ["score", "--task", str(repo), "--predictions", str(preds), "--out", str(tmp_path / "s")],
        ["bugs", "--task", str(repo), "--predictions", str(preds), "--out", str(tmp_path / "b")],
    ):
        assert main(argv) == 2
        assert not (tmp_path / "b").exists()


def test_a1_19_every_group_renamed(repo):
    """(A1-19) every test row's group set to cat(outdoor)."""
    mutate(repo, "test", lambda t: set_column(t, "group", ["cat(outdoor)"] * t.num_rows))
    refused(repo, r"10 bad row")


def test_a1_23_group_unknown_to_the_spec(repo):
    """(A1-23) group names the spec does not know (unicorn(moon))."""
    mutate(repo, "test", lambda t: set_column(t, "group", ["unicorn(moon)"] * t.num_rows))
    msg = refused(repo, r"not one of the spec's test groups")
    assert "unicorn(moon)" in msg


def test_a1_24_context_inconsistent_with_group(repo):
    """(A1-24) a context column that contradicts the group column."""
    mutate(repo, "test", lambda t: set_column(t, "context", ["sofa"] * t.num_rows))
    refused(repo, r"group 'cat\(grass\)' is not class\(context\) 'cat\(sofa\)'")


def test_a1_20_a1_26_e53_train_rows_in_test(repo):
    """(A1-20) 5 train rows copied into test, card split sizes kept (the count stays 10): a traceback before,
    then 'bug in the split generator' (A1-26, E53)."""
    train = pq.read_table(shard(repo, "train"))
    mutate(
        repo,
        "test",
        lambda t: pa.concat_tables([t.slice(0, 5), train.slice(0, 5).select(t.column_names).cast(t.schema)]),
    )
    msg = refused(repo, r"does not match its shift spec")
    assert "bug in the split generator" not in msg
    assert "also in split 'train'" in msg or "is not one of the spec's test groups" in msg


def test_a1_26_e53_leak_with_sizes_and_groups_kept(repo):
    """(A1-26, E53) splits of two tasks mixed: the image ids leak, the rows otherwise fit the spec."""
    train = pq.read_table(shard(repo, "train"))
    val = pq.read_table(shard(repo, "validation"))
    mutate(repo, "validation", lambda t: set_column(t, "image_id", train["image_id"].to_pylist()[: val.num_rows]))
    msg = refused(repo, r"image also in split 'train'")
    assert "bug in the split generator" not in msg and "fix:" in msg


@pytest.mark.parametrize("dupes", ["all", "one"], ids=["A1-21", "A1-22"])
def test_a1_21_22_27_28_duplicated_rows(repo, dupes):
    """(A1-21) every test row duplicated, (A1-22) one: split sizes kept, so only the duplicate check sees them;
    the message is the rows', never 'bug in the split generator' (A1-27, A1-28)."""

    def fn(t):
        ids = t["image_id"].to_pylist()
        ids = [ids[i - i % 2] for i in range(len(ids))] if dupes == "all" else [ids[0]] + ids[1:-1] + [ids[0]]
        return set_column(t, "image_id", ids)

    mutate(repo, "test", fn)
    msg = refused(repo, r"image listed twice in 'test'")
    assert "bug in the split generator" not in msg


def test_a1_29_empty_test_shard(repo):
    """(A1-29) a test shard with no rows: datasets' own error, as one error naming the folder."""
    mutate(repo, "test", lambda t: t.slice(0, 0))
    refused(repo, r"exported folder .*: its parquet shards cannot be read")


def test_a1_30_missing_test_shard(repo):
    """(A1-30) the test shard deleted (the card still lists the split)."""
    shard(repo, "test").unlink()
    refused(repo, r"exported folder .*: its parquet shards cannot be read")


def drop_card_sizes(repo: Path) -> None:
    """Remove the card's split sizes (dataset_info.splits), so datasets counts no rows: only the spec's copy
    of the sizes and the row checks are left."""
    card = repo / "README.md"
    _, head, body = card.read_text().split("---\n", 2)
    meta = yaml.safe_load(head)
    for key in ("splits", "download_size", "dataset_size"):
        del meta["dataset_info"][key]
    card.write_text(f"---\n{yaml.safe_dump(meta, sort_keys=False)}---\n{body}")


def rows_leaked(t: pa.Table, repo: Path) -> pa.Table:
    return pa.concat_tables(
        [t.slice(0, 5), pq.read_table(shard(repo, "train")).slice(0, 5).select(t.column_names).cast(t.schema)]
    )


SIZELESS = {  # case id -> (split, its rewrite, the message); "same size": the count the spec records is kept
    "A1-26-same-size": (
        "test",
        rows_leaked,
        r"5 bad row.*row 5 image 2400000: group 'cat\(sofa\)' is not one of the "
        r"spec's test groups",
    ),
    "A1-26-grown": (
        "test",
        lambda t, r: pa.concat_tables([t, rows_leaked(t, r).slice(5)]),
        r"has 15 rows, its shift spec records 10",
    ),
    "A1-26-ids-only": (
        "validation",
        lambda t, r: set_column(t, "image_id", pq.read_table(shard(r, "train"))["image_id"].to_pylist()[: t.num_rows]),
        r"split 'validation' .* 5 bad row.*image also in split 'train'",
    ),
    "A1-27-same-size": (
        "test",
        lambda t, r: pa.concat_tables([t.slice(0, 5)] * 2),
        r"5 bad row.*image listed twice in 'test'",
    ),
    "A1-27-grown": ("test", lambda t, r: pa.concat_tables([t, t]), r"has 20 rows, its shift spec records 10"),
    "A1-28-same-size": (
        "test",
        lambda t, r: pa.concat_tables([t.slice(0, 9), t.slice(3, 1)]),
        r"1 bad row.*row 9 image 2400023: image listed twice in 'test'",
    ),
    "A1-28-grown": (
        "test",
        lambda t, r: pa.concat_tables([t, t.slice(3, 1)]),
        r"has 11 rows, its shift spec records 10",
    ),
}


@pytest.mark.parametrize("case", list(SIZELESS), ids=list(SIZELESS))
def test_a1_26_27_28_card_without_split_sizes(repo, case):
    """(A1-26) a leak, (A1-27) every row duplicated, (A1-28) one row duplicated, with the card's split sizes removed
    (so datasets checks no count): the rows' own error, never 'bug in the split generator, please report'."""
    split, change, match = SIZELESS[case]
    drop_card_sizes(repo)
    mutate(repo, split, lambda t: change(t, repo))
    msg = refused(repo, match)
    assert "bug in the split generator" not in msg and "fix:" in msg


def test_a1_29_30_card_without_split_sizes(repo):
    """(A1-29, A1-30) an emptied shard with the card's split sizes removed: still one error, naming the reader's
    own reason (not only datasets' 'An error occurred while generating the dataset')."""
    drop_card_sizes(repo)
    mutate(repo, "test", lambda t: t.slice(0, 0))
    refused(repo, r"parquet shards cannot be read .*DatasetGenerationError.*; ArrowInvalid: ")


def test_group_id_disagreeing_with_group(repo):
    """group_id (documented: names[group_id] == group; what a user's own training loop reads) pointing at another
    group was accepted: the library groups by `group`, so only a user's loop saw the wrong groups."""
    mutate(repo, "test", lambda t: set_column(t, "group_id", [3] * t.num_rows))
    msg = refused(repo, r"split 'test' does not match its shift spec, 10 bad row")
    assert "group_id 3 names 'dog(sofa)', not its group 'cat(grass)'" in msg


def test_a1_67_split_size_disagrees(repo):  # A1-67
    mutate(repo, "test", lambda t: t.slice(0, 8))
    refused(repo, r"parquet shards cannot be read .*NonMatchingSplitsSizesError")


# --- the two copies of the spec ---------------------------------------------------------------------------


def edit_spec_file(repo: Path, fn) -> None:
    path = repo / TASK / "shift_spec.json"
    path.write_text(json.dumps(fn(json.loads(path.read_text()))))


def test_a1_31_spec_file_classes_swapped_tasks_show_and_score_agree(repo, tmp_path, capsys):
    """(A1-31) shift_spec.json's classes swapped: tasks show printed dog,cat while score used cat,dog."""
    edit_spec_file(repo, lambda d: {**d, "classes": d["classes"][::-1]})
    refused(repo, r"shift_spec.json and the card's copy of the spec .* differ in classes")
    preds = tmp_path / "p.csv"
    preds.write_text("image_id,prediction\n2400020,cat\n")
    assert main(["score", "--task", str(repo), "--predictions", str(preds), "--out", str(tmp_path / "s")]) == 2
    assert "differ in classes" in capsys.readouterr().err
    # tasks show never prints a spec that its rows or its other copy contradict (issue 29: it read only the file)
    assert main(["tasks", "show", str(repo)]) == 2
    captured = capsys.readouterr()
    assert "differ in classes" in captured.err and "classes" not in captured.out


def test_a1_37_spec_task_id_differs_from_config(repo):  # A1-37
    edit_spec_file(repo, lambda d: {**d, "task_id": "evil"})
    refused(repo, r"differ in task_id")


def edit_card_spec(repo: Path, fn) -> None:
    """Rewrite the card's copy of the spec (the 'group' feature's id) as ``fn(dict) -> dict``."""
    card = repo / "README.md"
    _, front, body = card.read_text().split("---\n", 2)
    meta = yaml.safe_load(front)
    prefix = "metashift-hf shift_spec "
    for feature in meta["dataset_info"]["features"]:
        if str(feature.get("id", "")).startswith(prefix):
            feature["id"] = prefix + json.dumps(
                fn(json.loads(feature["id"][len(prefix) :])), sort_keys=True, separators=(",", ":")
            )
    card.write_text("---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n" + body)


@pytest.mark.parametrize("task_id", ["evil", "t\x1b]0;pwn\x07\x1b[2J<b>x</b>|\ninjected"], ids=["A1-37", "A1-38"])
def test_a1_37_a1_38_both_spec_copies_name_another_task(repo, tmp_path, capsys, task_id):
    """A1-37/A1-38 variants: the card's copy and shift_spec.json agree on a task id that is not the config's
    (one with terminal escapes and a newline): refused, never scored into scores.md, the id shown escaped."""
    edit_spec_file(repo, lambda d: {**d, "task_id": task_id})
    edit_card_spec(repo, lambda d: {**d, "task_id": task_id})
    refused(repo, rf"its shift spec is for task '.*', not for config '{TASK}'")
    preds = tmp_path / "p.csv"
    preds.write_text("image_id,prediction\n2400020,cat\n")
    assert main(["score", "--task", str(repo), "--predictions", str(preds), "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "not for config" in err and "\x1b" not in err and "\ninjected" not in err
    assert not (tmp_path / "s").exists()


def test_a1_39_deeply_nested_spec_is_one_error(repo):  # A1-39
    (repo / TASK / "shift_spec.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(repo, r"nested too deeply")


def test_a1_40b_huge_card_refused_by_size_before_parsing(repo):  # A1-40b
    card = repo / "README.md"
    with open(card, "ab") as f:  # sparse: 200 MB of nothing, refused by its size alone
        f.truncate(200 * 2**20)
    refused(repo, r"README.md of .* is \d+ bytes")


def test_a1_63_spec_without_a_card_config(repo):  # A1-63
    shutil.copytree(repo / TASK, repo / "other")
    refused(repo, r"config 'other' has a shift_spec.json but the card declares", config="other")


def test_a1_65b_config_the_card_does_not_declare(repo):  # A1-65b
    shutil.copytree(repo / TASK, repo / "stray")
    refused(repo, r"config 'stray' .* card declares paper-dg-cat-dog-1", config="stray")


def test_a1_66_loading_script_never_run(repo, tmp_path):  # A1-66
    marker = tmp_path / "ran"
    (repo / f"{repo.name}.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    refused(repo, r"holds a loading script .* never runs code")
    assert not marker.exists()


def test_a1_60_export_root_names_its_task_folders(pristine):  # A1-60
    msg = refused(pristine / "out", r"root of an export holding 2 task folder", UnknownNameError)
    assert f"metashift-{TASK}" in msg and "--task" in msg


def test_a1_60_collection_card_folder_names_the_task_folders(pristine, capsys):
    """A1-60 variant: the export's card-only folder `metashift` was 'holds 0 configs', fix 'pass a folder written
    by export' (it is one)."""
    code, _, err = run_cli(capsys, "tasks", "show", pristine / "out" / "metashift")
    assert_one_line_error(
        code,
        err,
        "collection card of an export",
        f"metashift-{TASK}",
        f"--task {pristine / 'out' / 'metashift-bin-cat-dog'}",
    )


def test_a1_63_card_config_without_its_spec_file(repo):
    """A1-63 the other way round: the card declares the config, its shift_spec.json is gone (was 'holds 0 configs',
    fix 'pass a folder written by export')."""
    (repo / TASK / "shift_spec.json").unlink()
    msg = refused(repo, rf"card declares config\(s\) {TASK} but no <config>/shift_spec.json")
    assert "download the repo again" in msg


def test_a1_52_artifact_given_an_exported_folder(repo, pristine):  # A1-52
    msg = refused(TASK, r"is an exported task folder, not a build artifact", artifact=repo)
    assert f"--task {repo}" in msg


def test_a1_76_trailing_space(repo):  # A1-76
    refused("tester/metashift-x ", r"white space", UnknownNameError)


@pytest.mark.parametrize(
    "task",
    [" tester/metashift-x", "tester/metashift-x\n", "tester/metashift-x\t"],
    ids=["A1-76-leading", "A1-76-newline", "A1-76-tab"],
)
def test_a1_76_white_space_in_tasks_show(task, capsys):
    """A1-76 variants: `tasks show` without --artifact said 'no registry given' (fix: --artifact/--match)."""
    code, _, err = run_cli(capsys, "tasks", "show", task)
    assert_one_line_error(code, err, "begins or ends with white space", "'tester/metashift-x' (without the spaces)")


def test_a1_76_white_space_with_an_artifact_and_a_missing_folder(pristine, tmp_path):
    """A1-76 variants: with --artifact the padded id was 'unknown task'; a missing folder was 'made from an artifact'."""
    refused(f"{TASK} ", r"begins or ends with white space", UnknownNameError, artifact=pristine / "artifact")
    refused(str(tmp_path / "missing"), r"there is no folder .*missing", UnknownNameError)


# --- image cells: bytes only ------------------------------------------------------------------------------


def set_first_image(repo: Path, cell: dict) -> str:
    def fn(t):
        cells = t["image"].to_pylist()
        cells[0] = cell
        return set_column(t, "image", cells)

    mutate(repo, "test", fn)
    return pq.read_table(shard(repo, "test"))["image_id"][0].as_py()


def read_first(repo: Path, iid: str) -> bytes:
    return open_task(repo).images().read(iid)


def test_a1_45_cell_with_neither_bytes_nor_path(repo):  # A1-45
    iid = set_first_image(repo, {"bytes": None, "path": None})
    with pytest.raises(MissingImagesError, match=rf"image '{iid}'.*neither bytes nor a path"):
        read_first(repo, iid)


def test_a1_47_path_to_a_local_file_is_never_read(repo, tmp_path):  # A1-47
    secret = tmp_path / "secret.jpg"
    shutil.copy(sorted((repo.parent).rglob("*.parquet"))[0], secret)  # any local file
    iid = set_first_image(repo, {"bytes": b"", "path": str(secret)})
    with pytest.raises(MissingImagesError, match="a path but no bytes"):
        read_first(repo, iid)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a1_46_fifo_path_does_not_hang(repo, tmp_path):  # A1-46
    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    iid = set_first_image(repo, {"bytes": None, "path": str(fifo)})
    code = (
        f"from metashift_hf.hub.task_open import open_task\ntry:\n open_task({str(repo)!r}).images().read({iid!r})\n"
        "except Exception as e: print(type(e).__name__)"
    )
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "MissingImagesError" in r.stdout, r.stderr[-2000:]


def test_a1_45_evaluate_reads_pixels_through_the_task_and_names_the_row(repo):  # A1-45
    """evaluate has no byte reader of its own (issue 42): it reads a folder's pixels through TaskData.images(),
    whose message names the image and its row."""
    from metashift_hf.evaluate import EvalConfig, evaluate

    iid = set_first_image(repo, {"bytes": None, "path": None})

    def model(images):
        return np.zeros((len(images), 1000), np.float32)

    with pytest.raises(MissingImagesError, match=rf"image '{iid}' \(row \d+ of .*neither bytes nor a path"):
        evaluate(model, str(repo), settings=EvalConfig(progress=False, plots=False))


def test_a1_50_train_message_names_no_refused_flag(repo):  # A1-50
    iid = set_first_image(repo, {"bytes": None, "path": None})
    with pytest.raises(MissingImagesError) as info:
        read_first(repo, iid)
    assert "--on-missing" not in str(info.value) and "--images" not in str(info.value)


# --- property: any single mutation of consistent rows is refused naming that row ---------------------------

NAMES = st.text("abcdefgh", min_size=1, max_size=4)


@st.composite
def task(draw):
    classes = draw(st.lists(NAMES, min_size=2, max_size=3, unique=True))
    contexts = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    rows = draw(
        st.lists(st.tuples(st.integers(0, len(classes) - 1), st.sampled_from(contexts)), min_size=1, max_size=12)
    )
    groups = tuple(GroupSpec(group=f"{c}({x})", cls=c, contexts=(x,), n=1) for c in classes for x in contexts)
    spec = ShiftSpec(
        task_id="t",
        shift_type="marginal",
        classes=tuple(classes),
        seed=0,
        split_sizes={"test": len(rows)},
        test_groups=groups,
    )
    table = {
        "image_id": [f"i{n}" for n in range(len(rows))],
        "label": [y for y, _ in rows],
        "group": [f"{classes[y]}({x})" for y, x in rows],
        "context": [x for _, x in rows],
        "contexts": [[x] for _, x in rows],
        "community": [0] * len(rows),
    }
    return (
        spec,
        table,
        draw(st.integers(0, len(rows) - 1)),
        draw(st.sampled_from(["flip", "unknown", "range", "drop"])),
    )


def as_dd(spec: ShiftSpec, table: dict) -> datasets.DatasetDict:
    feats = {
        "image_id": datasets.Value("string"),
        "label": datasets.ClassLabel(names=list(spec.classes)),
        "group": datasets.Value("string"),
        "context": datasets.Value("string"),
        "contexts": datasets.List(datasets.Value("string")),
        "community": datasets.Value("int64"),
    }
    features = datasets.Features({k: v for k, v in feats.items() if k in table})
    # straight from arrow: no ClassLabel validation, so an out-of-range label reaches the check as data would
    return datasets.DatasetDict({"test": datasets.Dataset(pa.Table.from_pydict(table).cast(features.arrow_schema))})


@settings(max_examples=40, deadline=None)
@given(task())
def test_property_consistent_rows_pass_any_single_mutation_is_refused(case):
    spec, table, row, how = case
    check_rows(as_dd(spec, table), spec, "t")
    bad = {k: list(v) for k, v in table.items()}
    k = len(spec.classes)
    if how == "flip":
        bad["label"][row] = (bad["label"][row] + 1) % k
    elif how == "unknown":
        bad["context"][row] = "zzzzz"  # consistent with its own group, which the spec does not know
        bad["group"][row] = f"{spec.classes[bad['label'][row]]}(zzzzz)"
    elif how == "range":
        bad["label"][row] = k
    else:
        del bad["group"]
    with pytest.raises(InputFormatError) as info:
        check_rows(as_dd(spec, bad), spec, "t")
    assert (f"image i{row}" in str(info.value)) if how != "drop" else "group" in str(info.value)


# --- Hub endpoints that refuse or never answer: one error, bounded time -------------------------------------


def open_from_hub(endpoint: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DOWNLOAD_TIMEOUT": "2",
        "HF_HUB_ETAG_TIMEOUT": "2",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    env.pop("HF_HUB_OFFLINE", None)
    return subprocess.run(
        [sys.executable, "-m", "metashift_hf", "tasks", "show", "tester/metashift-x"],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        cwd=tmp_path,
    )


@pytest.mark.slow  # ~25 s on 2 busy cores: a CLI subprocess whose Hub client retries the refused connection
def test_a1_12_connection_refused_is_one_error(tmp_path):
    """(A1-12) HF_ENDPOINT refusing connections: one error/fix after the client's retries, no traceback."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = open_from_hub(f"http://127.0.0.1:{port}", tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "no answer from the Hub" in r.stderr and "fix:" in r.stderr


def test_a_rewritten_folder_is_read_again_not_from_the_cache_of_its_first_load(repo):
    """datasets (5.2) keys a local folder's cache by paths: rewritten shards (export --force, an edit; the mtime
    even put back) were read as the rows of the first load, so evaluate scored the old images with exit 0."""
    first = pq.read_table(shard(repo, "test"))
    iid, other = first["image_id"][0].as_py(), first["image"][1].as_py()["bytes"]
    before = read_first(repo, iid)
    assert before != other
    stat = shard(repo, "test").stat()
    set_first_image(repo, {"bytes": other, "path": None})
    os.utime(shard(repo, "test"), ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the old mtime: only ctime tells
    assert read_first(repo, iid) == other
