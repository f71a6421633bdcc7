"""Image sources: JPEGs in a GQA/VG-like folder tree and in zips, original bytes, missing/corrupt reports;
the shared real photographs pass the JPEG sniffer."""

from __future__ import annotations

import shutil
import threading
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from fixtures.tasks import sample_jpegs
from metashift_hf.builders.images import FolderImages, ZipImages, open_images, sniff_image
from metashift_hf.core.errors import InputFormatError, MissingImagesError
from metashift_hf.core.options import OptionError


# The shared reference folder's layout and ids (gqa/ and vg/ subfolders), as generated JPEGs.
TREE = {
    "gqa": ["1339", "2331963", "2354786", "2368326", "2375429", "2400861", "2405722", "n166008", "n578564"],
    "vg": ["1", "2", "2415125", "2415126", "4", "5"],
}


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("images")
    for sub, names in TREE.items():
        sample_jpegs(root / sub, names=names)
    return root


@pytest.fixture(scope="module")
def jpegs(image_tree: Path) -> dict[str, Path]:
    """id -> path of every JPEG in the tree (gqa/ and vg/)."""
    return {f.stem: f for f in sorted(image_tree.glob("*/*.jpg"))}


def _zip(path: Path, files: dict[str, Path], prefix: str, compression: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        zf.writestr(prefix or "readme.txt", b"" if prefix else b"not an image")  # a dir entry / stray file
        for image_id, f in files.items():
            zf.write(f, f"{prefix}{image_id}.jpg")
    return path


def test_folder_with_subfolders_reads_original_bytes(image_tree, jpegs):
    with open_images(image_tree) as src:
        assert isinstance(src, FolderImages)
        assert src.ids() == sorted(jpegs)
        for image_id, f in jpegs.items():
            assert src.has(image_id)
            assert src.read(image_id) == f.read_bytes()
        assert "2375429" in src and f"{len(jpegs)} images" in src.describe()
        assert src.check(src.ids()).ok


@pytest.mark.parametrize("prefix", ["images/", ""])
@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2])
def test_zip_layouts_read_original_bytes(tmp_path, jpegs, prefix, compression):
    path = _zip(tmp_path / "images.zip", jpegs, prefix, compression)
    with open_images(path) as src:
        assert isinstance(src, ZipImages)
        assert src.ids() == sorted(jpegs)
        for image_id, f in jpegs.items():
            assert src.read(image_id) == f.read_bytes()
        ids = sorted(jpegs)[::-1]
        assert src.read_many(ids).to_pylist() == [jpegs[i].read_bytes() for i in ids]
        present, report = src.resolve(jpegs)
        assert present == sorted(jpegs) and report.ok


def test_sources_pickle_and_survive_fork(tmp_path, jpegs):
    import multiprocessing
    import pickle

    path = _zip(tmp_path / "images.zip", jpegs, "images/", zipfile.ZIP_DEFLATED)
    expected = {i: f.read_bytes() for i, f in jpegs.items()}
    for src in (open_images(path), open_images(next(iter(jpegs.values())).parents[1])):
        with src:
            src.read("4")  # open a handle before pickling/forking
            clone = pickle.loads(pickle.dumps(src))
            assert clone.ids() == src.ids() and clone.read("2375429") == expected["2375429"]
            with multiprocessing.get_context("fork").Pool(2) as pool:
                got = pool.map(src.read, sorted(expected))
            assert got == [expected[i] for i in sorted(expected)]
            assert src.read("5") == expected["5"]  # the parent's handle still reads correctly
            clone.close()


