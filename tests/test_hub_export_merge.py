"""Issue 37 "Export into an earlier export" (review cases N-X02, N-X03, N-X05, N-X08) and the publish check that a
collection card never omits a repo pushed beside it."""

from __future__ import annotations

import fcntl
import os

import datasets
import pytest
from huggingface_hub import DatasetCard

from fixtures.tasks import build_tiny_artifact, sample_jpegs, three_split_task
from metashift_hf.core.errors import InputFormatError, MetashiftError
from metashift_hf.hub.export import LOCK_FILE, export_prepared
from metashift_hf.hub.publish import push_repos
from metashift_hf.hub.task_open import TaskOrigin


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    art = build_tiny_artifact(root / "artifact")
    a = three_split_task("paper-dg-cat-dog-1", sample_jpegs(root / "a", n=24))
    b = three_split_task("paper-dg-cat-dog-2", sample_jpegs(root / "b", n=24))
    return TaskOrigin(artifact=art), a, b


def _card_configs(repo) -> list[str]:
    return sorted(c["config_name"] for c in DatasetCard.load(repo / "README.md").data.to_dict()["configs"])


def test_a_second_export_adds_its_task_to_the_collection_card(made, tmp_path):
    """N-X02: export B into A's export asked for --force, which then listed B only (A unlisted, rc 0)."""
    origin, a, b = made
    export_prepared([a], origin, tmp_path / "out", namespace="tester")
    export_prepared([b], origin, tmp_path / "out", namespace="tester")  # no --force: B is added
    card = (tmp_path / "out" / "metashift" / "README.md").read_text()
    assert "tester/metashift-paper-dg-cat-dog-1" in card and "tester/metashift-paper-dg-cat-dog-2" in card
    with pytest.raises(MetashiftError, match="--force"):  # replacing a task's repo still needs --force
        export_prepared([a], origin, tmp_path / "out", namespace="tester")
    with pytest.raises(InputFormatError, match="namespace"):  # one collection card names one namespace
        export_prepared([a], origin, tmp_path / "out", namespace="other", force=True)


def test_one_repo_layout_keeps_the_earlier_configs(made, tmp_path):
    """N-X03: one-repo layout, export B --force deleted task A's config (rc 0)."""
    origin, a, b = made
    out = tmp_path / "out"
    export_prepared([a], origin, out, layout="one-repo")
    before = datasets.load_dataset(str(out / "metashift"), a.task_id, cache_dir=str(tmp_path / "c1"))
    export_prepared([b], origin, out, layout="one-repo")
    assert _card_configs(out / "metashift") == [a.task_id, b.task_id]
    after = datasets.load_dataset(str(out / "metashift"), a.task_id, cache_dir=str(tmp_path / "c2"))
    for split in before:
        assert before[split]["image_id"] == after[split]["image_id"]
    with pytest.raises(InputFormatError, match="--force"):
        export_prepared([a], origin, out, layout="one-repo")
    export_prepared([a], origin, out, layout="one-repo", force=True)
    assert _card_configs(out / "metashift") == [a.task_id, b.task_id]


def test_export_force_keeps_files_it_did_not_write(made, tmp_path):
    """N-X05: export --force deleted a user's notes.txt inside the repo folder."""
    origin, a, _ = made
    out = tmp_path / "out"
    export_prepared([a], origin, out)
    for repo in ("metashift-paper-dg-cat-dog-1", "metashift"):
        (out / repo / "notes.txt").write_text("mine")
    export_prepared([a], origin, out, force=True)
    for repo in ("metashift-paper-dg-cat-dog-1", "metashift"):
        assert (out / repo / "notes.txt").read_text() == "mine"


def test_a_second_export_at_once_is_refused_before_it_writes(made, tmp_path):
    """N-X08: two exports into one --out at once: the second left its repo written but unlisted."""
    origin, a, b = made
    out = tmp_path / "out"
    export_prepared([a], origin, out)
    assert not (out / LOCK_FILE).exists()  # the lock goes with the export that held it
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another export holds --out
        with pytest.raises(InputFormatError, match="another export is writing into"):
            export_prepared([b], origin, out)
    finally:
        os.close(fd)
    assert not (out / "metashift-paper-dg-cat-dog-2").exists()
    export_prepared([b], origin, out)  # once the first is done, the second adds its task
    assert "metashift-paper-dg-cat-dog-2" in (out / "metashift" / "README.md").read_text()


def test_publish_never_pushes_a_card_that_omits_a_repo_it_pushes(made, tmp_path):
    """N-X02 (publish side): `publish --from-export` pushed a collection card that omitted a repo it pushed."""
    origin, a, b = made
    export_prepared([a], origin, tmp_path / "one", namespace="tester")
    export_prepared([b], origin, tmp_path / "two", namespace="tester")
    repos = [tmp_path / "one" / "metashift-paper-dg-cat-dog-1", tmp_path / "two" / "metashift-paper-dg-cat-dog-2"]
    with pytest.raises(InputFormatError, match="does not list metashift-paper-dg-cat-dog-2"):
        push_repos([*repos, tmp_path / "one" / "metashift"], "tester", dry_run=True, allow_synthetic=True)


@pytest.mark.parametrize("first, then", [("repo-per-task", "one-repo"), ("one-repo", "repo-per-task")])
def test_a_layout_change_into_an_earlier_export_is_refused(made, tmp_path, first, then):
    """X-06 (issue 46 D4): `export B --layout one-repo` into a repo-per-task export turned the collection folder
    into a one-repo dataset of B only (A unlisted, B held twice, rc 0); the reverse replaced the one repo's configs.
    Refused before anything is written, naming the layout there and the fix; the same layout still adds."""
    origin, a, b = made
    out = tmp_path / "out"
    export_prepared([a], origin, out, layout=first)
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    with pytest.raises(InputFormatError, match=f"in the {first} layout") as err:
        export_prepared([b], origin, out, layout=then)
    assert a.task_id in err.value.what and f"--layout {first}" in err.value.fix
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before  # nothing written
    export_prepared([b], origin, out, layout=first)
