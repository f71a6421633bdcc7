"""The command line as a new user meets it (issue 12): headers, sizes, readable output, concrete fixes,
Hub-safe ids, consistent flags, and pipes into `head` that end quietly."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import metashift_hf
from metashift_hf.cli import main
from metashift_hf.core.errors import MetashiftError
from metashift_hf.hub.api import available_tasks
from metashift_hf.wordnet_match.match import MatchResult, MatchRow, SubsetRecord


HUB_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


@pytest.fixture(scope="module")
def demo(demo_build):
    return demo_build  # (world, artifact), built once per session; these tests only read them


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metashift_hf", *args], capture_output=True, text=True, timeout=300)


def _first_line_then_close(*args: str) -> tuple[str, int, str]:
    """What `metashift-hf ARGS | head -1` does: read one line, close the pipe, let the writer run on."""
    p = subprocess.Popen(
        [sys.executable, "-m", "metashift_hf", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read()
    return first, p.wait(timeout=300), err


@pytest.mark.slow  # ~30 s on 2 busy cores: three CLI subprocesses over the demo build
@pytest.mark.parametrize("args", [("tasks", "list"), ("tasks", "show", "paper-dg-cat-dog-1"), ("subsets", "--all")])
def test_piping_into_head_exits_cleanly(demo, args):
    first, rc, err = _first_line_then_close(*args, "--artifact", str(demo[1].root))
    assert first.strip() and rc == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err


def test_every_task_id_is_hub_safe(demo):
    ids = available_tasks(demo[1].root)
    assert "class-living_room" in ids and not any(" " in i for i in ids)
    assert all(HUB_SAFE.match(i) for i in ids), [i for i in ids if not HUB_SAFE.match(i)]


def test_tasks_list_has_header_sizes_status_and_legend(demo, capsys):
    assert main(["tasks", "list", "--artifact", str(demo[1].root), "--kind", "paper"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:7] == ["ID", "KIND", "CLASSES", "TRAIN", "VAL", "TEST", "ID_TEST"] and "STATUS" in out[0]
    rows = {line.split()[0]: line for line in out[1:] if line.startswith("paper-")}
    assert re.search(
        r"paper-dg-cat-dog-1\s+paper\s+cat,dog\s+400\s+100\s+530\s+102\b.*\bok$", rows["paper-dg-cat-dog-1"]
    )
    # not plannable at default sizes on the demo world: marked, with the --set that makes it plan
    assert rows["paper-subpop-cat-dog-p12"].endswith("plans with --set paper-subpop-cat-dog-p12:scale=0.5")
    legend = "\n".join(out)
    assert "LCA = lowest common ancestor" in legend and "SIM = WordNet path similarity" in legend
    assert main(["tasks", "list", "--artifact", str(demo[1].root), "--no-sizes", "--kind", "class"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["ID", "KIND", "CLASSES", "LCA"] and "class-living_room" in out


def test_tasks_show_is_a_summary_with_json_for_machines(demo, capsys):
    root = str(demo[1].root)
    assert main(["tasks", "show", "paper-dg-cat-dog-1", "--artifact", root]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 30 and not out.lstrip().startswith("{")
    assert (
        "d = 0.647 (code rule; paper 0.44)" in out
        and "splits:   train 400, validation 100, test 530, id_test 102" in out
    )
    assert re.search(r"train\s+cat\(sofa\)\s+100\s+contexts: cup, sofa, chair", out)
    assert main(["tasks", "show", "paper-dg-cat-dog-1", "--artifact", root, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["task"]["task_id"] == "paper-dg-cat-dog-1" and doc["shift_spec"]["split_sizes"]["train"] == 400
    # a spec the artifact cannot supply: an error on stderr and a non-zero exit, with the concrete option
    assert main(["tasks", "show", "paper-subpop-cat-dog-p12", "--artifact", root]) == 2
    cap = capsys.readouterr()
    assert (
        "error:" in cap.err and "--set paper-subpop-cat-dog-p12:scale=0.5" in cap.err and "shift spec" not in cap.out
    )
    assert main(["tasks", "show", "paper-subpop-cat-dog-p12", "--artifact", root, "--set", "scale=0.5"]) == 0


def test_export_plans_every_task_first_and_names_the_fix(demo, tmp_path, capsys):
    world, art = demo
    rc = main(
        [
            "export",
            "paper-dg-cat-dog-1",
            "paper-subpop-cat-dog-p12",
            "--artifact",
            str(art.root),
            "--images",
            str(world.images_dir),
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "task paper-subpop-cat-dog-p12 cannot be planned with the default sizes" in err
    assert "fix: pass --set paper-subpop-cat-dog-p12:scale=0.5" in err and "KEY=VALUE" not in err
    assert not (tmp_path / "out" / "metashift-paper-dg-cat-dog-1").exists()  # nothing built before the check
    assert main(["export", "--artifact", str(art.root), "--out", str(tmp_path / "o")]) == 2
    assert "metashift-hf tasks list --artifact ARTIFACT" in capsys.readouterr().err


def test_distance_says_what_the_number_means(demo, capsys):
    root = str(demo[1].root)
    assert main(["distance", "--artifact", root, "dog(shelf)", "dog(bed)"]) == 0
    out = capsys.readouterr().out
    value = float(re.match(r"d\(dog\(shelf\), dog\(bed\)\) = ([0-9.]+)", out).group(1))
    assert "rule: spectral, the Euclidean distance of the original spectral embeddings" in out and "range from" in out
    assert main(["distance", "--artifact", root, "dog(shelf)", "dog(bed)", "--value"]) == 0
    number, rule = capsys.readouterr().out.split()
    assert float(number) == pytest.approx(value, abs=5e-4) and rule == "(spectral)"
    assert main(["distance", "--artifact", root, "dog(shelff)", "dog(bed)"]) == 2
    err = capsys.readouterr().err
    assert "metashift-hf subsets CLASS --artifact ARTIFACT" in err


def test_classes_and_subsets_listings(demo, capsys):
    root = str(demo[1].root)
    assert main(["classes", "--artifact", root]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["CLASS", "SUBSETS", "IMAGES", "COMMUNITIES", "EMBEDDING", "TASK"]
    living = next(line for line in out if line.startswith("living room"))
    assert living.rstrip().endswith("class-living_room") and "provenance: demo" in out[-1]
    assert main(["subsets", "dog", "--artifact", root]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["SUBSET", "CLASS", "CONTEXT", "KIND", "IMAGES", "KEPT", "COMMUNITY"]
    assert all(line.startswith("dog(") for line in out[1:-1]) and "dog(shelf)" in "\n".join(out)
    assert main(["subsets", "dgo", "--artifact", root]) == 2
    assert "did you mean 'dog'" in capsys.readouterr().err


def test_flags_are_consistent_across_commands(capsys):
    for command in (
        "build",
        "stats",
        "distance",
        "match",
        "tasks list",
        "tasks show",
        "export",
        "publish",
        "evaluate",
        "score",
        "classes",
        "subsets",
    ):
        with pytest.raises(SystemExit):
            main([*command.split(), "--help"])
        text = capsys.readouterr().out
        assert "--artifact ARTIFACT" in text or "--out ARTIFACT" in text, command
        assert "--artifact DIR" not in text, command
    for command in ("build", "evaluate"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "parallel workers: here" in capsys.readouterr().out.replace("\n", " ")
    for command in ("export", "publish", "evaluate", "download"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--no-progress" in capsys.readouterr().out, command
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    text = capsys.readouterr().out
    assert "--set [TASK:]KEY=VALUE" in text and "--sample N" in text


def test_download_sizes_use_one_unit(capsys):
    with pytest.raises(SystemExit):
        main(["download", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    # images.zip is 21,817,965,542 bytes: 21.8 GB (SI, as core.fsutil.human_size labels it) everywhere
    assert text.count("21.8 GB") == 2 and "20.3" not in text


def test_paper_hierarchy_offline_names_the_flags(isolated_manifest, monkeypatch):
    from metashift_hf.sources.manifest import PAPER_URL_ENV, paper_tree_path

    monkeypatch.delenv(PAPER_URL_ENV, raising=False)
    with pytest.raises(MetashiftError) as err:
        paper_tree_path("http://127.0.0.1:9/imagenet_hierarchy.pkl", timeout=2)
    assert "--tree-url" in err.value.fix and "metashift-hf download --register imagenet-tree PATH" in err.value.fix


def test_dir_lists_the_lazy_api():
    names = dir(metashift_hf)
    assert {"load", "prepare", "plan", "Artifact", "score", "__version__"} <= set(names)


def test_match_flags_names_matched_to_a_later_sense():
    def row(name, reason):
        return MatchRow(name, True, f"{name}.n.04", "n0", "a hawk", 9, (), (), (), reason)

    result = MatchResult(
        "wordnet",
        {
            "dog": row("dog", "sense 1 of 7 is a node of wordnet"),
            "kite": row(
                "kite", "sense 4 of 4 is a node of wordnet (earlier senses not nodes: kite.n.01, kite.n.02, kite.n.03)"
            ),
            "lasso": row("lasso", "sense 2 of 2 is a node of wordnet (earlier senses not nodes: lasso.n.01)"),
        },
        [
            SubsetRecord("dog(kite)", "dog", "kite", 30, True, True),
            SubsetRecord("dog(lasso)", "dog", "lasso", 30, True, False),
        ],
    )
    assert [r.name for r in result.later_senses()] == ["kite"]  # lasso is in no selected subset


def test_tasks_list_without_sizes_claims_no_status_and_nested_commands_take_quiet(demo, capsys):
    """Unplanned rows say `-`, not `ok` (p12 does not plan at default sizes on the demo world); -q/-v are
    accepted after nested commands (`tasks list ... -q`); a long class list is cut to keep rows readable."""
    root = str(demo[1].root)
    assert main(["tasks", "list", "--artifact", root, "--no-sizes", "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in out[1:]}
    assert rows["paper-subpop-cat-dog-p12"].rstrip().endswith(" -") and not rows["paper-dg-cat-dog-1"].endswith("ok")
    assert any("STATUS not checked: pass --sizes" in line for line in out)
    assert "(39 classes)" in rows["classes"] and max(len(line) for line in out) < 200
    assert main(["tasks", "show", "paper-dg-cat-dog-1", "--artifact", root, "-q"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["experiment", "paper-dg", "--help", "-q"])
    assert exit_.value.code == 0 and "--quiet" in capsys.readouterr().out