def test_zip_reads_are_thread_safe(tmp_path, jpegs):
    path = _zip(tmp_path / "images.zip", jpegs, "images/", zipfile.ZIP_DEFLATED)
    expected = {i: f.read_bytes() for i, f in jpegs.items()}
    errors: list[str] = []
    with open_images(path) as src:

        def work(order: list[str]) -> None:
            for _ in range(5):
                for image_id in order:
                    if src.read(image_id) != expected[image_id]:
                        errors.append(image_id)

        ids = sorted(expected)
        threads = [threading.Thread(target=work, args=(ids[k:] + ids[:k],)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


@pytest.fixture()
def damaged_folder(tmp_path, jpegs) -> Path:
    folder = tmp_path / "imgs"
    folder.mkdir()
    for image_id in ("2375429", "4", "2415126"):
        shutil.copy(jpegs[image_id], folder / f"{image_id}.jpg")
    whole = jpegs["1339"].read_bytes()
    (folder / "1339.jpg").write_bytes(whole[: len(whole) // 2])  # truncated JPEG
    (folder / "77.jpg").write_bytes(b"\x00garbage, not an image" * 10)
    return folder


def test_missing_and_corrupt_are_reported(damaged_folder):
    with open_images(damaged_folder) as src:
        report = src.check(["2375429", "4", "1339", "77", "999", "n1"])
    assert report.missing == ["999", "n1"]
    assert sorted(report.corrupt) == ["1339", "77"]
    assert "truncated" in report.corrupt["1339"]
    assert "not a decodable image" in report.corrupt["77"]
    assert report.requested == 6 and not report.ok
    text = report.summary()
    assert "4 of 6 images unusable" in text and "999" in text and str(damaged_folder) in text


def test_on_missing_error_raises_with_ids_and_fix(damaged_folder):
    with open_images(damaged_folder) as src, pytest.raises(MissingImagesError) as exc:
        src.resolve(["4", "999", "77"], on_missing="error")
    err = exc.value
    assert err.image_ids == ["77", "999"]
    assert "2 of 3 images unusable" in err.what and str(damaged_folder) in err.what
    assert "--on-missing skip" in err.fix and "--images" in err.fix


def test_on_missing_skip_drops_bad_ids(damaged_folder):
    with open_images(damaged_folder) as src:
        present, report = src.resolve(["4", "999", "77", "2375429", "1339"], on_missing="skip")
        assert present == ["2375429", "4"]
        assert report.bad_ids == ["1339", "77", "999"]
        # without verification only absence counts
        present, report = src.resolve(["4", "999", "77"], on_missing="skip", verify=False)
        assert present == ["4", "77"] and report.missing == ["999"]
        with pytest.raises(OptionError, match="neither 'error' nor 'skip'"):  # the one check (core.options)
            src.resolve(["4"], on_missing="ignore")  # type: ignore[arg-type]


def test_read_missing_id_names_source(damaged_folder):
    with open_images(damaged_folder) as src, pytest.raises(MissingImagesError) as exc:
        src.read("12345")
    assert "12345" in exc.value.what and str(damaged_folder) in exc.value.what


def test_damaged_zip_entry_is_corrupt_not_crash(tmp_path, jpegs):
    path = _zip(tmp_path / "images.zip", {"4": jpegs["4"], "5": jpegs["5"]}, "images/", zipfile.ZIP_STORED)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("images/4.jpg")
        offset = info.header_offset + 30 + len(info.filename) + len(info.extra) + 1000
    data = bytearray(path.read_bytes())
    data[offset : offset + 8] = b"XXXXXXXX"  # flip bytes inside the stored JPEG
    path.write_bytes(bytes(data))
    with open_images(path) as src:
        assert src.read("5") == jpegs["5"].read_bytes()
        with pytest.raises(MissingImagesError, match="CRC"):
            src.read("4")
        with pytest.raises(MissingImagesError, match="CRC"):
            src.read_many(["5", "4"])
        present, report = src.resolve(["4", "5"], on_missing="skip")
    assert present == ["5"] and "CRC" in report.corrupt["4"]


def test_bad_sources_give_clear_errors(tmp_path):
    with pytest.raises(MissingImagesError, match="does not exist"):
        open_images(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingImagesError, match="no image files"):
        open_images(tmp_path / "empty")
    notzip = tmp_path / "images.txt"
    notzip.write_text("hello")
    with pytest.raises(InputFormatError, match="neither a folder nor a zip"):
        open_images(notzip)
    cut = tmp_path / "cut.zip"
    with zipfile.ZipFile(cut, "w") as zf:
        zf.writestr("images/1.jpg", b"x" * 1000)
    cut.write_bytes(cut.read_bytes()[:-30])  # central directory end record damaged
    with pytest.raises(InputFormatError, match="not a readable zip"):
        open_images(cut)


def test_duplicate_ids_prefer_top_level(tmp_path, jpegs):
    (tmp_path / "vg").mkdir()
    shutil.copy(jpegs["4"], tmp_path / "4.jpg")
    shutil.copy(jpegs["5"], tmp_path / "vg" / "4.jpg")
    with open_images(tmp_path) as src:
        assert src.read("4") == jpegs["4"].read_bytes()
        assert "1 duplicate" in src.describe()


def test_sniff_image_accepts_every_shared_real_photograph(shared_ref):
    """Real GQA/VG photographs (encoders, markers and sizes the generated JPEGs do not have) all pass."""
    files = sorted((shared_ref / "images").glob("*/*.jpg"))
    assert len(files) >= 15, files
    for f in files:
        assert sniff_image(f.read_bytes()) is None, f


def test_sniff_image_accepts_jpegs_and_rejects_garbage(jpegs, tmp_path):
    from PIL import Image

    for f in jpegs.values():
        assert sniff_image(f.read_bytes()) is None, f
    data = jpegs["2375429"].read_bytes()
    assert sniff_image(b"") == "empty file"
    for cut in (3, 200, len(data) // 2, len(data) - 50):
        assert "truncated" in sniff_image(data[:cut]), cut
    assert "bad JPEG marker" in sniff_image(b"\xff\xd8\xff" + b"garbage" * 50)
    # a zero-sized frame header
    sof = data.index(b"\xff\xc0")
    zero = data[: sof + 5] + b"\x00\x00\x00\x00" + data[sof + 9 :]
    assert "0x0 pixels" in sniff_image(zero)
    assert "not a decodable image" in sniff_image(b"GIF89a" + b"\x00" * 40)
    # other formats go through PIL's verify: a PNG with a damaged chunk CRC is caught
    png = tmp_path / "x.png"
    Image.new("RGB", (8, 8), (10, 200, 30)).save(png)
    good = png.read_bytes()
    assert sniff_image(good) is None
    bad = bytearray(good)
    bad[40] ^= 0xFF  # inside the IDAT chunk
    assert "not a decodable image" in sniff_image(bytes(bad))


@pytest.mark.parametrize("kind", ["folder", "stored", "deflated"])
def test_read_many_is_one_arrow_array_of_original_bytes(tmp_path, kind):
    """read_many (the builder's batch read) gives the same bytes as read, in the asked order,
    empty files included, and names a missing id."""
    files = {f"{i}": bytes([i % 256]) * (i * 997 % 5000) for i in range(1, 40)}
    files["0"] = b""
    if kind == "folder":
        (tmp_path / "imgs").mkdir()
        for i, b in files.items():
            (tmp_path / "imgs" / f"{i}.jpg").write_bytes(b)
        path = tmp_path / "imgs"
    else:
        path = tmp_path / "images.zip"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED if kind == "stored" else zipfile.ZIP_DEFLATED) as zf:
            for i, b in files.items():
                zf.writestr(f"images/{i}.jpg", b)
    ids = ["7", "0", "3", "39", "7"]
    with open_images(path) as src:
        arr = src.read_many(ids)
        assert arr.type == pa.binary() and arr.to_pylist() == [files[i] for i in ids]
        assert src.read_many([]).to_pylist() == []
        with pytest.raises(MissingImagesError, match="'nope'"):
            src.read_many(["3", "nope"])
