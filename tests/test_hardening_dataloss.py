"""Hardening, data loss: no command replaces a folder it did not write, nor its own inputs.

Every folder-writing command refuses a non-empty --out that holds no marker of ours, replaces one
of ours only with --force (and only of the same kind), never replaces a folder that holds one of its
inputs or the current folder, gives folders and files the umask's permissions, cleans temporary
folders a killed run left (ours only), and turns disk-full / read-only failures into one line.
"""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest
from hardening_inputs import assert_one_line_error, run_cli, tiny_artifact, write_candidate_pickle

from metashift_hf.core import fsutil
from metashift_hf.core.errors import MetashiftError


def test_build_refuses_the_folder_holding_its_input(tmp_path, capsys):
    folder = tmp_path / "work"
    folder.mkdir()
    pkl = write_candidate_pickle(folder / "mine.pkl")
    (folder / "thesis.txt").write_text("four years of work")
    code, _, err = run_cli(capsys, "build", "--candidate-subsets", pkl, "--out", folder, "--no-plots", "--force")
    assert_one_line_error(code, err, "holds this command's input")
    assert (folder / "thesis.txt").read_text() == "four years of work" and pkl.is_file()


def test_build_refuses_a_foreign_non_empty_folder(tmp_path, capsys):
    pkl = write_candidate_pickle(tmp_path / "in.pkl")
    other = tmp_path / "notes"
    other.mkdir()
    (other / "thesis.txt").write_text("keep me")
    for extra in ([], ["--force"]):  # --force replaces only something of ours
        code, _, err = run_cli(capsys, "build", "--candidate-subsets", pkl, "--out", other, "--no-plots", *extra)
        assert_one_line_error(code, err, "not written by metashift-hf")
    assert sorted(p.name for p in other.iterdir()) == ["thesis.txt"]


