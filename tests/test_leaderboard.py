"""Leaderboards that cannot reward a useless model (issue 27.4) and names as data in them (issue 29.4)."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pandas as pd
import pytest

from fixtures.worlds import matched_cat_dog_artifact


torch = pytest.importorskip("torch")

from metashift_hf.cli import main  # noqa: E402
from metashift_hf.core.errors import InputFormatError, MetashiftError, UnknownNameError  # noqa: E402
from metashift_hf.evaluate import EvalConfig, evaluate  # noqa: E402
from metashift_hf.evaluate.coverage import head_coverage  # noqa: E402
from metashift_hf.evaluate.zoo import BASELINE, _open_zoo_task, _public_card, evaluate_zoo, public_model_name  # noqa: E402
from metashift_hf.hub.task_data import TaskRef  # noqa: E402
from metashift_hf.hub.task_open import TaskOrigin  # noqa: E402
from metashift_hf.models import CacheConfig, Preprocessing, from_module  # noqa: E402


PREP = Preprocessing(36, 32, "bilinear", (0.5,) * 3, (0.5,) * 3)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A matched cat/dog artifact whose cat photos are reddish and dog photos bluish (an informative model exists)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("board")
    subsets = matched_cat_dog_artifact(root)
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    for iid in sorted({i for v in subsets.values() for i in v}):
        base = np.array([200, 40, 40] if iid.startswith("c") else [40, 40, 200], dtype=np.int16)
        px = np.clip(base + rng.integers(-30, 30, (40, 40, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(px).save(root / "images" / f"{iid}.jpg")
    return root


def _leaf(cls: str) -> int:
    coverage, _ = head_coverage(["cat", "dog"], "wordnet", None)
    return min(coverage[cls])


class RedBlue(torch.nn.Module):
    """Informative: red minus blue votes for a cat leaf, blue minus red for a dog leaf."""

    def __init__(self):
        super().__init__()
        self.cat, self.dog = _leaf("cat"), _leaf("dog")

    def forward(self, x):
        m = x.float().mean(dim=(2, 3))
        out = torch.zeros(x.shape[0], 1000)
        out[:, self.cat], out[:, self.dog] = m[:, 0] - m[:, 2], m[:, 2] - m[:, 0]
        return out


class Constant(torch.nn.Module):
    def __init__(self, leaf: int):
        super().__init__()
        self.leaf = leaf

    def forward(self, x):
        out = torch.zeros(x.shape[0], 1000)
        out[:, self.leaf] = 5.0
        return out


class RandomWeights(torch.nn.Module):
    def __init__(self, seed: int):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 1000, generator=torch.Generator().manual_seed(seed)))

    def forward(self, x):
        return x.float().mean(dim=(2, 3)) @ self.w


def _zoo(world, models, out, **kw):
    return evaluate_zoo(
        models,
        ["bin-cat-dog"],
        TaskOrigin(artifact=world / "artifact", images=world / "images"),
        out,
        cache=CacheConfig(use=False),
        settings=EvalConfig(progress=False, mode="restricted", **kw),
    )


def test_constant_and_random_models_rank_at_chance_and_the_headline_is_test(world, tmp_path):
    first = _zoo(world, [from_module(RedBlue(), PREP, name="redblue")], None)
    majority = first.reports[("module:redblue", "bin-cat-dog")]["headline"]["baseline"]["predicts"]
    models = [
        from_module(RandomWeights(3), PREP, name="random"),
        from_module(Constant(_leaf(majority)), PREP, name="constant"),
        from_module(RedBlue(), PREP, name="redblue"),
    ]
    _zoo(world, models, tmp_path / "zoo")
    board = pd.read_csv(tmp_path / "zoo" / "leaderboard.csv").set_index("model")
    assert set(board["split"]) == {"test"}  # the headline never pools train
    base, const, rand, good = (board.loc[m] for m in (BASELINE, "module:constant", "module:random", "module:redblue"))
    for col in ("balanced_accuracy", "worst_group_accuracy", "accuracy", "n", "correct"):
        assert const[col] == pytest.approx(base[col]), col  # a constant predictor IS the baseline
    assert base["balanced_accuracy"] == pytest.approx(0.5) and base["worst_group_accuracy"] == 0
    assert good["rank"] == 1 and good["balanced_accuracy"] > 0.9
    assert const["rank"] == base["rank"] > 1  # tied with chance, never above it
    assert rand["rank"] > 1 and abs(rand["balanced_accuracy"] - 0.5) < 0.1  # at chance
    assert {"mode", "hierarchy", "leaves_per_class"} <= set(board.columns)
    assert set(board["mode"]) == {"restricted"} and "dog=" in good["leaves_per_class"]
    md = (tmp_path / "zoo" / "leaderboard.md").read_text()
    assert "How to read it" in md and BASELINE in md
    table = md[md.index("Headline:") :]
    assert table.index("module:redblue") < table.index(BASELINE)  # ranked by the headline


def test_splits_scores_only_the_splits_asked_for(world, tmp_path, capsys):
    """Also review case A3-09b: a repeated --model with --force is refused before any work, and the fix says that
    --force does not allow it."""
    rep = evaluate(
        from_module(RedBlue(), PREP, name="rb"),
        TaskRef("bin-cat-dog", artifact=world / "artifact", images=world / "images"),
        settings=EvalConfig(progress=False, splits=["test"], mode="restricted"),
    )
    assert rep["run"]["splits"] == ["test"] and list(rep["splits"]) == ["test"]
    assert rep["overall"]["n"] == rep["headline"]["n"]
    calls = []
    with pytest.raises(UnknownNameError, match="no split"):  # refused before any image runs
        evaluate(
            from_module(RandomWeights(1), PREP, name="r"),
            TaskRef("bin-cat-dog", artifact=world / "artifact", images=world / "images"),
            settings=EvalConfig(progress=False, splits=["tset"]),
        )
    with pytest.raises(UnknownNameError, match="no split"):
        m = from_module(RandomWeights(1), PREP, name="r")
        m.forward = lambda b: calls.append(b)  # noqa: E731 -- must never run
        _zoo(world, [m], None, splits=["tset"])
    assert calls == []
    rc = main(
        [
            "evaluate",
            "--model",
            "efficientnet-lite0",
            "--model",
            "efficientnet-lite0",
            "--tasks",
            "bin-cat-dog",
            "--splits",
            "test",
            "--artifact",
            str(world / "artifact"),
            "--images",
            str(world / "images"),
            "--out",
            str(tmp_path / "twice"),
            "--force",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "more than once" in err and "--force" in err and not (tmp_path / "twice").exists()


def test_repeated_model_and_cache_dir_file_are_refused_before_any_work(world, tmp_path, monkeypatch):
    """Review cases A3-09 (the same --model twice: refused before the work, not after it) and A3-34 (--cache-dir
    a file, or under one: refused before the model pass)."""
    import metashift_hf.evaluate.zoo as zoo

    loads = []
    monkeypatch.setattr(zoo, "load_scorer", lambda *a: loads.append(a))
    with pytest.raises(InputFormatError, match="more than once"):
        zoo.evaluate_zoo(
            ["timm:resnet18", "timm:resnet18"],
            ["bin-cat-dog"],
            TaskOrigin(artifact=world / "artifact"),
            out=tmp_path / "o",
        )
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputFormatError, match="not a folder"):
        zoo.evaluate_zoo(
            ["timm:resnet18"],
            ["bin-cat-dog"],
            TaskOrigin(artifact=world / "artifact"),
            cache=CacheConfig(tmp_path / "file" / "sub"),
        )
    with pytest.raises(InputFormatError, match="not a folder"):
        zoo.evaluate_zoo(
            ["timm:resnet18"],
            ["bin-cat-dog"],
            TaskOrigin(artifact=world / "artifact"),
            cache=CacheConfig(tmp_path / "file"),
        )
    assert loads == [] and not (tmp_path / "o").exists()


def test_zoo_task_entries_folders_and_multi_config_repos(world, tmp_path):
    """Review cases A3-30 (a folder among artifact task ids is read as a folder, not 'unknown task') and A3-36
    (a multi-config repo: the fix names what a zoo takes, not --config, which a zoo refuses)."""
    from metashift_hf.builders.artifact import Artifact
    from metashift_hf.hub.repo_files import SPEC_FILE

    for c in ("a", "b"):
        (tmp_path / "multi" / c).mkdir(parents=True)
        (tmp_path / "multi" / c / SPEC_FILE).write_text("{}")
    art = Artifact.load(world / "artifact")
    with pytest.raises(
        MetashiftError
    ) as exc:  # a folder beside artifact ids: read as a folder, not an unknown task id
        _open_zoo_task(str(tmp_path / "multi"), TaskOrigin(artifact=art, images=world / "images", seed=0))
    assert "2 configs" in exc.value.what and "--config" not in exc.value.fix and "FOLDER/CONFIG" in exc.value.fix
    (tmp_path / "root" / "metashift-a" / "a").mkdir(parents=True)
    (tmp_path / "root" / "metashift-a" / "a" / SPEC_FILE).write_text("{}")
    with pytest.raises(MetashiftError, match="root of an export") as exc:  # a zoo takes --tasks, not --task
        _open_zoo_task(str(tmp_path / "root"), TaskOrigin(artifact=art, images=world / "images", seed=0))
    assert f"--tasks {tmp_path / 'root' / 'metashift-a'}" in exc.value.fix


EVIL = "hf:/home/someone/models/vit|<script>x</script>[click](http://e.vil)`*_\x1b]8;;http://e.vil\x07\x1b[31mred\nrow"


def test_names_are_escaped_in_stdout_markdown_and_what_is_published(world, tmp_path, monkeypatch):
    """Review cases A3-22 (names raw in stdout and leaderboard.md), A3-24 (raw names and local absolute paths in
    the public card and zoo.json), A3-27 (--publish with a read-only token) and A3-28 (another namespace): the
    token checks are the ones the command runs before the zoo's work (commands/evaluate_zoo.run_zoo)."""
    from huggingface_hub import constants

    from fixtures.fake_hub import running_hub
    from metashift_hf.evaluate.leaderboard_hub import check_publish, leaderboard_card, publish_leaderboard

    result = _zoo(world, [from_module(RedBlue(), PREP, name=EVIL)], tmp_path / "zoo")
    summary = result.summary()
    md = (tmp_path / "zoo" / "leaderboard.md").read_text()
    card = leaderboard_card(tmp_path / "zoo")
    for where, text in (("stdout", summary), ("leaderboard.md", md), ("card", card)):
        assert "\x1b" not in text and "\x07" not in text and "row\n" not in text, (
            where
        )  # no terminal control, no line split
    for where, text in (("leaderboard.md", md), ("card", card)):
        assert "<script>" not in text and not re.search(r"(?<!\\)\]\(http", text) and "vit|" not in text, (
            where
        )  # no markup
    assert "/home/someone" not in card
    assert public_model_name("hf:/home/u/vit") == "hf:vit" and public_model_name("hf:./vit") == "hf:./vit"
    assert _public_card({"name": "hf:/home/u/vit", "folder": "/home/u/vit"}) == {"name": "hf:vit", "folder": "vit"}

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    tokens = {"hf_test_write_token_123": ("tester", "write"), "hf_read_only_789": ("tester", "read")}
    with running_hub(tokens=tokens) as (endpoint, state):
        with pytest.raises(MetashiftError, match="read-only"):
            check_publish("tester/board", token="hf_read_only_789", endpoint=endpoint)
        with pytest.raises(MetashiftError, match="cannot write under namespace 'other'") as exc:
            check_publish("other/board", token="hf_test_write_token_123", endpoint=endpoint)
        assert "--publish" in exc.value.fix
        publish_leaderboard(tmp_path / "zoo", "tester/board", token="hf_test_write_token_123", endpoint=endpoint)
        from huggingface_hub import HfApi

        api = HfApi(endpoint=endpoint, token="hf_test_write_token_123")
        for f in ("README.md", "leaderboard.csv", "leaderboard.md", "zoo.json"):
            got = open(api.hf_hub_download("tester/board", f, repo_type="dataset", cache_dir=tmp_path / "dl")).read()
            assert "/home/someone" not in got and str(tmp_path) not in got, f
        assert all(not repo.commits[2:] for repo in state.repos.values())


