"""Dataset cards: README YAML that huggingface_hub parses, and a body with every section the issue asks for."""

from __future__ import annotations

import importlib.util
import io
import re
import sys
from dataclasses import replace

import pytest
from huggingface_hub import DatasetCard, DatasetCardData

from fixtures.tasks import build_tiny_artifact, make_prepared, sample_jpegs
from metashift_hf import __version__
from metashift_hf.builders.distances import Distance
from metashift_hf.cards import pictures
from metashift_hf.cards import render as cards
from metashift_hf.cards import text as card_text
from metashift_hf.cards import usage as card_usage
from metashift_hf.core.errors import InputFormatError
from metashift_hf.hub.export import export_prepared
from metashift_hf.hub.task_open import TaskOrigin
from metashift_hf.tasks.group_distances import TrainTestDistance, train_test_distances
from metashift_hf.tasks.spec import GroupSpec, ShiftSpec


# what export draws for the first task of ``exported`` (matplotlib installed): both classes' role graphs, the grid
TASK_PICTURES = (
    "images/paper-dg-cat-dog-1-cat-groups.png",
    "images/paper-dg-cat-dog-1-dog-groups.png",
    "images/paper-dg-cat-dog-1-examples.png",
)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("cards")
    art = build_tiny_artifact(root / "artifact")
    # A meta-graph picture as the build writes it when matplotlib is present.
    (art.root / "plots").mkdir(exist_ok=True)
    (art.root / "plots" / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"cat-plot")
    images = sample_jpegs(root / "images")
    tasks = [
        make_prepared("paper-dg-cat-dog-1", images),
        make_prepared("paper-subpop-cat-dog-p12", images, shift_type="conditional"),
    ]
    repos = export_prepared(tasks, TaskOrigin(artifact=art), root / "out", namespace="metashift-org")
    return art, tasks, repos


def test_yaml_parses_with_huggingface_hub(exported):
    _, tasks, repos = exported
    card = DatasetCard.load(repos[0].path / "README.md")
    data = card.data
    assert isinstance(data, DatasetCardData)
    assert data.license == "cc-by-4.0"
    assert data.task_categories == ["image-classification"]
    assert data.size_categories == ["n<1K"]
    assert data.pretty_name == "MetaShift: paper-dg-cat-dog-1"
    assert {"distribution-shift", "domain-generalization", "metashift"} <= set(data.tags)
    assert data.source_datasets == ["extended|visual_genome"]
    meta = data.to_dict()
    assert meta["configs"] == [
        {
            "config_name": "paper-dg-cat-dog-1",
            "default": True,
            "data_files": [
                {"split": "train", "path": "paper-dg-cat-dog-1/train-*"},
                {"split": "test", "path": "paper-dg-cat-dog-1/test-*"},
            ],
        }
    ]
    info = meta["dataset_info"]
    assert info["config_name"] == "paper-dg-cat-dog-1"
    label = next(f for f in info["features"] if f["name"] == "label")
    assert label["dtype"]["class_label"]["names"] == {"0": "cat", "1": "dog"}
    assert {s["name"]: s["num_examples"] for s in info["splits"]} == {"train": 10, "test": 5}
    assert all(s["num_bytes"] > 0 for s in info["splits"]) and info["download_size"] > 0
    marginal = DatasetCard.load(repos[1].path / "README.md").data
    assert "subpopulation-shift" in marginal.tags


