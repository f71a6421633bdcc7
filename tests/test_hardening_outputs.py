"""Hardening, round 3 (issue 22 part 1): one output rule for every command that writes.

A file output (``distance --matrix --out FILE``, ``download --manifest FILE``) is written only where
nothing exists yet, or with ``--force`` over a file of ours (core.fsutil.FileKind: recognised by its
content signature); a folder output is new, empty, or ours with ``--force`` (core.fsutil.check_out).
Neither is ever written through or over a symbolic link, a FIFO, a device or (for a file) a folder:
each is refused in one line before any work, and nothing is written anywhere.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hardening_inputs import assert_one_line_error, run_cli, small_subsets, write_candidate_pickle

from metashift_hf.builders.build import BuildOptions, build_artifact
from metashift_hf.builders.subsets import CandidateSubsets
from metashift_hf.core import fsutil
from metashift_hf.core.errors import MetashiftError
from metashift_hf.core.provenance import SourceInfo
from metashift_hf.sources.manifest import DataManifest


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A licensed artifact (publish checks the licence before the export), a pickle, subset names, an image folder."""
    root = tmp_path_factory.mktemp("inputs")
    subsets = {k: sorted(v) for k, v in small_subsets().items()}
    art = build_artifact(
        CandidateSubsets.from_dict(subsets),
        root / "art",
        BuildOptions(),
        plots=False,
        source_info=SourceInfo(license="cc-by-4.0"),
    )
    names = root / "names.txt"
    names.write_text("cat(sofa)\ndog(grass)\n")
    images = root / "images"
    images.mkdir()
    (images / "1.jpg").write_bytes(b"\xff\xd8\xff")
    return {
        "art": art.root,
        "pkl": write_candidate_pickle(root / "in.pkl"),
        "names": names,
        "images": images,
        "missing": root / "missing.csv",
        "no_images": root / "no-images",
    }


def _folder_commands(i) -> dict[str, list]:
    """Every command that writes a folder, with inputs that are otherwise fine (the --out goes last)."""
    art, task = i["art"], ["--task", "paper-dg-cat-dog-1", "--artifact", i["art"]]
    return {
        "build": ["build", "--candidate-subsets", i["pkl"], "--no-plots"],
        "evaluate": [
            "evaluate",
            "--model",
            "predictions:/nonexistent.parquet",
            "--task",
            "bin-cat-dog",
            "--artifact",
            art,
        ],
        "score": ["score", *task, "--predictions", i["missing"]],
        "bugs": ["bugs", *task, "--predictions", i["missing"]],
        "train": ["train", *task, "--images", i["no_images"]],
        "experiment paper-dg": ["experiment", "paper-dg", "--artifact", art, "--images", i["no_images"]],
        "experiment ood-levels": ["experiment", "ood-levels", "--artifact", art, "--images", i["no_images"]],
        "experiment clustered": ["experiment", "clustered", "--artifact", art, "--images", i["no_images"]],
        "experiment conflicts": ["experiment", "conflicts", "--artifact", art, "--images", i["no_images"]],
        "experiment compare": [
            "experiment",
            "compare",
            "--methods",
            "erm",
            "--tasks",
            "paper-dg-cat-dog-1",
            "--artifact",
            art,
            "--images",
            i["no_images"],
        ],
        "export": ["export", "paper-dg-cat-dog-1", "--artifact", art, "--images", i["images"]],
        "publish": [
            "publish",
            "paper-dg-cat-dog-1",
            "--artifact",
            art,
            "--images",
            i["images"],
            "--namespace",
            "me",
            "--dry-run",
        ],
        "match": ["match", "--subset-names", i["names"]],
        "demo": ["demo", "--no-eval"],
    }


def _file_commands(i) -> dict[str, tuple[list, str]]:
    """Every command that writes one file the user names: argv before the flag, and the flag."""
    return {
        "distance": (["distance", "--artifact", i["art"], "--class", "cat", "--matrix"], "--out"),
        "download": (["download", "--register", "images", i["images"]], "--manifest"),
    }


FOLDER_COMMANDS = list(_folder_commands({k: "x" for k in ("art", "pkl", "names", "images", "missing", "no_images")}))
FILE_COMMANDS = list(_file_commands({k: "x" for k in ("art", "images")}))