def test_publish_without_a_token_is_refused_before_the_zoo_runs(world, tmp_path, monkeypatch, capsys):
    """Review case A3-23: --publish without a token was a traceback after the work."""
    import huggingface_hub

    import metashift_hf.commands.evaluate_zoo as cmd

    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    monkeypatch.setattr(cmd, "evaluate_zoo", lambda *a, **k: pytest.fail("the zoo ran before the token check"))
    rc = main(
        [
            "evaluate",
            "--model",
            "efficientnet-lite0",
            "--tasks",
            "bin-cat-dog",
            "--artifact",
            str(world / "artifact"),
            "--images",
            str(world / "images"),
            "--out",
            str(tmp_path / "z"),
            "--publish",
            "tester/board",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "no Hugging Face token" in err and "Traceback" not in err


def test_score_escapes_a_hostile_task_id(world, tmp_path, capsys):
    from metashift_hf.hub import api
    from metashift_hf.research.score import score_plan

    tp = api.plan(TaskRef("bin-cat-dog", artifact=world / "artifact"))
    t = tp.table()
    scores = score_plan(pd.DataFrame({"image_id": t["image_id"], "prediction": t["label"]}), tp)
    evil = dataclasses.replace(scores, task_id="t\x1b]0;pwn\x07\x1b[2J<b>x</b>|\ninjected")
    for text in (evil.summary(), evil.markdown()):
        assert "\x1b" not in text and "\x07" not in text and "\ninjected" not in text
    assert "<b>" not in evil.markdown() and "&lt;b&gt;" in evil.markdown()
    evil.write(tmp_path / "s")
    assert "\x1b" not in (tmp_path / "s" / "scores.md").read_text()
    json.loads((tmp_path / "s" / "scores.json").read_text())


def test_a3_09_two_spellings_of_one_model_folder_are_refused_before_any_image(world, tmp_path, monkeypatch):
    """Review case A3-09, variant: hf:./tiny and hf:ABS/tiny (and a copy of the folder) load one model; it was run
    and ranked twice, exit 0. Refused after loading, before any image is read."""
    import shutil

    pytest.importorskip("transformers")
    from transformers import ResNetConfig, ResNetForImageClassification, ViTImageProcessor

    import metashift_hf.evaluate.zoo as zoo

    torch.manual_seed(0)
    ResNetForImageClassification(
        ResNetConfig(num_labels=1000, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])
    ).save_pretrained(tmp_path / "tiny")
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path / "tiny")
    shutil.copytree(tmp_path / "tiny", tmp_path / "copy")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(zoo, "_collect_images", lambda *a: pytest.fail("images were read"))
    for second in (f"hf:{tmp_path / 'tiny'}", "hf:copy"):
        with pytest.raises(InputFormatError, match="load the same model") as exc:
            _zoo(world, ["hf:./tiny", second], tmp_path / "z")
        assert "hf:./tiny" in exc.value.what and second in exc.value.what and "once" in exc.value.fix
    assert not (tmp_path / "z").exists()


