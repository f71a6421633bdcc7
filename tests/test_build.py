"""`metashift-hf build` / `distance` end to end: inputs, options, errors, atomicity, determinism."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from metashift_hf.builders.artifact import Artifact
from metashift_hf.cli import main


sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from synthetic_gqa import generate  # noqa: E402


@pytest.fixture(scope="module")
def scene_graphs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sg") / "train_sceneGraphs.json"
    generate(path, n_images=600, seed=3, n_names=80, n_topics=12)
    return path


@pytest.fixture(scope="module")
def sg_artifact(scene_graphs, tmp_path_factory) -> Artifact:
    out = tmp_path_factory.mktemp("art") / "artifact"
    assert (
        main(["build", "--scene-graphs", str(scene_graphs), "--out", str(out), "--include-attributes", "--quiet"]) == 0
    )
    return Artifact.load(out)


def embedded_pair(art: Artifact) -> tuple[str, str]:
    for subject in art.classes():
        names = [s for s in art.subsets_of(subject) if art.embedding(s) is not None]
        if len(names) >= 2:
            return names[0], names[1]
    raise AssertionError("no class with two embedded subsets")


def test_build_from_attributes_pickle(shared_ref, tmp_path, capsys):
    pkl = shared_ref / "metashift" / "attributes-candidate-subsets.pkl"
    out = tmp_path / "art"
    assert main(["build", "--attributes-pickle", str(pkl), "--out", str(out), "--no-plots", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "classes: 66   subsets: 679" in printed and "candidate subsets: 4,962" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == "published" and manifest["options"]["include_attributes"] is True
    assert manifest["inputs"] == [
        {
            "path": str(pkl.resolve()),
            "role": "attributes_pickle",
            "sha256": "bc5225923e4cd799ad851e052b3c67ad541840203daf83a7850017874010298a",
        }
    ]
    art = Artifact.load(out)
    assert "2375429" in art.images("horse(white)")


def test_scene_graph_build(sg_artifact, scene_graphs):
    art = sg_artifact
    manifest = art.manifest
    assert manifest.source == "gqa" and manifest.inputs[0]["role"] == "scene_graphs"
    assert art.options.pairing == "relation" and art.stats.classes >= 3
    kinds = set(art.subsets_table().kind)
    assert kinds == {"object", "general", "attribute"}
    data = json.loads(scene_graphs.read_text())
    image_id = sorted(data)[5]
    meta = art.image_metadata(image_id)
    assert meta["objects"] == data[image_id]["objects"] and meta["width"] == data[image_id]["width"]
    assert meta["location"] == data[image_id].get("location")
    assert art.image_metadata("not-an-image") is None
    if (art.root / "plots").is_dir():  # plot extra installed
        assert len(list((art.root / "plots").glob("*.png"))) == len(art.classes())


def test_distance_command(sg_artifact, capsys):
    a, b = embedded_pair(sg_artifact)
    assert main(["distance", "--artifact", str(sg_artifact.root), a, b, "--value"]) == 0
    value, rule = capsys.readouterr().out.split()
    assert float(value) == pytest.approx(sg_artifact.distance(a, b).value, abs=1e-6) and rule == "(spectral)"


def test_distance_matrix_command(sg_artifact, capsys, tmp_path):
    a, _ = embedded_pair(sg_artifact)
    cls = a.split("(")[0]
    root = str(sg_artifact.root)
    assert main(["distance", "--artifact", root, "--class", cls, "--matrix"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    n = len(sg_artifact.subsets_of(cls))
    assert len(rows) == n * (n - 1) // 2
    for r in rows:
        d = sg_artifact.distance(r["source"], r["target"])
        assert r["status"] == d.status and r["rule"] == (d.rule or "")
        assert (r["distance"] == "") == (d.value is None) and (d.value is None or float(r["distance"]) == d.value)
    out = tmp_path / "m.csv"
    assert main(["distance", "--artifact", root, "--class", cls, "--matrix", "--out", str(out)]) == 0
    assert list(csv.DictReader(out.open())) == rows and f"wrote {len(rows)} pairs" in capsys.readouterr().out
    assert main(["distance", "--artifact", root, "--matrix"]) == 2
    assert "--matrix needs --class" in capsys.readouterr().err


def test_distance_errors(sg_artifact, capsys):
    root = str(sg_artifact.root)
    a, _ = embedded_pair(sg_artifact)
    other = next(c for c in sg_artifact.classes() if not a.startswith(c + "("))
    b = sg_artifact.subsets_of(other)[0]
    for args, message in (
        ([a, b], "different classes"),
        ([a, a[:-1] + "x)"], "unknown subset"),
        (["no(such)", a], "unknown subset"),
    ):
        assert main(["distance", "--artifact", root, *args]) == 2
        err = capsys.readouterr().err
        assert "error: " in err and message in err and "  fix: " in err
    assert main(["distance", "--artifact", "/nonexistent", a, a]) == 2
    assert "not a metashift-hf artifact" in capsys.readouterr().err


def test_options_reach_the_artifact(scene_graphs, tmp_path):
    out = tmp_path / "art"
    assert (
        main(
            [
                "build",
                "--scene-graphs",
                str(scene_graphs),
                "--out",
                str(out),
                "--no-include-general",
                "--edge-threshold",
                "0.1",
                "--community-method",
                "louvain",
                "--seed",
                "4",
                "--pairing",
                "cooccurrence",
                "--min-images-per-subset",
                "30",
                "--no-plots",
                "--quiet",
            ]
        )
        == 0
    )
    art = Artifact.load(out)
    o = art.options
    assert (o.edge_threshold, o.community_method, o.seed, o.pairing, o.min_images_per_subset) == (
        0.1,
        "louvain",
        4,
        "cooccurrence",
        30,
    )
    assert set(art.subsets_table().kind) == {"object"}
    assert (art.subsets_table().query("kept").n_images >= 30).all()
    ctx = tmp_path / "ctx"
    assert (
        main(
            [
                "build",
                "--scene-graphs",
                str(scene_graphs),
                "--out",
                str(ctx),
                "--general-context-as",
                "context",
                "--no-include-objects",
                "--no-plots",
                "--quiet",
            ]
        )
        == 0
    )
    table = Artifact.load(ctx).subsets_table()
    assert set(table.kind) == {"general"}
    assert all(
        c in ("indoors", "outdoors", "clear", "overcast", "cloudless", "cloudy", "sunny", "foggy", "rainy")
        or c in ("bedroom", "kitchen", "bathroom", "living room")
        or c in set(table.context)
        for c in table.context
    )
    assert not set(table.subject) & {"indoors", "outdoors", "sunny"}


def test_determinism_byte_identical(scene_graphs, tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert (
            main(
                [
                    "build",
                    "--scene-graphs",
                    str(scene_graphs),
                    "--out",
                    str(out),
                    "--include-attributes",
                    "--community-method",
                    "louvain",
                    "--no-plots",
                    "--quiet",
                ]
            )
            == 0
        )
        outs.append(out)
    tables = sorted(p.name for p in outs[0].glob("*.parquet"))
    assert "images.parquet" in tables and "distances.parquet" in tables and len(tables) == 7
    for t in tables:
        assert (outs[0] / t).read_bytes() == (outs[1] / t).read_bytes(), t
    assert Artifact.load(outs[0]).content_hash == Artifact.load(outs[1]).content_hash
    assert pq.read_table(outs[0] / "images.parquet").column("image_id").to_pylist() == sorted(
        json.loads(scene_graphs.read_text())
    )


def test_bad_inputs(tmp_path, scene_graphs, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(scene_graphs.read_text()[:5000], encoding="utf-8")
    cases = [
        (["--scene-graphs", str(bad)], "malformed JSON at byte"),
        (["--scene-graphs", str(scene_graphs), "--candidate-subsets", str(bad)], "2 sources given (--scene-graphs, "),
        ([], "no input given"),
        (["--scene-graphs", str(scene_graphs), "--min-images-per-subset", "100000"], "no class passes the rules"),
        (["--scene-graphs", str(scene_graphs), "--spectral-dim", "0"], "spectral_dim=0"),
        (
            ["--candidate-subsets", str(tmp_path / "attributes-candidate-subsets.pkl")],
            "pass it with --attributes-pickle",
        ),
    ]
    for args, message in cases:
        out = tmp_path / "out"
        assert main(["build", *args, "--out", str(out), "--quiet"]) == 2, args
        err = capsys.readouterr().err
        assert message in err and "fix:" in err, (args, err)
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]  # no temp folders left


def test_interrupted_build_leaves_nothing(scene_graphs, tmp_path, monkeypatch):
    import metashift_hf.builders.metagraph as mg

    calls = {"n": 0}
    real = mg.analyse_class

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(mg, "analyse_class", flaky)
    out = tmp_path / "art"
    assert main(["build", "--scene-graphs", str(scene_graphs), "--out", str(out), "--quiet", "--no-plots"]) == 130
    assert list(tmp_path.iterdir()) == []
