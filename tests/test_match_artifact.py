"""Matching on an artifact: vocabulary from its subsets, the build rules apply, output in ARTIFACT/match."""

from __future__ import annotations

import json

import pytest

from metashift_hf import wordnet_match
from metashift_hf.core.errors import EmptyResultError, InputFormatError, UnknownNameError
from metashift_hf.tasks.match_artifact import MatchInputs, run_match


CONTEXTS = {
    # 30 images each unless said otherwise; frisbee has no ImageNet-1k node, cat(car) is too small
    "cat": {"sofa": 30, "bed": 30, "chair": 30, "table": 30, "laptop": 30, "television": 30, "car": 10, "frisbee": 30},
    "dog": {"sofa": 30, "bed": 30, "car": 30, "chair": 30, "table": 30, "television": 30, "frisbee": 30},
    "horse": {"fence": 30, "car": 30},  # too few subsets: not a class of the artifact
}


def _images(subject: str, context: str, n: int) -> list[str]:
    # overlapping pools per class so that class image counts differ from the sum of subset sizes
    start = sum(map(ord, context)) % 40
    return [f"{subject[0]}{(start + i) % 70}" for i in range(n)]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, wn, wordnet_cache):
    from metashift_hf.builders.build import build_artifact
    from metashift_hf.builders.subsets import CandidateSubsets

    mapping = {f"{s}({c})": _images(s, c, n) for s, ctx in CONTEXTS.items() for c, n in ctx.items()}
    art = build_artifact(CandidateSubsets.from_dict(mapping), tmp_path_factory.mktemp("art") / "a", plots=False)
    run_match(MatchInputs(artifact=art.root, hierarchy="wordnet", cache_dir=wordnet_cache))
    return art


def test_artifact_match_applies_the_rules(artifact):
    result = wordnet_match.load_match(artifact.root)
    assert (artifact.root / "match" / "tasks.parquet").is_file()
    f = result.figures
    assert f["vocabulary_names"] == len({"cat", "dog", "horse"} | {c for ctx in CONTEXTS.values() for c in ctx})
    assert result.row("frisbee").matched is False
    assert result.subsets_of("cat") == [
        f"cat({c})" for c in sorted(["bed", "chair", "laptop", "sofa", "table", "television"])
    ]
    assert "cat(car)" not in result.subsets_of("cat")  # 10 images < 25: not kept, so not selected
    assert result.classes() == ["cat", "dog"]  # horse is not a class of the artifact (2 subsets)
    assert (f["subsets"], f["classes"]) == (12, 2)
    expected = len(
        set().union(*(_images("cat", c, 30) for c in ["bed", "chair", "laptop", "sofa", "table", "television"]))
    )
    assert result.class_images["cat"] == expected
    assert result.figures["tasks"]["min_images_per_subset"] == 25


def test_artifact_registry_and_presets(artifact):
    tasks = wordnet_match.registry(artifact.root)
    assert [t.task_id for t in tasks] == ["animals-10", "bin-cat-dog", "imagenet-5"]
    cat_dog = wordnet_match.get_task(artifact.root, "bin-cat-dog")
    assert cat_dog.classes == ("cat", "dog") and cat_dog.lca_name == "carnivore.n.01"
    assert (
        cat_dog.n_subsets == (6, 6)
        and cat_dog.n_images[0] == wordnet_match.load_match(artifact.root).class_images["cat"]
    )
    imagenet5 = wordnet_match.get_task(artifact.root, "imagenet-5")
    assert not imagenet5.available
    assert "airplane" in imagenet5.reason and "elephant" in imagenet5.reason and "horse" in imagenet5.reason
    with pytest.raises(EmptyResultError, match="not available"):
        wordnet_match.get_task(artifact.root, "imagenet-5", require_available=True)
    with pytest.raises(UnknownNameError, match="did you mean 'bin-cat-dog'"):
        wordnet_match.get_task(artifact.root, "bin-dog-cat")


def test_thresholds_move_the_binary_count(artifact, wordnet_cache):
    none = run_match(
        MatchInputs(artifact=artifact.root, hierarchy="wordnet", cache_dir=wordnet_cache), min_subsets=7, write=False
    )
    assert [t.task_id for t in none.tasks if t.kind == "binary"] == []
    deep = run_match(
        MatchInputs(artifact=artifact.root, hierarchy="wordnet", cache_dir=wordnet_cache), level=12, write=False
    )
    assert [t.task_id for t in deep.tasks if t.kind == "binary"] == []  # carnivore is at depth 11


def test_unmatched_folder_is_a_clear_error(tmp_path):
    with pytest.raises(InputFormatError, match="no match output"):
        wordnet_match.registry(tmp_path)


def test_tasks_commands_on_the_artifact(artifact, capsys):
    from metashift_hf.cli import main

    assert main(["tasks", "list", "--artifact", str(artifact.root), "--class", "cat"]) == 0
    listed = capsys.readouterr().out
    assert "bin-cat-dog" in listed and "unavailable: absent from the input" in listed
    api = pytest.importorskip("metashift_hf.hub.api")
    others = api.available_tasks(artifact.root)
    assert "class-cat" in others and "class-cat" in listed  # non-registry ids come from the task layer
    assert main(["tasks", "show", "bin-cat-dog", "--artifact", str(artifact.root), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["task"]["task_id"] == "bin-cat-dog" and shown["shift_spec"]["task_id"] == "bin-cat-dog"
    # a registry id that the task layer also lists is shown from the registry: unavailable -> an error
    assert main(["tasks", "show", "imagenet-5", "--artifact", str(artifact.root)]) == 2
    err = capsys.readouterr().err
    assert "error: task imagenet-5 is not available" in err and "fix:" in err
