"""Hardening, round 3 (issue 22 part 4): licence and provenance come from the source.

An artifact built from user data (``build --tags``, ``--hf-dataset``) is ``source: custom`` through to
its cards: licence, name and homepage only as the builder gave them (``--license``, ``--source-name``,
``--homepage``, stored in manifest.json), otherwise none is claimed, never Visual Genome's; ``publish``
refuses such an export without a licence, naming the flag. COCO builds state COCO's licences.
"""

from __future__ import annotations

import io
import json

import pytest
from hardening_inputs import assert_one_line_error, run_cli
from huggingface_hub import DatasetCard
from PIL import Image

from metashift_hf.builders.artifact import Artifact
from metashift_hf.builders.build import BuildOptions, build_from_inputs
from metashift_hf.builders.build_inputs import TagsTable
from metashift_hf.cards import render as cards
from metashift_hf.cards import text as card_text
from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.core.provenance import SourceInfo, license_id, license_statement
from metashift_hf.hub.api import prepare
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.publish import PushOptions, publish_tasks, push_repos
from metashift_hf.hub.task_data import TaskRef
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.tasks.metashift import Metashift


N = 60
SMALL = ["--min-images-per-subset", "10", "--min-subsets-per-class", "2"]


def _tags(i: int) -> list[str]:
    return ["cat" if i < 40 else "dog"] + [f"c{j}" for j in range(4) if (i + j) % 2 == 0]


@pytest.fixture(scope="module")
def user_data(tmp_path_factory):
    """A tags CSV and its images (<id>.jpg): the user data of the cases below."""
    root = tmp_path_factory.mktemp("user-data")
    csv = root / "tags.csv"
    csv.write_text("image_id,tag\n" + "".join(f"im{i:03d},{t}\n" for i in range(N) for t in _tags(i)))
    images = root / "images"
    images.mkdir()
    for i in range(N):
        buf = io.BytesIO()
        Image.new("RGB", (8, 8), (i * 4 % 256, 90, 30)).save(buf, format="JPEG")
        (images / f"im{i:03d}.jpg").write_bytes(buf.getvalue())
    return csv, images


def _build(user_data, out, capsys, *flags) -> tuple[int, str]:
    code, stdout, err = run_cli(capsys, "build", "--tags", user_data[0], *SMALL, "--no-plots", "--out", out, *flags)
    assert code == 0, err
    return code, stdout


@pytest.fixture(scope="module")
def unlicensed(user_data, tmp_path_factory):
    return build_from_inputs(
        tmp_path_factory.mktemp("a") / "art",
        given=TagsTable(user_data[0]),
        plots=False,
        options=BuildOptions(min_images_per_subset=10, min_subsets_per_class=2),
    )


def _card(art, images, tmp_path) -> tuple[str, DatasetCard]:
    task = prepare(TaskRef("class-cat", artifact=art, images=images), cache_dir=tmp_path / "cache")
    text = cards.render_task_card(cards.task_info(task, art, repo_id="ns/metashift-class-cat"), None)
    return text, DatasetCard(text)


def test_user_data_cards_claim_no_licence_nor_visual_genome(unlicensed, user_data, tmp_path):
    """Cards of a --tags build said `license: cc-by-4.0`, `paperswithcode_id: metashift` and Visual Genome/GQA origin."""
    assert unlicensed.provenance == "custom" and unlicensed.manifest.source_info is None
    text, card = _card(unlicensed, user_data[1], tmp_path)
    meta = card.data.to_dict()
    assert "license" not in meta and "paperswithcode_id" not in meta and "source_datasets" not in meta
    assert not {"visual-genome", "gqa"} & set(meta["tags"])
    licence = text.split("## Source and licence", 1)[1].split("\n## ", 1)[0]
    assert "No licence was given" in licence and "--license" in licence
    assert "CC BY 4.0" not in text and "Images and scene graphs come from" not in text
    assert "@inproceedings{hudson2019gqa" not in text and "@article{krishna2017visualgenome" not in text
    assert "@inproceedings{liang2022metashift" in text  # the construction is still MetaShift's
    assert "Visual Genome images are photographs" not in text and "source: custom" in text
    index = cards.render_index_card(
        [
            cards.task_info(
                prepare(TaskRef("class-cat", artifact=unlicensed, images=user_data[1]), cache_dir=tmp_path / "cache"),
                unlicensed,
                repo_id="x",
            )
        ],
        unlicensed,
        repo_id="ns/metashift",
    )
    assert "license" not in DatasetCard(index).data.to_dict() and "No licence was given" in index


def test_user_licence_name_and_homepage_reach_the_card(user_data, tmp_path, capsys):
    _, stdout = _build(
        user_data,
        tmp_path / "art",
        capsys,
        "--license",
        "cc-by-sa-4.0",
        "--source-name",
        "Street scenes sample",
        "--homepage",
        "https://example.org/streets",
    )
    assert "licence: cc-by-sa-4.0" in stdout
    art = Artifact.load(tmp_path / "art")
    assert art.manifest.source_info == SourceInfo(
        "cc-by-sa-4.0", "Street scenes sample", "https://example.org/streets"
    )
    assert json.loads((tmp_path / "art" / "manifest.json").read_text())["source_info"]["license"] == "cc-by-sa-4.0"
    text, card = _card(art, user_data[1], tmp_path)
    assert card.data.license == "cc-by-sa-4.0" and "paperswithcode_id" not in card.data.to_dict()
    assert "[Street scenes sample](https://example.org/streets)" in text and "`license: cc-by-sa-4.0`" in text
    assert "No licence was given" not in text


