"""core.fsutil: the one file-hashing loop and the one human-size format."""

import hashlib

from metashift_hf.core.fsutil import hash_file, human_size, sha256_file
from metashift_hf.core.sources import KNOWN_FILES


def test_hash_file_whole_prefix_and_continued(tmp_path):
    data = bytes(range(256)) * 9000  # > 2 chunks of 1 MiB
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    assert sha256_file(p) == sha256_file(p, progress=True) == hashlib.sha256(data).hexdigest()
    assert hash_file(p, length=1000).hexdigest() == hashlib.sha256(data[:1000]).hexdigest()
    h = hashlib.sha256(b"name\0")
    assert hash_file(p, h) is h and h.hexdigest() == hashlib.sha256(b"name\0" + data).hexdigest()
    assert hash_file(p, length=0).hexdigest() == hashlib.sha256(b"").hexdigest()


def test_human_size_is_si_and_says_so():
    assert [human_size(n) for n in (0, 999, 1000, 148_901, 44_824_862)] == [
        "0 B",
        "999 B",
        "1.0 kB",
        "148.9 kB",
        "44.8 MB",
    ]
    # the same file gets the same figure everywhere (was 20.3 GB in one message, 21.8 GB in another)
    assert human_size(KNOWN_FILES["images"].size) == "21.8 GB"
    assert human_size(3.2e12) == "3.2 TB"
