"""Image and tree inputs of the commands: --on-missing error|skip, and inputs found through the data
manifest / environment (metashift-hf download) when no path is given."""

from __future__ import annotations

import json

import pytest

import metashift_hf
from fixtures.tasks import sample_jpegs
from metashift_hf import cli
from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.sources import manifest as mf
from metashift_hf.tasks.spec import ShiftSpec


pytestmark = pytest.mark.usefixtures("isolated_manifest")


def _world(tmp_path):
    images = tmp_path / "images"
    ids = sorted(p.stem for p in sample_jpegs(images, n=15))
    subsets = {"cat(a)": ids[0:8], "cat(b)": ids[4:12], "cat(c)": ids[8:]}
    art = build_artifact(
        CandidateSubsets.from_dict(subsets),
        tmp_path / "art",
        BuildOptions(min_images_per_subset=3, min_subsets_per_class=2),
        plots=False,
    )
    return art, images, ids


def test_export_missing_image_errors_then_skips(tmp_path, capsys):
    art, images, ids = _world(tmp_path)
    (images / f"{ids[3]}.jpg").unlink()
    args = ["export", "class-cat", "--artifact", str(art.root), "--images", str(images), "--no-verify"]

    assert cli.main(args + ["--out", str(tmp_path / "out1")]) == 2
    err = capsys.readouterr().err
    assert f"1 missing ({ids[3]})" in err and "--on-missing skip" in err
    assert not (tmp_path / "out1" / "metashift-class-cat").exists()

    assert cli.main(args + ["--out", str(tmp_path / "out2"), "--on-missing", "skip"]) == 0
    spec = metashift_hf.shift_spec(tmp_path / "out2" / "metashift-class-cat")
    assert spec.skipped_images.missing == (ids[3],) and spec.skipped_images.n == 1
    assert sum(spec.split_sizes.values()) == len(ids) - 1


@pytest.mark.slow
def test_export_and_evaluate_find_registered_images(tmp_path, capsys):
    art, images, ids = _world(tmp_path)
    args = ["export", "class-cat", "--artifact", str(art.root), "--no-verify", "--out", str(tmp_path / "o")]
    assert cli.main(args) == 2
    assert "--images not given" in capsys.readouterr().err
    mf.register("images", images)
    assert cli.main(args) == 0
    assert (tmp_path / "o" / "metashift-class-cat" / "README.md").is_file()
    pytest.importorskip("torch")
    pytest.importorskip("efficientnet_lite_pytorch")
    assert (
        cli.main(
            [
                "evaluate",
                "--model",
                "efficientnet-lite0",
                "--task",
                "class-cat",
                "--artifact",
                str(art.root),
                "--out",
                str(tmp_path / "ev"),
                "--no-progress",
            ]
        )
        == 0
    )
    report = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert report["overall"]["n"] == len(ids)


def test_match_paper_uses_the_registered_tree_offline(shared_ref, tmp_path, monkeypatch, capsys):
    ref = shared_ref / "metashift"
    monkeypatch.delenv("METASHIFT_HF_PAPER_TREE_URL", raising=False)  # no fetch: the registered copy is used
    mf.register("imagenet-tree", ref / "imagenet1k_node_names.json")
    args = [
        "match",
        "--subset-names",
        str(ref / "candidate-subset-names.txt"),
        "--vocabulary",
        str(ref / "class_hierarchy.json"),
        "--hierarchy",
        "paper",
        "--out",
        str(tmp_path / "m"),
    ]
    assert cli.main(args) == 0
    figures = json.loads((tmp_path / "m" / "match.json").read_text())
    assert (figures["matched_names"], figures["subsets"], figures["classes"]) == (427, 5040, 261)


def test_tasks_show_takes_task_options(tmp_path, capsys):
    contexts = {
        "cat": ["cup", "sofa", "chair", "bed", "pillow", "shelf", "vase"],
        "dog": ["cabinet", "floor", "bed", "blanket", "shelf", "desk", "laptop"],
    }
    subsets, n = {}, 0
    for cls, ctxs in contexts.items():
        for c in ctxs:
            subsets[f"{cls}({c})"] = [str(100000 + n + i) for i in range(40)]
            n += 40
    art = build_artifact(CandidateSubsets.from_dict(subsets), tmp_path / "art", BuildOptions(), plots=False)
    show = ["tasks", "show", "paper-dg-cat-dog-1", "--artifact", str(art.root)]
    assert cli.main(show) == 2  # paper sizes: 100 per training group
    assert "cannot be planned with the default sizes" in capsys.readouterr().err
    assert cli.main(show + ["--set", "scale=0.2", "--seed", "3", "--json"]) == 0
    spec = ShiftSpec.from_json(json.dumps(json.loads(capsys.readouterr().out)["shift_spec"]))
    assert spec.seed == 3 and spec.split_sizes["train"] == 4 * 20