def test_body_has_every_section(exported):
    art, _, repos = exported
    text = (repos[0].path / "README.md").read_text()
    assert 'load_dataset("metashift-org/metashift-paper-dg-cat-dog-1", "paper-dg-cat-dog-1")' in text
    for heading in (
        "### Fields",
        "### Splits and groups",
        "### Shift",
        "### Meta-graph and distances",
        "### How it was built",
        "### Where our numbers differ from the paper",
        "## Source and licence",
        "## Known biases and limitations",
        "## Citation",
    ):
        assert heading in text, heading
    assert "| train | `cat(sofa)` | 5 |" in text  # group counts measured from the rows
    assert "| distance d | 0.500 (code) |" in text
    assert "**Domain generalisation**" in text
    # the distance table comes from the artifact: group distances under both rules
    groups = {"cat(sofa)": ["cat(sofa0)", "cat(sofa1)"], "cat(grass)": ["cat(grass0)", "cat(grass1)"]}
    paper = art.group_distance("cat", groups, "cat(sofa)", "cat(grass)", rule="paper")
    # two merged groups are too few to embed: the code rule falls back to resistance (or disconnected)
    code = art.group_distance("cat", groups, "cat(sofa)", "cat(grass)", rule="code")
    assert code.rule != "spectral" and paper.rule == "spectral"
    assert f"| cat | `cat(sofa)` | `cat(grass)` | {code} | {paper} |" in text
    assert f"`{art.content_hash}`" in text and f"| metashift-hf version | {__version__} |" in text
    assert "| seed | 0 |" in text and "min_images_per_subset=25" in text
    assert (
        "Reproduce: `metashift-hf export paper-dg-cat-dog-1 --artifact ARTIFACT --images IMAGES --seed 0 --out DIR`"
        in text
    )
    assert "CC BY 4.0" in text and "Visual Genome" in text and "GQA" in text
    assert "People labelled by appearance" in text and "Label noise" in text and "Under-represented" in text
    for key in (
        "@inproceedings{liang2022metashift",
        "Weixin Liang and James Zou",
        "MetaShift: A Dataset of Datasets for Evaluating Contextual Distribution Shifts and Training Conflicts",
        "@inproceedings{hudson2019gqa",
        "@article{krishna2017visualgenome",
    ):
        assert key in text, key
    assert "the paper reports 410 and 12,868" in text
    # meta-graph picture copied into the repo and linked
    assert "![meta-graph of cat](images/cat.png)" in text and "images/dog.png" not in text
    assert (repos[0].path / "images" / "cat.png").read_bytes() == (art.root / "plots" / "cat.png").read_bytes()
    assert "$" not in re.sub(r"```.*?```", "", text, flags=re.S)  # no unfilled placeholder
    # the task's meta-graph facts (issue 26.4): linked, and loaded on their own by the card's line
    facts = "paper-dg-cat-dog-1/meta_graph.parquet"
    assert "### Meta-graph facts" in text and f"[`{facts}`]({facts})" in text and (repos[0].path / facts).is_file()
    assert f'load_dataset("metashift-org/metashift-paper-dg-cat-dog-1", data_files="{facts}", split="train")' in text


def test_card_formats_the_distances_it_is_given(exported):
    """Cards format and do not compute: the distance rows come from tasks.group_distances (read from
    the artifact when the facts are gathered) and the card prints exactly the rows it holds."""
    art, tasks, _ = exported
    info = cards.task_info(tasks[0], art, repo_id="ns/metashift-paper-dg-cat-dog-1")
    assert info.distances == train_test_distances(tasks[0].spec, art) and info.distances
    given = TrainTestDistance("cat", "cat(sofa)", "cat(grass)", Distance(0.125, "spectral", "ok"), None)
    text = cards.render_task_card(replace(info, distances=[given]), None)
    assert "| cat | `cat(sofa)` | `cat(grass)` | 0.125000 (spectral) | – |" in text


def test_subpopulation_card_states_p(exported):
    _, _, repos = exported
    text = (repos[1].path / "README.md").read_text()
    assert "**Subpopulation shift**" in text and "p = 0.125" in text and "(target 0.120)" in text
    assert "Minority fraction: target p = 0.120, achieved 0.125" in text


def test_index_card_lists_every_task_repo(exported):
    _, tasks, repos = exported
    index = repos[-1]
    assert index.name == "metashift"
    text = (index.path / "README.md").read_text()
    card = DatasetCard.load(index.path / "README.md")
    assert card.data.license == "cc-by-4.0" and "configs" not in card.data.to_dict()
    for t in tasks:
        row = next(line for line in text.splitlines() if line.startswith(f"| [`{t.task_id}`]("))
        assert f'load_dataset("metashift-org/metashift-{t.task_id}", "{t.task_id}")' in row
        assert t.spec.shift_type in row and "cat(sofa), dog(sofa)" in row and "0.500" in row
    assert "@inproceedings{liang2022metashift" in text


def test_missing_placeholder_value_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "about.md").write_text("licence for $nobody\n")
    monkeypatch.setattr(card_text, "TEMPLATE_DIR", tmp_path)
    with pytest.raises(InputFormatError, match=r"\$nobody"):
        card_text.render_template("about.md")
    with pytest.raises(InputFormatError, match="missing"):
        card_text.render_template("task_card.md")


