"""The verification record: what it vouches for, and what makes a file be re-hashed."""

from __future__ import annotations

import hashlib
import os
import time

from fleetcache.agent.layouts import open_layout
from fleetcache.manifest import Entry

DATA = b"weights" * 1000


def blob_entry(data: bytes = DATA) -> Entry:
    return Entry("w.safetensors", len(data), hashlib.sha256(data).hexdigest(), "sha256")


def published(tmp_path, data: bytes = DATA):
    layout = open_layout("hf-cache", tmp_path, "acme/tiny")
    entry = blob_entry(data)
    layout.blob_path(entry).parent.mkdir(parents=True)
    layout.blob_path(entry).write_bytes(data)
    return layout, entry


def test_a_recorded_file_is_trusted_without_hashing(tmp_path, monkeypatch):
    from fleetcache.agent import layout as layout_module

    layout, entry = published(tmp_path)
    layout.record_verified(entry)
    monkeypatch.setattr(layout_module, "file_problem", lambda *a: (_ for _ in ()).throw(AssertionError("hashed")))
    assert layout.scan((entry,), "c" * 40).verified == {entry.digest}


def test_a_write_after_recording_makes_the_next_scan_re_hash_and_refuse_the_file(tmp_path):
    layout, entry = published(tmp_path)
    layout.record_verified(entry)
    time.sleep(0.05)  # file times tick coarsely (a few ms): a later write must land on a later tick
    with open(layout.blob_path(entry), "r+b") as f:
        f.write(b"X")
    assert layout.scan((entry,), "c" * 40).verified == frozenset()


def test_a_file_with_the_right_bytes_but_no_record_is_re_hashed_and_recorded(tmp_path):
    layout, entry = published(tmp_path)
    assert layout.scan((entry,), "c" * 40).verified == {entry.digest}
    assert entry.digest in layout.read_verified()


def test_forgetting_withdraws_the_record_and_a_later_line_wins(tmp_path):
    layout, entry = published(tmp_path)
    layout.record_verified(entry)
    layout.forget_verified([entry])
    assert entry.digest not in layout.read_verified()
    layout.record_verified(entry)
    assert layout.read_verified()[entry.digest][1] == entry.digest


def test_a_torn_last_line_of_the_record_is_ignored(tmp_path):
    layout, entry = published(tmp_path)
    layout.record_verified(entry)
    with open(layout.verified_record(), "a") as f:
        f.write("123 45")  # a crash mid-append
    assert list(layout.read_verified()) == [entry.digest]


def test_the_record_lives_beside_the_hf_cache_not_inside_it(tmp_path):
    layout, entry = published(tmp_path)
    layout.record_verified(entry)
    assert layout.verified_record().is_relative_to(tmp_path / ".fleetcache")
    assert not any(".fleetcache" in p for _, dirs, _ in os.walk(tmp_path / "hub") for p in dirs)
