"""--on-missing error|skip on the commands that read images (export here; evaluate shares the flag)."""
from __future__ import annotations

import json
import shutil

from builders.build import BuildOptions, build_artifact
from builders.subsets import CandidateSubsets
from metashift_hf import cli


def _world(shared_ref, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for src in sorted((shared_ref / "images").glob("*/*.jpg")):
        shutil.copyfile(src, images / src.name)
    ids = sorted(p.stem for p in images.iterdir())
    subsets = {"cat(a)": ids[0:8], "cat(b)": ids[4:12], "cat(c)": ids[8:]}
    art = build_artifact(CandidateSubsets.from_dict(subsets), tmp_path / "art",
                         BuildOptions(min_images_per_subset=3, min_subsets_per_class=2), plots=False)
    return art, images, ids


def test_export_missing_image_errors_then_skips(shared_ref, tmp_path, capsys):
    art, images, ids = _world(shared_ref, tmp_path)
    (images / f"{ids[3]}.jpg").unlink()
    args = ["export", "class-cat", "--artifact", str(art.root), "--images", str(images), "--no-verify"]

    assert cli.main(args + ["--out", str(tmp_path / "out1")]) == 2
    err = capsys.readouterr().err
    assert f"1 missing ({ids[3]})" in err and "--on-missing skip" in err
    assert not (tmp_path / "out1" / "metashift-class-cat").exists()

    assert cli.main(args + ["--out", str(tmp_path / "out2"), "--on-missing", "skip"]) == 0
    spec = json.loads((tmp_path / "out2" / "metashift-class-cat" / "class-cat" / "shift_spec.json").read_text())
    assert spec["skipped_images"]["missing"] == [ids[3]] and spec["skipped_images"]["n"] == 1
    assert sum(spec["split_sizes"].values()) == len(ids) - 1