def test_size_categories():
    assert [cards.size_category(n) for n in (5, 1500, 20_000, 500_000, 2_000_000)] == [
        "n<1K",
        "1K<n<10K",
        "10K<n<100K",
        "100K<n<1M",
        "1M<n<10M",
    ]


def test_hub_user_sections_yaml_links_and_images_render(exported, tmp_path):
    """Issue 12: the YAML keys and sections Hub users look for; every image link renders; the index
    card turns the viewer off and links its tasks."""
    import markdown

    _, _, repos = exported
    task_repo, index_repo = repos[0], repos[-1]
    card = DatasetCard.load(task_repo.path / "README.md")
    data = card.data.to_dict()
    assert data["pretty_name"] and data["task_categories"] == ["image-classification"]
    assert data["task_ids"] == ["multi-class-image-classification"] and data["paperswithcode_id"] == "metashift"
    assert data["size_categories"] and "viewer" not in data
    for heading in (
        "## Summary",
        "## Data instance",
        "## Intended uses",
        "## Recommended metric",
        "## Personal and sensitive information",
    ):
        assert heading in card.text, heading
    assert "arxiv.org/abs/2202.06523" in card.text and "github.com/Weixin-Liang/MetaShift" in card.text
    assert "collate_fn=collate" in card.text and "'image_id':" in card.text
    html = markdown.markdown(card.text, extensions=["tables", "fenced_code"])
    images = re.findall(r'<img alt="[^"]*" src="([^"]+)"', html)
    assert images and all((task_repo.path / src).is_file() for src in images), images
    # every picture of the repo is shown: the copied community graph and the task's own pictures
    drawn = sorted(p.relative_to(task_repo.path).as_posix() for p in (task_repo.path / "images").glob("*.png"))
    assert sorted(images) == drawn
    if importlib.util.find_spec("matplotlib") is not None:
        assert set(TASK_PICTURES) <= set(images)
    assert not re.search(r"!\[[^\]]*\]\([^)]*\s[^)]*\)", card.text)  # no image link with a space
    index = DatasetCard.load(index_repo.path / "README.md")
    assert index.data.to_dict()["viewer"] is False
    assert (
        "[`paper-dg-cat-dog-1`](https://huggingface.co/datasets/metashift-org/metashift-paper-dg-cat-dog-1)"
        in index.text
    )


def test_subpopulation_card_warns_about_small_validation_groups(exported):
    from types import SimpleNamespace

    text = (exported[2][1].path / "README.md").read_text()
    assert "average and worst-group accuracy on `test`" in text
    info = SimpleNamespace(
        spec=SimpleNamespace(shift_type="conditional"),
        group_rows={"validation": {"cat(indoor)": 40, "dog(indoor)": 3, "cat(outdoor)": 5}},
    )
    words = card_usage.recommended_metric(info)
    assert "as few as 3 images in a group: `dog(indoor)` 3, `cat(outdoor)` 5, `cat(indoor)` 40" in words


# -- the task's own pictures (cards.pictures) -----------------------------------------------------


def _spec(**groups) -> ShiftSpec:
    def make(split):
        return tuple(
            GroupSpec(group=name, cls=cls, contexts=tuple(ctx), n=10) for name, cls, ctx in groups.get(split, ())
        )

    return ShiftSpec(
        task_id="t",
        shift_type="marginal",
        classes=("cat", "dog"),
        train_groups=make("train"),
        validation_groups=make("validation"),
        test_groups=make("test"),
        id_test_groups=make("id_test"),
        split_sizes={},
        seed=0,
    )


def test_subset_roles_of_a_small_task():
    kept = {f"cat({c})" for c in ("sofa", "bed", "shelf", "grass", "desk", "tree")} | {"dog(sofa)"}
    spec = _spec(
        train=[("cat(sofa)", "cat", ["sofa", "bed"]), ("dog(sofa)", "dog", ["sofa"])],
        validation=[("cat(sofa)", "cat", ["sofa", "bed"])],
        test=[("cat(shelf)", "cat", ["shelf", "bed", "missing"])],
        id_test=[("cat(grass)", "cat", ["grass"])],
    )
    # bed is in a train and a test group; a context the artifact does not have is no subset; the
    # id_test group adds grass; desk and tree take no part; dog's groups are not cat's
    assert pictures.subset_splits(spec, "cat", kept) == {
        "cat(bed)": ("train", "validation", "test"),
        "cat(grass)": ("id_test",),
        "cat(shelf)": ("test",),
        "cat(sofa)": ("train", "validation"),
    }
    assert pictures.subset_roles(spec, "cat", kept) == {
        "cat(bed)": "train+test",
        "cat(grass)": "id_test",
        "cat(shelf)": "test",
        "cat(sofa)": "train",
    }
    assert pictures.subset_roles(spec, "dog", kept) == {"dog(sofa)": "train"}
    assert [pictures.role_of(s) for s in (["validation"], ["validation", "id_test"], ["test", "id_test"])] == [
        "validation",
        "id_test",
        "test",
    ]
    assert set(pictures.subset_roles(spec, "cat", kept).values()) <= set(pictures.ROLE_STYLES)


