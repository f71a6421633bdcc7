"""Hardening, tracebacks and misleading errors on the command line: every bad value gives one
`error:`/`fix:` line on stderr and exit status 2, and is checked before any expensive work."""

from __future__ import annotations

import pytest
from hardening_inputs import assert_one_line_error, run_cli, tiny_artifact


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    return tiny_artifact(tmp_path_factory.mktemp("hard") / "art")


def test_tasks_show_errors_go_to_stderr_with_status_2(art, capsys):
    code, out, err = run_cli(
        capsys, "tasks", "show", "class-cat", "--artifact", art.root, "--set", "min_local_groups=abc"
    )
    assert_one_line_error(code, err, "min_local_groups")
    assert "error" not in out and "not available" not in out


@pytest.mark.parametrize(
    "value",
    [
        "scale=abc",
        "scale=true",
        "scale=[1,2]",
        "scale=NaN",
        "scale=0",
        "scale=-1",
        "train_per_group=2.5",
        "train_per_group=-5",
    ],
)
def test_bad_set_values_are_one_line_errors(art, tmp_path, capsys, value):
    code, _, err = run_cli(
        capsys,
        "export",
        "paper-dg-cat-dog-1",
        "--artifact",
        art.root,
        "--images",
        tmp_path,
        "--out",
        tmp_path / "out",
        "--set",
        value,
    )
    assert_one_line_error(code, err, value.split("=")[0])
    assert "group has" not in err  # -5 is a bad value, not a group size


def test_evaluate_workers_checked_before_the_model_loads(art, tmp_path, capsys, monkeypatch):
    import metashift_hf.evaluate.run as run

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before --workers was checked")

    monkeypatch.setattr(run, "load_scorer", no_model)
    with pytest.raises(SystemExit) as exc:  # refused while parsing (core.options), before anything runs
        run_cli(
            capsys,
            "evaluate",
            "--model",
            "efficientnet-lite0",
            "--task",
            "class-cat",
            "--artifact",
            art.root,
            "--images",
            tmp_path,
            "--out",
            tmp_path / "ev",
            "--workers",
            "-3",
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --workers: -3 is out of range" in err and "Traceback" not in err


def test_deeply_nested_tree_json_is_one_line(tmp_path, capsys):
    tree = tmp_path / "deep.json"
    tree.write_text('{"a":' * 100_000 + "{}" + "}" * 100_000)
    names = tmp_path / "names.txt"
    names.write_text("cat(sofa)\n")
    code, _, err = run_cli(
        capsys, "match", "--subset-names", names, "--hierarchy", f"tree:{tree}", "--out", tmp_path / "m"
    )
    assert_one_line_error(code, err, "nested too deeply")


@pytest.mark.parametrize("command", ["export", "evaluate"])
def test_task_emptied_by_on_missing_skip_is_one_line(art, tmp_path, capsys, command):
    images = tmp_path / "images"
    images.mkdir()
    (images / "unrelated.jpg").write_bytes(b"\xff\xd8\xff\xe0")  # a folder without any of the task's images
    common = ["--artifact", art.root, "--images", images, "--on-missing", "skip"]
    argv = (
        ["export", "class-cat", *common, "--out", tmp_path / "out"]
        if command == "export"
        else ["evaluate", "--model", "efficientnet-lite0", "--task", "class-cat", *common, "--out", tmp_path / "ev"]
    )
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, "no image left")


@pytest.mark.parametrize(
    "value",
    [
        "train_max_per_class=2.5",
        "train_max_per_class=-5",
        "train_max_per_class=0",
        "train_max_per_class=true",
        "test_max_per_class=-1",
    ],
)
def test_bad_community_caps_are_bad_values_not_group_sizes(art, value):
    """The matched bin-/multiclass tasks' caps: -5 once read 'group has -5 images'."""
    import json

    from metashift_hf.core.errors import InputFormatError
    from metashift_hf.tasks import families as tasks
    from metashift_hf.tasks import shifts

    name, raw = value.split("=")
    family = next(f for f in tasks.families() if f.options_type is shifts.CommunitySizes)
    with pytest.raises(InputFormatError, match=name) as exc:
        options = tasks.parse_options(family, "bin-cat-dog", {name: json.loads(raw)})
        shifts.community_shift("bin-cat-dog", shifts.ArtifactSource(art), classes=("cat", "dog"), sizes=options)
    assert "group" not in exc.value.what
