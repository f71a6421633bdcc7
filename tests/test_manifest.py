"""Data manifest: register (sha256 of known files), environment overrides, build-input resolution,
pins of the known files against the shared real copies."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from fixtures.tasks import sample_jpegs
from metashift_hf import cli
from metashift_hf.core.errors import ChecksumError, InputFormatError, UnknownNameError
from metashift_hf.core.fsutil import sha256_file
from metashift_hf.core.sources import KNOWN_FILES, identify, known_file
from metashift_hf.sources import manifest as mf


pytestmark = pytest.mark.usefixtures("isolated_manifest")


@pytest.mark.parametrize(
    "key,rel",
    [
        ("attributes", "metashift/attributes-candidate-subsets.pkl"),
        ("imagenet-tree", "metashift/imagenet1k_node_names.json"),
    ],
)
def test_pins_match_the_shared_real_files(shared_ref, key, rel):
    path = shared_ref / rel
    kf = KNOWN_FILES[key]
    assert path.stat().st_size == kf.size and path.name == kf.file_name
    assert sha256_file(path) == kf.sha256
    assert identify(path) is kf


def test_known_file_names_every_key():
    assert known_file("images").file_name == "images.zip"
    with pytest.raises(UnknownNameError, match="did you mean 'images'"):
        known_file("image")


def test_default_manifest_lives_in_the_cache(tmp_path):
    assert mf.default_manifest_path() == tmp_path / "cache" / "manifest.json"
    m = mf.DataManifest.load()
    assert m.entries == {} and not m.path.exists()


def test_register_known_file_verifies_and_remembers(shared_ref, tmp_path, monkeypatch):
    src = shared_ref / "metashift" / "attributes-candidate-subsets.pkl"
    entry = mf.register("attributes", src, progress=False)
    assert entry["known"] == "attributes" and entry["sha256"] == KNOWN_FILES["attributes"].sha256
    doc = json.loads((tmp_path / "cache" / "manifest.json").read_text())
    assert doc["format"] == mf.FORMAT and doc["inputs"]["attributes"]["path"] == str(src)
    assert mf.resolve_input("attributes") == src
    # Registering again does not re-hash the unchanged file.
    monkeypatch.setattr(mf, "sha256_file", lambda *a, **k: pytest.fail("re-hashed"))
    mf.register("attributes", src, progress=False)


def test_register_renamed_known_file_is_still_checked(shared_ref, tmp_path):
    copy = tmp_path / "my-attrs.pkl"
    shutil.copyfile(shared_ref / "metashift" / "attributes-candidate-subsets.pkl", copy)
    assert mf.register("attributes", copy, progress=False)["known"] == "attributes"  # same size -> pinned
    truncated = tmp_path / "attributes-candidate-subsets.pkl"
    truncated.write_bytes(copy.read_bytes()[:-10])
    with pytest.raises(ChecksumError) as err:
        mf.register("attributes", truncated, progress=False)
    assert str(truncated) in err.value.what and "--what attributes" in err.value.fix


def test_register_custom_files_are_shape_checked(tmp_path):
    pkl = tmp_path / "mine.pkl"
    pkl.write_bytes(b"\x80\x04N.")
    assert mf.register("subsets", pkl, progress=False)["known"] is None
    txt = tmp_path / "notes.pkl"
    txt.write_text("hello")
    with pytest.raises(InputFormatError, match="not a pickle"):
        mf.register("subsets", txt)
    with pytest.raises(InputFormatError, match="holds none of"):
        mf.register("scene-graphs", tmp_path)  # a folder without scene-graph JSON
    with pytest.raises(mf.MissingInputError, match="does not exist"):
        mf.register("subsets", tmp_path / "nope.pkl")
    with pytest.raises(UnknownNameError, match="did you mean"):
        mf.register("subset", pkl)


def test_register_images_zip_made_from_jpegs(tmp_path):
    z = tmp_path / "my_images.zip"
    jpgs = sample_jpegs(tmp_path / "jpegs")
    with zipfile.ZipFile(z, "w") as zf:
        for p in jpgs:
            zf.write(p, f"images/{p.name}")
    entry = mf.register("images", z, progress=False)
    assert entry["n_images"] == len({p.stem for p in jpgs}) and entry["known"] is None
    assert mf.resolve_input("images") == z


def test_environment_overrides_manifest(tmp_path, monkeypatch, shared_ref):
    tree = shared_ref / "metashift" / "imagenet1k_node_names.json"
    mf.register("imagenet-tree", tree, progress=False)
    other = tmp_path / "tree.json"
    other.write_text('{"children": []}')
    monkeypatch.setenv("METASHIFT_HF_IMAGENET_TREE", str(other))
    assert mf.resolve_input("imagenet-tree") == other
    monkeypatch.setenv("METASHIFT_HF_IMAGENET_TREE", str(tmp_path / "gone.json"))
    with pytest.raises(mf.MissingInputError, match=r"\$METASHIFT_HF_IMAGENET_TREE"):
        mf.resolve_input("imagenet-tree")
    # A file with the known name but the wrong size is refused without hashing.
    wrong = tmp_path / "imagenet1k_node_names.json"
    wrong.write_text("{}")
    monkeypatch.setenv("METASHIFT_HF_IMAGENET_TREE", str(wrong))
    with pytest.raises(ChecksumError, match="incomplete or a different file"):
        mf.resolve_input("imagenet-tree")


def _sg_zip(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("train_sceneGraphs.json", json.dumps({"1": {"width": 1, "height": 1, "objects": {}}}))
        zf.writestr("val_sceneGraphs.json", "{}")
    return path


def test_resolve_gqa_extracts_a_registered_zip(tmp_path):
    with pytest.raises(mf.MissingInputError) as err:
        mf.resolve_build_inputs("gqa")
    assert "metashift-hf download --what scene-graphs" in err.value.fix
    z = _sg_zip(tmp_path / "sceneGraphs-copy.zip")
    mf.register("scene-graphs", z)
    got = mf.resolve_build_inputs("gqa")
    assert [p.name for p in got["scene_graphs"]] == ["train_sceneGraphs.json", "val_sceneGraphs.json"]
    assert got["scene_graphs"][0].parent == tmp_path / "sceneGraphs"
    assert got["candidate_subsets"] is None and got["attributes_pickle"] is None and got["images"] is None
    entry = mf.DataManifest.load().entry("scene-graphs")
    assert entry["extracted"] == [str(p) for p in got["scene_graphs"]]


def test_resolve_gqa_from_folder_or_json(tmp_path):
    folder = tmp_path / "sg"
    folder.mkdir()
    (folder / "val_sceneGraphs.json").write_text("{}")
    mf.register("scene-graphs", folder)
    assert mf.resolve_build_inputs("gqa")["scene_graphs"] == [folder / "val_sceneGraphs.json"]
    one = tmp_path / "mine.json"
    one.write_text(" {}")
    mf.register("scene-graphs", one)
    assert mf.resolve_build_inputs("gqa")["scene_graphs"] == [one]


def test_resolve_published(tmp_path, shared_ref):
    with pytest.raises(mf.MissingInputError) as err:
        mf.resolve_build_inputs("published")
    assert "--what subsets" in err.value.fix
    pkl = tmp_path / "full.pkl"
    pkl.write_bytes(b"\x80\x04}.")
    mf.register("subsets", pkl)
    got = mf.resolve_build_inputs("published")
    assert got["candidate_subsets"] == pkl and got["attributes_pickle"] is None and got["scene_graphs"] == []
    with pytest.raises(mf.MissingInputError, match="attributes"):
        mf.resolve_build_inputs("published", include_attributes=True)
    attrs = shared_ref / "metashift" / "attributes-candidate-subsets.pkl"
    mf.register("attributes", attrs, progress=False)
    assert mf.resolve_build_inputs("published", include_attributes=True)["attributes_pickle"] == attrs
    with pytest.raises(UnknownNameError, match="did you mean 'gqa'"):
        mf.resolve_build_inputs("gq")


def test_manifest_entry_for_deleted_file(tmp_path):
    pkl = tmp_path / "full.pkl"
    pkl.write_bytes(b"\x80\x04}.")
    mf.register("subsets", pkl)
    pkl.unlink()
    with pytest.raises(mf.MissingInputError) as err:
        mf.resolve_build_inputs("published")
    assert "data manifest" in err.value.what and "download --register subsets" in err.value.fix


def test_malformed_manifest(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text("{not json")
    with pytest.raises(InputFormatError, match="unreadable"):
        mf.DataManifest.load(bad)
    bad.write_text(json.dumps({"format": "something-else", "inputs": {}}))
    with pytest.raises(InputFormatError, match="not a metashift-hf data manifest"):
        mf.DataManifest.load(bad)


def test_cli_register_and_status(tmp_path, shared_ref, capsys):
    man = tmp_path / "m.json"
    tree = shared_ref / "metashift" / "imagenet1k_node_names.json"
    assert (
        cli.main(["download", "--manifest", str(man), "--register", "imagenet-tree", str(tree), "--no-progress"]) == 0
    )
    assert "sha256 verified" in capsys.readouterr().out
    assert cli.main(["download", "--manifest", str(man), "--status"]) == 0
    out = capsys.readouterr().out
    assert f"imagenet-tree  {tree}" in out and "subsets        missing" in out
    assert cli.main(["download", "--manifest", str(man), "--register", "subsets", str(tree)]) == 2
    assert "not a pickle" in capsys.readouterr().err


def test_end_to_end_registered_scene_graph_zip_to_build_and_stats(tmp_path):
    """register sceneGraphs.zip -> resolve_build_inputs('gqa') -> build -> stats --verify."""
    from metashift_hf.builders.build import build_from_inputs
    from metashift_hf.builders.build_inputs import SceneGraphs
    from metashift_hf.sources import stats

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
                "attributes": ["brown"],
                "relations": [{"name": "near", "object": str(k + 1)} for k in range(len(contexts))],
            }
        }
        for k, c in enumerate(contexts):
            objects[str(k + 1)] = {"name": c, "x": k, "y": k, "w": 3, "h": 3, "attributes": [], "relations": []}
        graphs[str(1000 + i)] = {"width": 64, "height": 48, "location": "indoors", "objects": objects}
    z = tmp_path / "my-scene-graphs.zip"  # named sceneGraphs.zip it would have to be the published file
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("train_sceneGraphs.json", json.dumps(graphs))
        zf.writestr("val_sceneGraphs.json", "{}")
    mf.register("scene-graphs", z)  # not the published zip (other size): shape-checked only
    inputs = mf.resolve_build_inputs("gqa")
    art = build_from_inputs(tmp_path / "art", given=SceneGraphs(inputs["scene_graphs"]), plots=False)
    assert art.classes() == ["dog", "indoors"]  # 'indoors(dog)', 'indoors(sofa)', ...: published convention
    rep = stats.compare(art.root)
    assert rep.provenance == "gqa" and rep.failures == []
    assert next(r for r in rep.rows if r.figure == "classes").ours == 2
    assert next(r for r in rep.rows if r.figure == "general_contexts").ok  # <= 37 ontology words