def test_two_local_folders_of_one_name_stay_two_models(world, tmp_path):
    """Review case A3-24, variant: public names drop the local folder (hf:/a/vit -> hf:vit), which merged two models
    whose folders share a name: one count in zoo.json, two indistinguishable published rows, and (renamed in place)
    one line in the run's own summary. Public names stay apart; the run keeps the names the leaderboard shows."""
    from metashift_hf.core.names import markdown_safe
    from metashift_hf.evaluate.leaderboard_hub import leaderboard_card, public_board

    result = _zoo(
        world,
        [from_module(RedBlue(), PREP, name="/home/u/a/rb"), from_module(RandomWeights(1), PREP, name="/home/u/b/rb")],
        tmp_path / "z",
    )
    names = {"module:/home/u/a/rb", "module:/home/u/b/rb"}
    assert set(result.computed) == set(result.cached) == set(result.seconds["per_model"]) == names
    assert all(f"  {n}: " in result.summary() for n in names)
    card = json.loads((tmp_path / "z" / "zoo.json").read_text())
    public = sorted(m["name"] for m in card["models"])
    assert len(set(public)) == 2 and all(p.startswith("module:rb#") for p in public)
    assert sorted(card["computed"]) == sorted(card["cached"]) == sorted(card["seconds"]["per_model"]) == public
    published = public_board(pd.read_csv(tmp_path / "z" / "leaderboard.csv"))
    assert sorted(set(published["model"]) - {BASELINE}) == public
    readme = leaderboard_card(tmp_path / "z")
    assert "/home" not in readme and all(markdown_safe(p) in readme for p in public)