def _snapshot(folder: Path) -> dict:
    """What is under ``folder``: name -> (type, bytes of a regular file, target of a link)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = os.lstat(p)
        out[str(p.relative_to(folder))] = (
            stat.S_IFMT(st.st_mode),
            p.read_bytes() if stat.S_ISREG(st.st_mode) else None,
            os.readlink(p) if p.is_symlink() else None,
        )
    return out


def _place(tmp_path: Path, case: str, *, folder: bool) -> Path:
    """An --out of the hostile ``case`` inside tmp_path/place (with whatever it points at)."""
    place = tmp_path / "place"
    place.mkdir()
    if case == "symlink":  # to something the command would accept if it followed the link
        target = place / "target"
        if folder:
            target.mkdir()  # an empty folder
        else:
            target.write_text("a user's notes\n")
        (place / "out").symlink_to(target)
    elif case == "dangling-symlink":
        (place / "out").symlink_to(place / "nowhere")
    elif case == "fifo":
        os.mkfifo(place / "out")
    elif case == "directory":
        (place / "out").mkdir()
        (place / "out" / "thesis.txt").write_text("keep me")
    return place / "out"


NEEDLES = {"symlink": "symbolic link", "dangling-symlink": "symbolic link", "fifo": "FIFO", "directory": ""}


@pytest.mark.parametrize("case", ["symlink", "dangling-symlink", "fifo", "directory"])
@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_folder_commands_refuse_links_fifos_and_foreign_folders(inputs, tmp_path, capsys, command, case):
    out = _place(tmp_path, case, folder=True)
    before = _snapshot(tmp_path)
    # the demo owns its folder and compare adds runs to its own: neither has --force
    for extra in ([], ["--force"]) if command not in ("demo", "experiment compare") else ([],):
        code, _, err = run_cli(capsys, *_folder_commands(inputs)[command], "--out", out, *extra)
        assert_one_line_error(code, err, "--out", NEEDLES[case] or "not written by metashift-hf")
    assert _snapshot(tmp_path) == before  # nothing written, through the link or beside it


@pytest.mark.parametrize("case", ["symlink", "dangling-symlink", "fifo", "directory"])
@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_file_commands_refuse_links_fifos_and_folders(inputs, tmp_path, capsys, command, case):
    out = _place(tmp_path, case, folder=False)
    argv, flag = _file_commands(inputs)[command]
    before = _snapshot(tmp_path)
    for extra in ([], ["--force"]) if command == "distance" else ([],):
        code, _, err = run_cli(capsys, *argv, flag, out, *extra)
        assert_one_line_error(code, err, flag, NEEDLES[case] or "is a folder")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("command", FILE_COMMANDS + ["build", "export"])
def test_a_device_is_refused_before_it_is_opened(inputs, tmp_path, capsys, monkeypatch, command):
    """/dev/null as the output: refused from its type alone (tests run as root, where replacing it would succeed)."""

    def no_write(*a, **k):
        raise AssertionError("a temporary file or folder was made next to a device")

    monkeypatch.setattr(tempfile, "mkstemp", no_write)
    monkeypatch.setattr(tempfile, "mkdtemp", no_write)
    if command in FILE_COMMANDS:
        argv, flag = _file_commands(inputs)[command]
    else:
        argv, flag = _folder_commands(inputs)[command], "--out"
    code, _, err = run_cli(capsys, *argv, flag, "/dev/null", "--force" if command == "distance" else "--quiet")
    assert_one_line_error(code, err, "character device")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


# ---------------------------------------------------------------------------------------------------
# distance --matrix --out: the worst case of the round (any path was overwritten without --force)
# ---------------------------------------------------------------------------------------------------
def _matrix(inputs, out, *extra, capsys):
    return run_cli(capsys, "distance", "--artifact", inputs["art"], "--class", "cat", "--matrix", "--out", out, *extra)


def test_distance_out_never_replaces_a_users_file(inputs, tmp_path, capsys):
    mine = tmp_path / "results.csv"
    mine.write_text("source,target,my own numbers\n")
    for extra in ([], ["--force"]):
        code, _, err = _matrix(inputs, mine, *extra, capsys=capsys)
        assert_one_line_error(code, err, "not written by metashift-hf")
    assert mine.read_text() == "source,target,my own numbers\n"


def test_distance_out_replaces_its_own_csv_only_with_force(inputs, tmp_path, capsys):
    out = tmp_path / "sub" / "cat.csv"
    code, stdout, err = _matrix(inputs, out, capsys=capsys)
    assert code == 0, err
    first = out.read_bytes()
    assert first.startswith(b"source,target,distance,rule,status\n") and "wrote" in stdout
    assert stat.S_IMODE(out.stat().st_mode) == fsutil.umask_mode("file")
    code, _, err = _matrix(inputs, out, capsys=capsys)
    assert_one_line_error(code, err, "--force")
    assert _matrix(inputs, out, "--force", capsys=capsys)[0] == 0
    assert out.read_bytes() == first
    assert sorted(p.name for p in out.parent.iterdir()) == ["cat.csv"]  # no temporary file left


def test_distance_out_never_writes_into_the_artifact(inputs, tmp_path, capsys):
    """manifest.json was overwritten (the artifact became unreadable); a new file inside it is refused too."""
    art = Path(inputs["art"])
    before = _snapshot(art)
    for name in ("manifest.json", "extra.csv"):
        code, _, err = _matrix(inputs, art / name, "--force", capsys=capsys)
        assert_one_line_error(code, err, "input")
    assert _snapshot(art) == before


def test_distance_out_without_matrix_says_what_out_needs(inputs, capsys):
    code, _, err = run_cli(capsys, "distance", "--artifact", inputs["art"], "cat(ctx0)", "cat(ctx1)", "--out", "x.csv")
    assert_one_line_error(code, err, "--class C --matrix")
    assert "give two subset names" not in err  # two were given: the old hint was wrong
    assert not Path("x.csv").exists()


# ---------------------------------------------------------------------------------------------------
# the helper itself, and the data manifest it guards
# ---------------------------------------------------------------------------------------------------
KIND = fsutil.FileKind("test table", b"col_a,col_b\n")


def test_atomic_out_file_rule(tmp_path):
    out = tmp_path / "t.csv"
    with fsutil.atomic_out_file(out, KIND) as f:
        f.write("col_a,col_b\n1,2\n")
    assert out.read_text() == "col_a,col_b\n1,2\n"
    with pytest.raises(MetashiftError, match="--force"):
        fsutil.check_out_file(out, KIND)
    assert fsutil.check_out_file(out, KIND, force=True) == out
    with pytest.raises(AssertionError, match="must begin with"):  # a writer that breaks its own signature
        with fsutil.atomic_out_file(out, KIND, force=True) as f:
            f.write("other\n")
    assert out.read_text() == "col_a,col_b\n1,2\n" and sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]
    with pytest.raises(MetashiftError, match="is a folder"):
        fsutil.check_out_file(tmp_path, KIND, force=True)
    with pytest.raises(MetashiftError, match="input"):
        fsutil.check_out_file(tmp_path / "new.csv", KIND, inputs=[tmp_path])
    (tmp_path / "file").write_text("x")
    with pytest.raises(MetashiftError, match="cannot use"):  # a parent that is a file
        fsutil.check_out_file(tmp_path / "file" / "t.csv", KIND)


def test_check_out_refuses_a_link_to_a_folder(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(MetashiftError, match="symbolic link"):
        fsutil.check_out(tmp_path / "link", "scores", force=True)
    with pytest.raises(MetashiftError, match="symbolic link"):
        fsutil.claim_dir(tmp_path / "link", "export folder")
    assert list((tmp_path / "real").iterdir()) == []


def test_data_manifest_is_replaced_only_when_it_is_ours(tmp_path, capsys):
    images = tmp_path / "images"
    images.mkdir()
    (images / "1.jpg").write_bytes(b"\xff\xd8\xff")
    man = tmp_path / "manifest.json"
    for _ in range(2):  # written, then updated in place (ours: no --force needed)
        code, _, err = run_cli(capsys, "download", "--register", "images", images, "--manifest", man)
        assert code == 0, err
    assert DataManifest.load(man).entry("images")["path"] == str(images.resolve())
    other = tmp_path / "notes.json"
    other.write_text("{}\n")  # a JSON file that is not a data manifest: load refuses it, save never reaches it
    code, _, err = run_cli(capsys, "download", "--register", "images", images, "--manifest", other)
    assert code == 2 and other.read_text() == "{}\n"


# ---------------------------------------------------------------------------------------------------
# a failed export leaves no empty --out behind
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "empty-folder"])
def test_a_failed_export_leaves_no_empty_out(inputs, tmp_path, capsys, existing):
    out = tmp_path / "exports"
    if existing:
        out.mkdir()
    # images that do not exist: the export fails after --out was claimed (while preparing the task)
    code, _, err = run_cli(
        capsys,
        "export",
        "paper-dg-cat-dog-1",
        "--artifact",
        inputs["art"],
        "--images",
        tmp_path / "no-images",
        "--out",
        out,
        "--quiet",
    )
    assert code == 2, err
    assert (out.is_dir() and list(out.iterdir()) == []) if existing else not out.exists()