def test_build_replaces_its_own_artifact_only_with_force(tmp_path, capsys):
    pkl = write_candidate_pickle(tmp_path / "in.pkl")
    out = tmp_path / "art"
    assert run_cli(capsys, "build", "--candidate-subsets", pkl, "--out", out, "--no-plots", "--quiet")[0] == 0
    code, _, err = run_cli(capsys, "build", "--candidate-subsets", pkl, "--out", out, "--no-plots", "--quiet")
    assert_one_line_error(code, err, "--force")
    assert (
        run_cli(capsys, "build", "--candidate-subsets", pkl, "--out", out, "--no-plots", "--quiet", "--force")[0] == 0
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art", "in.pkl"]  # no temp or old folder left


def test_build_out_dot_is_refused_without_traceback(tmp_path, capsys, monkeypatch):
    pkl = write_candidate_pickle(tmp_path / "in.pkl")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    code, _, err = run_cli(capsys, "build", "--candidate-subsets", pkl, "--out", ".", "--no-plots")
    assert_one_line_error(code, err, "current folder")
    assert work.is_dir()


def test_evaluate_refuses_the_artifact_folder_before_loading_a_model(tmp_path, capsys):
    art = tiny_artifact(tmp_path / "art")
    before = sorted(p.name for p in art.root.iterdir())
    # a model that cannot load: the refusal must come first, so the error is about --out
    for extra in ([], ["--force"]):
        code, _, err = run_cli(
            capsys,
            "evaluate",
            "--model",
            "predictions:/nonexistent.parquet",
            "--task",
            "bin-cat-dog",
            "--artifact",
            art.root,
            "--out",
            art.root,
            *extra,
        )
        assert_one_line_error(code, err, "--out")
    assert sorted(p.name for p in art.root.iterdir()) == before


def test_evaluate_refuses_a_foreign_folder_and_another_kind(tmp_path, capsys):
    art = tiny_artifact(tmp_path / "art")
    foreign = tmp_path / "results"
    foreign.mkdir()
    (foreign / "paper.tex").write_text("x")
    code, _, err = run_cli(
        capsys,
        "evaluate",
        "--model",
        "predictions:/nonexistent.parquet",
        "--task",
        "bin-cat-dog",
        "--artifact",
        art.root,
        "--out",
        foreign,
    )
    assert_one_line_error(code, err, "not written by metashift-hf")
    other_art = tiny_artifact(tmp_path / "art2")  # ours, but an artifact: never replaced by a report
    code, _, err = run_cli(
        capsys,
        "evaluate",
        "--model",
        "predictions:/nonexistent.parquet",
        "--task",
        "bin-cat-dog",
        "--artifact",
        art.root,
        "--out",
        other_art.root,
        "--force",
    )
    assert_one_line_error(code, err, "holds a metashift-hf artifact")


@pytest.mark.parametrize("ours", [False, True], ids=["foreign-folder", "foreign-repo-in-our-folder"])
def test_export_refuses_what_it_did_not_write_before_any_work(tmp_path, capsys, ours):
    art = tiny_artifact(tmp_path / "art")
    out = tmp_path / "exports"
    if ours:
        fsutil.claim_dir(out, "export folder")  # an export folder of ours holding a repo folder that is not
    repo = out / "metashift-paper-dg-cat-dog-1"
    repo.mkdir(parents=True)
    (repo / "hand-made.txt").write_text("mine")
    code, _, err = run_cli(
        capsys, "export", "paper-dg-cat-dog-1", "--artifact", art.root, "--images", tmp_path, "--out", out, "--force"
    )
    assert_one_line_error(code, err, "not written by metashift-hf")
    assert (repo / "hand-made.txt").read_text() == "mine"


def test_export_refuses_the_images_folder(tmp_path, capsys):
    art = tiny_artifact(tmp_path / "art")
    images = tmp_path / "images"
    images.mkdir()
    (images / "1.jpg").write_bytes(b"\xff\xd8\xff")
    code, _, err = run_cli(
        capsys, "export", "paper-dg-cat-dog-1", "--artifact", art.root, "--images", images, "--out", tmp_path
    )
    assert_one_line_error(code, err, "--out")
    assert (images / "1.jpg").is_file()


def test_match_refuses_a_foreign_out(tmp_path, capsys):
    names = tmp_path / "names.txt"
    names.write_text("cat(sofa)\ndog(grass)\n")
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    code, _, err = run_cli(capsys, "match", "--subset-names", names, "--out", out, "--force")
    assert_one_line_error(code, err, "not written by metashift-hf")
    assert (out / "keep.txt").is_file()


def test_folders_and_files_get_the_umask_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        with fsutil.atomic_dir(tmp_path / "d", kind="t") as tmp:
            with fsutil.atomic_file(tmp / "README.md", "w") as f:
                f.write("hi")
        art = tiny_artifact(tmp_path / "art")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "d" / "README.md").stat().st_mode) == 0o644
    assert stat.S_IMODE(art.root.stat().st_mode) == 0o755
    assert stat.S_IMODE((art.root / "manifest.json").stat().st_mode) == 0o644


def _dead_pid() -> int:
    pid = 4_000_000  # above the default pid_max: no such process
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid += 1


def test_temp_folders_of_a_killed_run_are_cleaned_ours_only(tmp_path):
    stale = tmp_path / ".art.tmp-killed"
    stale.mkdir()
    (stale / "membership.parquet").write_bytes(b"half")
    (stale / fsutil.MARKER).write_text(json.dumps({"tool": "metashift-hf", "kind": "artifact", "pid": _dead_pid()}))
    foreign = tmp_path / ".art.tmp-someone-else"
    foreign.mkdir()
    (foreign / "data").write_text("not ours")
    tiny_artifact(tmp_path / "art")
    assert not stale.exists()
    assert (foreign / "data").read_text() == "not ours"


def test_disk_full_during_build_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import metashift_hf.builders.artifact as art_mod

    pkl = write_candidate_pickle(tmp_path / "in.pkl")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(art_mod, "write_json", full)
    code, _, err = run_cli(
        capsys, "build", "--candidate-subsets", pkl, "--out", tmp_path / "art", "--no-plots", "--quiet"
    )
    assert_one_line_error(code, err, "No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.pkl"]


