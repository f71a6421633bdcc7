"""Provenance: recorded at build from the inputs, shown on every card, and guarding stats and publish."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import pytest
from huggingface_hub import DatasetCard

from fixtures.tasks import build_tiny_artifact, make_prepared, sample_jpegs
from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import build_from_inputs
from metashift_hf.builders.build_inputs import SceneGraphs
from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.core.provenance import demo_world_summary
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.publish import push_repos
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.sources import stats as st
from metashift_hf.sources.demo_world import generate_demo_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    # Scene graphs only: detection needs the summary and the files, not the JPEGs.
    return generate_demo_world(tmp_path_factory.mktemp("world") / "w", seed=0, n_images=3000, write_images=False)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metashift_hf", *args], capture_output=True, text=True, timeout=300)


def test_cli_build_of_demo_scene_graphs_is_labelled_demo(world, tmp_path):
    """The docs' way (`build --scene-graphs world/*.json`) must not label drawn shapes as GQA."""
    r = _cli(
        "build", "--scene-graphs", *map(str, world.scene_graphs), "--out", str(tmp_path / "a"), "--no-plots", "--quiet"
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["source"] == "demo" and manifest["synthetic"] is True
    assert "provenance: demo" in r.stdout
    rep = st.compare(tmp_path / "a")
    assert rep.reference == "none" and all(r.published is None for r in rep.rows if r.check != "consistency")


def test_cli_build_of_a_glob_that_includes_the_demo_summary(world, tmp_path):
    """`build --scene-graphs world/*.json` also names demo_world.json: read for provenance, not as a scene graph."""
    files = sorted(p for p in world.summary_path.parent.glob("*.json") if not p.name.startswith("."))  # as sh globs
    assert world.summary_path in files
    r = _cli("build", "--scene-graphs", *map(str, files), "--out", str(tmp_path / "a"), "--no-plots")
    assert r.returncode == 0, r.stderr
    assert "summary, not a scene-graph file" in r.stderr and "provenance: demo" in r.stdout
    inputs = json.loads((tmp_path / "a" / "manifest.json").read_text())["inputs"]
    assert sorted(i["path"].rsplit("/", 1)[-1] for i in inputs) == sorted(p.name for p in world.scene_graphs)
    r = _cli("build", "--scene-graphs", str(world.summary_path), "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "only the demo world's summary" in r.stderr


def test_explicit_provenance_wins_and_unknown_is_refused(world, tmp_path):
    art = build_from_inputs(tmp_path / "a", given=SceneGraphs(world.scene_graphs), provenance="synthetic", plots=False)
    assert art.provenance == "synthetic" and art.manifest.synthetic is True
    assert st.compare(art.root).reference == "none"
    with pytest.raises(InputFormatError, match="provenance"):
        build_from_inputs(tmp_path / "b", given=SceneGraphs(world.scene_graphs), provenance="photos", plots=False)
    r = _cli(
        "build", "--scene-graphs", str(world.scene_graphs[0]), "--provenance", "nope", "--out", str(tmp_path / "c")
    )
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_detection_needs_the_summary_to_list_the_same_bytes(world, tmp_path):
    sg = world.scene_graphs[0]
    digest = world.summary["sha256"][sg.name]
    assert demo_world_summary([sg], [digest]) == world.summary_path.resolve()
    # A different file beside the summary (e.g. real GQA copied into the folder) is not demo data.
    assert demo_world_summary([sg], ["0" * 64]) is None
    # The same file without its summary is not recognised either.
    lone = tmp_path / sg.name
    shutil.copyfile(sg, lone)
    assert demo_world_summary([lone], [digest]) is None


@pytest.fixture(scope="module")
def synthetic_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("prov")
    art = build_tiny_artifact(root / "artifact")
    manifest = json.loads((art.root / "manifest.json").read_text())
    manifest.update(source="demo", synthetic=True)  # as a demo build records it
    (art.root / "manifest.json").write_text(json.dumps(manifest))
    art = Artifact.load(art.root)
    images = sample_jpegs(root / "images")
    repos = export_prepared(
        [make_prepared("paper-dg-cat-dog-1", images)], TaskOrigin(artifact=art), root / "out", namespace="ns"
    )
    return repos


def test_cards_say_synthetic_at_the_top_and_claim_no_visual_genome_licence(synthetic_export):
    for repo in synthetic_export:  # the task repo and the index repo
        card = DatasetCard.load(repo.path / "README.md")
        assert card.data.license == "mit" and card.data.source_datasets == ["original"]
        assert "synthetic" in card.data.tags and not {"visual-genome", "gqa"} & set(card.data.tags)
        body = card.text.lstrip()
        first_paragraph = body.split("\n\n")[1]  # after the title
        assert "Synthetic data, not MetaShift" in first_paragraph, first_paragraph
        assert "CC BY 4.0" not in body and "license: cc-by-4.0" not in body
    task_card = DatasetCard.load(synthetic_export[0].path / "README.md").text
    personal = task_card.split("## Personal and sensitive information", 1)[1].split("\n## ", 1)[0]
    assert "drawn shapes" in personal and "Visual Genome images are photographs" not in personal
    assert "| `image_id` | string | image id in the generated world (not a Visual Genome / GQA id) |" in task_card


def test_real_cards_name_their_provenance_and_image_origin(tmp_path):
    art = build_tiny_artifact(tmp_path / "artifact")  # source "published"
    art.manifest = dataclasses.replace(art.manifest, source="gqa")
    art.provenance = "gqa"
    images = sample_jpegs(tmp_path / "images")
    (repo, _) = export_prepared(
        [make_prepared("paper-dg-cat-dog-1", images)], TaskOrigin(artifact=art), tmp_path / "out"
    )
    text = (repo.path / "README.md").read_text()
    body = text.split("---\n", 2)[2]
    # the task in one sentence opens the card (issue 19), where the data comes from right after it
    opening = body.lstrip().split("\n\n")
    assert opening[1].startswith("**Train on ") and opening[2].startswith("> Provenance: built from GQA scene graphs")
    assert "YFCC100M" in body and "MS-COCO" in body and "CC BY 4.0" in body
    assert "| `image_id` | string | GQA / Visual Genome image id |" in body


def test_publish_refuses_a_synthetic_export_unless_allowed(synthetic_export):
    with pytest.raises(MetashiftError, match="synthetic") as err:
        push_repos([r.path for r in synthetic_export], "ns", dry_run=True)
    assert "--allow-synthetic" in err.value.fix
    res = push_repos([r.path for r in synthetic_export], "ns", dry_run=True, allow_synthetic=True)
    assert res.dry_run and len(res.plans) == 2