def test_a3_30_an_exported_folder_mixes_with_artifact_task_ids(world, exported_task, tmp_path):
    """Review case A3-30: artifact task ids and an exported folder in one --tasks: both scored (was 'unknown task')."""
    from fixtures.tasks import EXPORTED_TASK

    folder, _ = exported_task
    result = evaluate_zoo(
        [from_module(RedBlue(), PREP, name="rb")],
        ["bin-cat-dog", str(folder)],
        TaskOrigin(artifact=world / "artifact", images=world / "images"),
        None,
        cache=CacheConfig(use=False),
        settings=EvalConfig(progress=False, mode="restricted"),
    )
    assert set(result.leaderboard["task"]) == {"bin-cat-dog", EXPORTED_TASK}
    assert {("module:rb", "bin-cat-dog"), ("module:rb", EXPORTED_TASK)} <= set(result.reports)


def test_a3_22_an_error_quoting_a_hostile_model_name_has_no_terminal_control(world, tmp_path, capsys):
    """Review case A3-22, variant: the error line of a refused model quoted its name raw (OSC/CSI reached the
    terminal through stderr); every error/fix line is written terminal-safe."""
    name = "hf:/nowhere/vit\x1b]8;;http://e.vil\x07\x1b[31mred\nfix: run rm -rf ~"
    rc = main(
        [
            "evaluate",
            "--model",
            name,
            "--tasks",
            "bin-cat-dog",
            "--artifact",
            str(world / "artifact"),
            "--images",
            str(world / "images"),
            "--out",
            str(tmp_path / "z"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "\x1b" not in err and "\x07" not in err and "\\x1b[31mred" in err
    assert [line[:7] for line in err.strip().splitlines()] == ["error: ", "  fix: "]  # no forged line