def test_read_only_output_location_is_one_line(tmp_path, capsys, monkeypatch):
    import tempfile

    def read_only(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    with pytest.raises(MetashiftError, match="Read-only file system"):
        tiny_artifact(tmp_path / "art")
    pkl = write_candidate_pickle(tmp_path / "in.pkl")
    code, _, err = run_cli(
        capsys, "build", "--candidate-subsets", pkl, "--out", tmp_path / "art2", "--no-plots", "--quiet"
    )
    assert_one_line_error(code, err, "Read-only file system")


@pytest.mark.parametrize("command", ["score", "train"])
def test_score_and_train_refuse_a_foreign_out_before_any_work(tmp_path, capsys, command):
    art = tiny_artifact(tmp_path / "art")
    out = tmp_path / "results"
    out.mkdir()
    (out / "draft.md").write_text("mine")
    extra = ["--predictions", tmp_path / "missing.csv"] if command == "score" else ["--images", tmp_path / "no-images"]
    code, _, err = run_cli(
        capsys, command, "--task", "paper-dg-cat-dog-1", "--artifact", art.root, *extra, "--out", out, "--force"
    )
    assert_one_line_error(code, err, "not written by metashift-hf")
    assert (out / "draft.md").read_text() == "mine"


def _artifact_with_images(tmp_path):
    """The tiny artifact and a folder with an 8x8 JPEG for each of its cat and dog images."""
    import io

    from PIL import Image

    art = tiny_artifact(tmp_path / "art")
    ids = sorted(art.class_images("cat") | art.class_images("dog"))
    images = tmp_path / "images"
    images.mkdir()
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "JPEG")
    for i in ids:
        (images / f"{i}.jpg").write_bytes(buf.getvalue())
    return art, images, ids


def test_an_export_gets_the_umask_permissions(tmp_path, capsys):
    """Export folders were 0700 and README.md 0600 under umask 022."""
    art, images, _ = _artifact_with_images(tmp_path)
    old = os.umask(0o022)
    try:
        code, _, err = run_cli(
            capsys,
            "export",
            "class-cat",
            "--artifact",
            art.root,
            "--images",
            images,
            "--out",
            tmp_path / "out",
            "--no-verify",
            "--quiet",
        )
    finally:
        os.umask(old)
    assert code == 0, err
    written = [tmp_path / "out", *(tmp_path / "out").rglob("*")]
    assert (tmp_path / "out" / "metashift-class-cat" / "README.md") in written
    modes = {p.relative_to(tmp_path): stat.S_IMODE(p.stat().st_mode) for p in written}
    assert all(m == (0o755 if (tmp_path / p).is_dir() else 0o644) for p, m in modes.items()), modes


@pytest.mark.parametrize("failure", ["disk-full", "read-only", "read-only-location"])
@pytest.mark.parametrize("command", ["export", "evaluate"])
def test_disk_full_or_read_only_during_export_or_evaluate_is_one_line(tmp_path, capsys, monkeypatch, command, failure):
    import metashift_hf.evaluate.report as report_mod
    import metashift_hf.hub.export as export_mod

    art, images, ids = _artifact_with_images(tmp_path)
    predictions = tmp_path / "pred.csv"
    predictions.write_text("image_id,imagenet_index\n" + "".join(f"{i},281\n" for i in ids))

    code_ = errno.ENOSPC if failure == "disk-full" else errno.EROFS

    def full(*a, **k):
        raise OSError(code_, os.strerror(code_))

    if failure == "read-only-location":  # the output's temporary folder cannot be made at all
        import tempfile

        real_mkdtemp = tempfile.mkdtemp
        monkeypatch.setattr(
            tempfile,
            "mkdtemp",
            lambda *a, dir=None, **k: full() if str(dir).startswith(str(tmp_path)) else real_mkdtemp(*a, dir=dir, **k),
        )
    if command == "export":  # inside the repo folder's atomic write
        if failure != "read-only-location":
            monkeypatch.setattr(export_mod, "write_config", full)
        argv = [
            "export",
            "class-cat",
            "--artifact",
            art.root,
            "--images",
            images,
            "--out",
            tmp_path / "out",
            "--no-verify",
        ]
    else:  # inside the report folder's atomic write
        if failure != "read-only-location":
            monkeypatch.setattr(report_mod, "render_markdown", full)
        argv = [
            "evaluate",
            "--model",
            f"predictions:{predictions}",
            "--task",
            "class-cat",
            "--artifact",
            art.root,
            "--out",
            tmp_path / "ev",
            "--no-progress",
        ]
    code, _, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, os.strerror(code_))
    assert not any(
        p.name.startswith((".out.tmp", ".ev.tmp", ".metashift-class-cat.tmp")) for p in tmp_path.rglob(".*")
    )