def test_builder_licence_follows_the_source(user_data, unlicensed, tmp_path, capsys):
    """The datasets builder's DatasetInfo states the same licence as the card: never Visual Genome's for user data."""
    _build(user_data, tmp_path / "art", capsys, "--license", "cc-by-sa-4.0", "--source-name", "Street scenes sample")
    for art, needle in (
        (Artifact.load(tmp_path / "art"), "cc-by-sa-4.0 (as declared for Street scenes sample"),
        (unlicensed, "none given"),
    ):
        b = Metashift(
            config_name="class-cat", artifact=art.root, images=str(user_data[1]), cache_dir=str(tmp_path / "cache")
        )
        assert needle in b.info.license and "Visual Genome" not in b.info.license
        assert b.info.license == license_statement(art.provenance, art.manifest.source_info)
    assert license_statement("gqa").startswith(license_id("gqa") + " (") and license_id("demo") == "mit"
    assert license_id("custom", None) is None and license_id("coco") == "cc-by-4.0"


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--license", "CC BY 4.0"], "not a Hub licence id"),
        (["--license", "mit\nlicense: other"], "not a Hub licence id"),
        (["--source-name", "Mine\x1b[2J"], "plain one-line name"),
        (["--source-name", "[click](https://evil.example)"], "plain one-line name"),
        (["--homepage", "javascript:alert(1)"], "not an http(s) address"),
        (["--homepage", "https://example.org/a) ![x](y"], "not an http(s) address"),
    ],
)
def test_bad_source_flags_are_refused_before_reading(user_data, tmp_path, capsys, flags, needle):
    code, _, err = run_cli(capsys, "build", "--tags", user_data[0], "--out", tmp_path / "art", *flags)
    assert_one_line_error(code, err, needle)
    assert not (tmp_path / "art").exists()


def test_source_flags_are_for_user_data_only(tmp_path, capsys):
    """A GQA/published/COCO build's licence is known: --license there is refused before any reading."""
    code, _, err = run_cli(
        capsys, "build", "--candidate-subsets", tmp_path / "missing.pkl", "--license", "mit", "--out", tmp_path / "art"
    )
    assert_one_line_error(code, err, "--license", "source custom", "published")
    code, _, err = run_cli(
        capsys,
        "build",
        "--coco-annotations",
        tmp_path / "missing.json",
        "--homepage",
        "https://x.org",
        "--out",
        tmp_path / "art",
    )
    assert_one_line_error(code, err, "coco")


def test_manifest_without_source_info_still_reads_and_a_bad_one_is_refused(unlicensed, tmp_path):
    import shutil

    copy = tmp_path / "art"
    shutil.copytree(unlicensed.root, copy)
    doc = json.loads((copy / "manifest.json").read_text())
    del doc["source_info"]  # an artifact written before the field existed
    (copy / "manifest.json").write_text(json.dumps(doc))
    assert Artifact.load(copy).manifest.source_info is None
    doc["source_info"] = {"license": "mit\n# injected", "name": None, "homepage": None}
    (copy / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(InputFormatError, match="Hub licence id"):
        Artifact.load(copy)


def test_publish_refuses_user_data_without_a_licence(unlicensed, user_data, tmp_path):
    with pytest.raises(MetashiftError, match="no licence") as err:
        publish_tasks(
            ["class-cat"],
            TaskOrigin(artifact=unlicensed, images=user_data[1]),
            "ns",
            tmp_path / "out",
            push=PushOptions(dry_run=True),
        )
    assert "--license" in err.value.fix and not (tmp_path / "out").exists()  # refused before the export
    task = prepare(TaskRef("class-cat", artifact=unlicensed, images=user_data[1]), cache_dir=tmp_path / "cache")
    repos = export_prepared([task], TaskOrigin(artifact=unlicensed), tmp_path / "exported")  # an export made anyway
    with pytest.raises(MetashiftError, match="no licence") as err:
        push_repos([r.path for r in repos], "ns", dry_run=True)
    assert "--license" in err.value.fix


def test_publish_plans_user_data_with_a_licence(user_data, tmp_path, capsys):
    _build(user_data, tmp_path / "art", capsys, "--license", "mit")
    res = publish_tasks(
        ["class-cat"],
        TaskOrigin(artifact=tmp_path / "art", images=user_data[1]),
        "ns",
        tmp_path / "out",
        push=PushOptions(dry_run=True),
    )
    assert res.dry_run and [p.repo_id for p in res.plans] == ["ns/metashift-class-cat", "ns/metashift"]


def test_coco_cards_state_cocos_licences():
    """(tests/test_coco.py renders a whole COCO task card; here the licence parts alone.)"""
    meta = cards.card_data([], None, "MetaShift", "coco").to_dict()
    assert meta["license"] == "cc-by-4.0" and meta["source_datasets"] == ["extended|detection-datasets/coco"]
    assert "paperswithcode_id" not in meta  # the paperswithcode entry is MetaShift on Visual Genome
    about = card_text.about("coco")
    licence = about.split("## Source and licence", 1)[1].split("\n## ", 1)[0]
    assert "CC BY 4.0" in licence and "Flickr terms of use" in licence and "images[].license" in licence
    assert "@inproceedings{lin2014coco" in about and "@inproceedings{hudson2019gqa" not in about
    for source in ("gqa", "published"):  # MetaShift's own data keeps its licence, paperswithcode id and citations
        assert cards.card_data([], None, "MetaShift", source).to_dict()["paperswithcode_id"] == "metashift"
        assert "@article{krishna2017visualgenome" in card_text.about(source)
