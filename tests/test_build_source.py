"""`metashift-hf build --source gqa|published` finds its inputs through the data manifest."""

from __future__ import annotations

import json

import pytest

from metashift_hf import cli
from metashift_hf.sources import manifest as mf


pytestmark = pytest.mark.usefixtures("isolated_manifest")


def _scene_graph_folder(tmp_path):
    contexts = ["sofa", "bed", "frisbee", "car", "table", "ball"]
    graphs = {}
    for i in range(30):
        objects = {
            "0": {
                "name": "dog",
                "x": 0,
                "y": 0,
                "w": 5,
                "h": 5,
                "attributes": [],
                "relations": [{"name": "near", "object": str(k + 1)} for k in range(len(contexts))],
            }
        }
        for k, c in enumerate(contexts):
            objects[str(k + 1)] = {"name": c, "x": k, "y": k, "w": 3, "h": 3, "attributes": [], "relations": []}
        graphs[str(500 + i)] = {"width": 64, "height": 48, "objects": objects}
    folder = tmp_path / "sg"
    folder.mkdir()
    (folder / "train_sceneGraphs.json").write_text(json.dumps(graphs))
    return folder


def test_build_source_gqa_uses_registered_scene_graphs(tmp_path, capsys):
    mf.register("scene-graphs", _scene_graph_folder(tmp_path))
    assert cli.main(["build", "--source", "gqa", "--out", str(tmp_path / "art"), "--no-plots", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "classes: 1" in out
    manifest = json.loads((tmp_path / "art" / "manifest.json").read_text())
    assert manifest["source"] == "gqa"
    assert [i["path"].endswith("train_sceneGraphs.json") for i in manifest["inputs"]] == [True]


def test_build_source_without_inputs_says_what_to_download(tmp_path, capsys):
    assert cli.main(["build", "--source", "published", "--out", str(tmp_path / "art")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "metashift-hf download --what subsets" in err
    assert not (tmp_path / "art").exists()


def test_build_source_conflicts_with_explicit_files(tmp_path, capsys):
    folder = _scene_graph_folder(tmp_path)
    code = cli.main(
        [
            "build",
            "--source",
            "gqa",
            "--scene-graphs",
            str(folder / "train_sceneGraphs.json"),
            "--out",
            str(tmp_path / "art"),
        ]
    )
    assert code == 2 and "either --source" in capsys.readouterr().err
