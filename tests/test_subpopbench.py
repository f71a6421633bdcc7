"""``subpopbench-cat-dog`` (issue 45 part 2): SubpopBench's MetaShift as a task. Its split equals SubpopBench's
``generate_metadata_metashift`` run on the exported folder's four groups; a SubpopBench metadata file's split is
used as it is; SubpopBench's adjusted_accuracy is scored beside ours, each labelled."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from metashift_hf.core.errors import InputFormatError
from metashift_hf.hub.export import export_tasks
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.scoring.groups import group_score
from metashift_hf.scoring.summary import adjusted_average, group_mean_accuracy
from metashift_hf.tasks import families as tasks
from metashift_hf.tasks import subpopbench


TID = subpopbench.TASK_ID


def generate_metadata_metashift_reference(ms_dir: Path, test_pct: float = 0.25, val_pct: float = 0.1) -> pd.DataFrame:
    """SubpopBench's ``subpopbench/scripts/download.py::generate_metadata_metashift`` (github.com/YyzHarry/SubpopBench,
    commit 4d3dbbe2), its lines as they are, except ``sorted(...)`` around ``Path.glob`` (the file system's listing
    order, which SubpopBench leaves as it comes) and the CSV write (the frame is returned):

        dirs = {
            'train/cat/cat(indoor)': [1, 1],
            'train/dog/dog(outdoor)': [0, 0],
            'test/cat/cat(outdoor)': [1, 0],
            'test/dog/dog(indoor)': [0, 1]
        }
        ...
        rng = np.random.RandomState(42)
        test_idxs = rng.choice(np.arange(len(df)), size=int(len(df) * test_pct), replace=False)
        val_idxs = rng.choice(np.setdiff1d(np.arange(len(df)), test_idxs), size=int(len(df) * val_pct), replace=False)
    """
    dirs = {
        "train/cat/cat(indoor)": [1, 1],
        "train/dog/dog(outdoor)": [0, 0],
        "test/cat/cat(outdoor)": [1, 0],
        "test/dog/dog(indoor)": [0, 1],
    }
    all_data = []
    for dir in dirs:
        folder_path = ms_dir / "MetaShift-Cat-Dog-indoor-outdoor" / dir
        y = dirs[dir][0]
        g = dirs[dir][1]
        for img_path in sorted(Path(folder_path).glob("*.jpg")):
            all_data.append({"filename": img_path, "y": y, "a": g})
    df = pd.DataFrame(all_data)

    rng = np.random.RandomState(42)

    test_idxs = rng.choice(np.arange(len(df)), size=int(len(df) * test_pct), replace=False)
    val_idxs = rng.choice(np.setdiff1d(np.arange(len(df)), test_idxs), size=int(len(df) * val_pct), replace=False)

    split_array = np.zeros((len(df), 1))
    split_array[val_idxs] = 1
    split_array[test_idxs] = 2

    df["split"] = split_array.astype(int)
    return df


@pytest.fixture(scope="module")
def exported(demo_build, tmp_path_factory):
    """The task exported from the demo world (images embedded) and loaded back with ``datasets``: its rows."""
    import datasets

    world, art = demo_build
    root = tmp_path_factory.mktemp("subpopbench")
    origin = TaskOrigin(artifact=art.root, images=world.images_dir)
    (repo,) = [r for r in export_tasks([TID], origin, root / "out") if r.name == f"metashift-{TID}"]
    loaded = datasets.load_dataset(str(repo.path), TID, cache_dir=str(root / "hf-cache"))
    frames = []
    for split, d in loaded.items():
        d = d.cast_column("image", datasets.Image(decode=False))  # the original JPEG bytes
        frames.append(d.select_columns(["image_id", "group", "image"]).to_pandas().assign(split=split))
    return root, art, pd.concat(frames, ignore_index=True)


FOLDERS = {
    "cat(indoor)": "train/cat",
    "dog(outdoor)": "train/dog",
    "cat(outdoor)": "test/cat",
    "dog(indoor)": "test/dog",
}


def _reference_split(ms_dir: Path) -> dict[str, str]:
    ref = generate_metadata_metashift_reference(ms_dir)
    return {Path(f).stem: {0: "train", 1: "validation", 2: "test"}[s] for f, s in zip(ref["filename"], ref["split"])}


def test_planned_split_equals_subpopbench_generate_metadata_on_its_groups(demo_build, tmp_path):
    """The quick check: the plan's four groups as MetaShift's folders (empty files: the reference reads names only)."""
    _, art = demo_build
    plan = tasks.plan_task(TID, art)
    got = {r.image_id: s for s, rows in plan.splits.items() for r in rows}
    for rows in plan.splits.values():
        for r in rows:
            d = tmp_path / "MetaShift-Cat-Dog-indoor-outdoor" / FOLDERS[r.group] / r.group
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{r.image_id}.jpg").touch()
    assert got == _reference_split(tmp_path) and len(got) > 1000
    assert set(plan.splits) == {"train", "validation", "test"} and plan.spec.shift_type == "none"


@pytest.mark.slow  # ~40 s: exports the task with its images and loads it back with datasets
def test_split_equals_subpopbench_generate_metadata_on_the_exported_folder(exported):
    root, _, rows = exported
    # the exported rows as MetaShift's unmixed folder: <split>/<class>/<group>/<image_id>.jpg, the original bytes
    ms_dir = root / "metashift"
    folders = {
        "cat(indoor)": "train/cat",
        "dog(outdoor)": "train/dog",
        "cat(outdoor)": "test/cat",
        "dog(indoor)": "test/dog",
    }
    assert set(rows["group"]) == set(folders)
    for _, r in rows.iterrows():
        d = ms_dir / "MetaShift-Cat-Dog-indoor-outdoor" / folders[r["group"]] / r["group"]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{r['image_id']}.jpg").write_bytes(r["image"]["bytes"])
    ref = generate_metadata_metashift_reference(ms_dir)
    want = _reference_split(ms_dir)
    got = dict(zip(rows["image_id"], rows["split"]))
    assert len(want) == len(rows) and got == want
    sizes = Counter(got.values())
    n = len(rows)
    assert sizes["test"] == int(n * 0.25) and sizes["validation"] == int(n * 0.1)
    # the label and the attribute agree with the folder (y = 1 cat, a = 1 indoor)
    ya = {Path(f).stem: (y, a) for f, y, a in zip(ref["filename"], ref["y"], ref["a"])}
    assert all(
        ya[i] == ((g.startswith("cat")) * 1, g.endswith("(indoor)") * 1)
        for i, g in zip(rows["image_id"], rows["group"])
    )


def test_groups_are_carved_as_metashift_does(demo_build):
    """Test groups first, then the train groups without their images; cat-dog images nowhere."""
    _, art = demo_build
    source = tasks.group_source(art)
    carved, _ = subpopbench.carve_groups(source)
    from metashift_hf.tasks.shifts import ambiguous_images, group_images

    amb = ambiguous_images(source, ("cat", "dog"))
    groups = subpopbench._groups()
    test = group_images(source, groups["cat(outdoor)"]) - amb, group_images(source, groups["dog(indoor)"]) - amb
    assert set(carved["cat(outdoor)"]) == test[0] and set(carved["dog(indoor)"]) == test[1]
    for name in ("cat(indoor)", "dog(outdoor)"):
        assert set(carved[name]) == group_images(source, groups[name]) - amb - test[0] - test[1]
    assert all(ids == sorted(ids, key=lambda i: f"{i}.jpg") for ids in carved.values())


def test_metadata_split_is_used_as_it_is_and_unknown_ids_are_refused(demo_build, tmp_path):
    _, art = demo_build
    default = tasks.plan_task(TID, art)
    everyone = [(r.image_id, r.group) for rows in default.splits.values() for r in rows]
    # a split of our own choosing: every third image test, the rest train, a few left out
    code = {"cat(indoor)": (1, 1), "dog(outdoor)": (0, 0), "cat(outdoor)": (1, 0), "dog(indoor)": (0, 1)}
    lines = ["filename,y,a,split"]
    for k, (i, g) in enumerate(everyone[:-5]):
        y, a = code[g]
        lines.append(
            f"/data/metashift/MetaShift-Cat-Dog-indoor-outdoor/x/{g}/{i}.jpg,{y},{a},{2 if k % 3 == 0 else 0}"
        )
    csv = tmp_path / "metadata_metashift.csv"
    csv.write_text("\n".join(lines) + "\n")
    plan = tasks.plan_task(TID, art, metadata=str(csv))
    got = {r.image_id: s for s, rows in plan.splits.items() for r in rows}
    assert got == {i: ("test" if k % 3 == 0 else "train") for k, (i, _) in enumerate(everyone[:-5])}
    assert any("not in the metadata" in n for n in plan.spec.notes) and plan.spec.overrides == {"metadata": str(csv)}
    # an id the build does not have, or a row whose group differs from the build's: refused by name
    csv.write_text("\n".join([*lines, "/x/cat(indoor)/no-such-image.jpg,1,1,0"]) + "\n")
    with pytest.raises(InputFormatError, match="no-such-image"):
        tasks.plan_task(TID, art, metadata=str(csv))
    first_id, first_group = everyone[0]
    y, a = code[first_group]
    swapped = [lines[0], f"/x/{first_id}.jpg,{1 - y},{a},0"]
    csv.write_text("\n".join(swapped) + "\n")
    with pytest.raises(InputFormatError, match=f"another group in this build: {first_id}"):
        tasks.plan_task(TID, art, metadata=str(csv))
    for bad, match in (
        ("filename,y,split\nx.jpg,1,0\n", "lacks the column"),
        ("filename,y,a,split\nx.jpg,1,1,7\n", "split=7"),
    ):
        csv.write_text(bad)
        with pytest.raises(InputFormatError, match=match):
            tasks.plan_task(TID, art, metadata=str(csv))
    with pytest.raises(InputFormatError, match="does not exist"):
        tasks.plan_task(TID, art, metadata=str(tmp_path / "absent.csv"))


def test_cli_set_metadata(demo_build, tmp_path, capsys):
    from metashift_hf.cli import main

    _, art = demo_build
    csv = tmp_path / "m.csv"
    csv.write_text("filename,y,a,split\n/x/cat(indoor)/nope.jpg,1,1,0\n")
    rc = main(["tasks", "show", TID, "--artifact", str(art.root), "--set", f"{TID}:metadata={csv}"])
    assert rc == 2 and "nope" in capsys.readouterr().err
    main(["tasks", "show", TID, "--artifact", str(art.root)])
    out = capsys.readouterr().out
    assert "SubpopBench's MetaShift" in out and "verdict: consistent" in out


def test_both_adjusted_accuracies_are_defined_once_and_differ_as_defined():
    per_group = [group_score("a", "test", [True] * 9 + [False]), group_score("b", "test", [True, False])]
    assert group_mean_accuracy(per_group) == pytest.approx((0.9 + 0.5) / 2)  # SubpopBench: every group the same
    assert adjusted_average(per_group, {"a": 0.75, "b": 0.25}) == pytest.approx(0.75 * 0.9 + 0.25 * 0.5)  # ours
    assert group_mean_accuracy([]) is None and adjusted_average(per_group, {}) is None