def test_example_picks_are_seeded_per_group_and_sorted():
    rows = list(range(40))
    a = pictures.pick_examples(rows, 5, 0, "train", "cat(sofa)")
    assert a == pictures.pick_examples(rows, 5, 0, "train", "cat(sofa)") == sorted(a) and len(set(a)) == 5
    assert a != pictures.pick_examples(rows, 5, 0, "test", "cat(sofa)")
    assert pictures.pick_examples(rows[:3], 5, 0, "train", "cat(sofa)") == [0, 1, 2]


def test_task_pictures_are_pngs_linked_with_alt_text_and_caption(exported):
    pytest.importorskip("matplotlib")
    from PIL import Image

    _, tasks, repos = exported
    repo = repos[0].path
    text = (repo / "README.md").read_text()
    for name in TASK_PICTURES:
        data = (repo / name).read_bytes()
        assert data.startswith(PNG), name
        with Image.open(io.BytesIO(data)) as im:
            im.verify()  # a whole, valid PNG
        assert name in repos[0].files
    assert "### Examples" in text and "### Meta-graph and distances" in text
    examples = "![example images of each group of paper-dg-cat-dog-1](images/paper-dg-cat-dog-1-examples.png)"
    assert text.index("### Examples") < text.index(examples) < text.index("### Shift")
    caption = text[text.index(examples) :].split("\n")[2]
    assert caption.startswith("*Up to 5 images per group") and caption.endswith("*") and "seed 0" in caption
    graph = (
        "![meta-graph of cat with the train and test groups of paper-dg-cat-dog-1 highlighted]"
        "(images/paper-dg-cat-dog-1-cat-groups.png)"
    )
    assert graph in text
    caption = text[text.index(graph) :].split("\n")[2]
    assert caption.startswith("*Meta-graph of `cat` in this task (train `cat(sofa)`; test `cat(grass)`)")
    assert "train groups blue, test groups red" in caption and "other subsets faded grey" in caption
    # the community picture follows, under the same class heading
    assert text.index("#### `cat`") < text.index(graph) < text.index("![meta-graph of cat](images/cat.png)")
    # rows of the grid: the train and test groups, labelled by split (validation/id_test add none here)
    rows = pictures._rows_of(tasks[0].dataset)
    assert [(s, g) for s, g, _ in rows] == [
        ("train", "cat(sofa)"),
        ("train", "dog(sofa)"),
        ("test", "cat(grass)"),
        ("test", "dog(grass)"),
    ]


def test_task_pictures_are_deterministic(exported, tmp_path):
    pytest.importorskip("matplotlib")
    art, tasks, repos = exported
    again = export_prepared(tasks[:1], TaskOrigin(artifact=art), tmp_path / "out")[0]
    for name in TASK_PICTURES:
        assert (again.path / name).read_bytes() == (repos[0].path / name).read_bytes(), name


def test_without_matplotlib_the_card_omits_the_pictures(exported, tmp_path, monkeypatch):
    import markdown

    art, tasks, _ = exported
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails as if not installed
    repo = export_prepared(tasks[:1], TaskOrigin(artifact=art), tmp_path / "out")[0]
    assert sorted(p.name for p in (repo.path / "images").iterdir()) == ["cat.png"]  # the artifact's copy only
    text = (repo.path / "README.md").read_text()
    assert "No example picture in this export" in text and "groups.png" not in text
    html = markdown.markdown(DatasetCard.load(repo.path / "README.md").text, extensions=["tables", "fenced_code"])
    assert re.findall(r'<img alt="[^"]*" src="([^"]+)"', html) == ["images/cat.png"]


def test_card_layout_one_title_named_headers_one_group_table_and_index_bias_text(exported):
    """Issue 12: no second "Task `ID`" heading under the title, no empty table header rows, one row per
    group for the contexts (counts stay in Splits and groups), the headline d explained beside the pair
    table, and an index card without task sections whose bias text points to the task cards."""
    _, _, repos = exported
    text = (repos[0].path / "README.md").read_text()
    assert text.count("paper-dg-cat-dog-1`\n") == 1 and "## Task `paper-dg-cat-dog-1`" not in text
    assert "# MetaShift task `paper-dg-cat-dog-1`" in text and "## Details" in text
    assert not re.search(r"^\|(\s*\|)+\s*$", text, flags=re.M)  # no header row of empty cells
    assert "| property | value |" in text and "| setting | value |" in text
    assert "| group | class | splits | contexts |" in text and "| split | group | class | contexts | n |" not in text
    assert text.count("| `cat(sofa)` | cat | train | sofa0, sofa1 |") == 1
    assert "The task's headline d = 0.500 (code rule" in text and "between the sofa and grass groups" in text
    index = (repos[-1].path / "README.md").read_text()
    assert "### How it was built" not in index and "tables\n  above" not in index
    assert (
        "group sizes in each task's card" in index
        and '(counts under "How it was built" in each task\'s card)' in index
    )
    assert "group sizes in the tables\n  above" in text  # a task card does hold those tables


def test_multi_label_task_says_so_and_how_to_use_it(exported, tmp_path):
    """The `classes` collection has one row per (class, image): its card says multi-label, with rows vs images."""
    art, _, _ = exported
    images = sample_jpegs(tmp_path / "images")
    prepared = make_prepared("classes", images[:4] + images, shift_type="none")  # 4 images twice in train
    repo = export_prepared([prepared], TaskOrigin(artifact=art), tmp_path / "out", namespace="ns")[0]
    card = DatasetCard.load(repo.path / "README.md")
    assert card.data.task_ids == ["multi-label-image-classification"]
    assert "**multi-label** task" in card.text and "12 rows for 8 images in `train`" in card.text
    assert "labels[image_id].add(label)" in card.text
    single = DatasetCard.load(exported[2][0].path / "README.md")
    assert single.data.task_ids == ["multi-class-image-classification"] and "multi-label" not in single.text


def _matched_card(tmp_path, n_images: int = 30) -> tuple[str, dict]:
    """A matched (ImageNet-registry) task's card as export writes it, and its split image counts."""
    from fixtures.tasks import three_split_task

    art = build_tiny_artifact(tmp_path / "artifact")
    task = three_split_task("bin-cat-dog", sample_jpegs(tmp_path / "images", n=n_images), matched=True)
    repo = export_prepared([task], TaskOrigin(artifact=art), tmp_path / "out", namespace="metashift-org")[0]
    images = {s: len(set(d["image_id"])) for s, d in task.dataset.items()}
    return (repo.path / "README.md").read_text(), images


def test_card_quick_evaluate_estimate_is_the_measured_cost_times_the_images(tmp_path, monkeypatch):
    import json
    from importlib import resources

    card, images = _matched_card(tmp_path)
    usage = card.split("## Details", 1)[0]
    cost = json.loads(
        (resources.files("metashift_hf.cards") / "eval_cost.json").read_text()
    )  # bench_eval.py cost --write
    assert set(cost["seconds_per_image"]) >= {"224", "128"} and cost["machine"]
    quick = min(100, images["test"])
    line = next(x for x in usage.splitlines() if "--image-size" in x)
    assert line == (
        "metashift-hf evaluate --model efficientnet-lite0 --task metashift-org/metashift-bin-cat-dog "
        "--config bin-cat-dog --splits test --sample 100 --image-size 128 --out eval-quick"
    )
    quick_s = max(1, round(cost["seconds_per_image"]["128"] * quick))
    full_s = max(1, round(cost["seconds_per_image"]["224"] * sum(images.values())))
    assert (
        f"on {cost['machine']}: about {quick_s:,} s for this, about {full_s:,} s for the {sum(images.values())} images"
        in " ".join(usage.split())
    )
    # the figure follows the measured file, whatever it holds (no number typed into a template)
    monkeypatch.setattr(
        card_usage, "eval_cost", lambda: {"machine": "a test machine", "seconds_per_image": {"224": 2.0, "128": 0.5}}
    )
    other, _ = _matched_card(tmp_path / "again")
    assert f"on a test machine: about {round(0.5 * quick)} s for this, about {2 * sum(images.values())} s" in " ".join(
        other.split()
    )
