"""Planning is pure: listing refusals, glob semantics, manifest digest, resume arithmetic."""

from __future__ import annotations

import hashlib

import pytest
from huggingface_hub.utils import filter_repo_objects

from fleetcache.agent.errors import AgentError
from fleetcache.agent.plan import DiskState, parse_listing, plan_fetch, select
from fleetcache.manifest import GIT_SHA1, SHA256, Entry, manifest_digest

COMMIT = "a" * 40
SHA = "b" * 64
BLOB = "c" * 40


def listing(*siblings, sha=COMMIT):
    return {"sha": sha, "siblings": list(siblings)}


def plain(path, size=10, blob=BLOB):
    return {"rfilename": path, "size": size, "blobId": blob}


def lfs(path, size=100, sha=SHA):
    return {"rfilename": path, "size": size, "blobId": BLOB, "lfs": {"sha256": sha, "size": size, "pointerSize": 130}}


def test_listing_gives_sha256_for_lfs_files_and_git_sha1_for_the_rest():
    parsed = parse_listing("o/r", "main", listing(plain("config.json"), lfs("w.safetensors")))
    assert parsed.commit == COMMIT
    assert parsed.entries == (Entry("config.json", 10, BLOB, GIT_SHA1), Entry("w.safetensors", 100, SHA, SHA256))


@pytest.mark.parametrize("path", [
    "/etc/passwd", "../escape", "a/../../b", "a/./b", "a//b", "a\\b", "a\0b", "", "dir/", "a\nb", ".fleetcache/x",
])
def test_unsafe_paths_are_refused_not_sanitized(path):
    with pytest.raises(AgentError) as err:
        parse_listing("o/r", "main", listing(plain(path)))
    assert err.value.code == 14


@pytest.mark.parametrize("size", [-1, 1 << 50, None, "10", 1.5, True])
def test_negative_absurd_or_non_integer_sizes_are_refused(size):
    with pytest.raises(AgentError) as err:
        parse_listing("o/r", "main", listing(plain("a.json", size=size)))
    assert err.value.code == 14


def test_duplicate_paths_are_refused():
    with pytest.raises(AgentError, match="twice") as err:
        parse_listing("o/r", "main", listing(plain("a.json"), plain("a.json")))
    assert err.value.code == 14


def test_a_path_that_is_both_file_and_directory_is_refused():
    with pytest.raises(AgentError, match="both as a file and a directory"):
        parse_listing("o/r", "main", listing(plain("a"), plain("a/b")))


@pytest.mark.parametrize("bad", [
    {"sha": "main", "siblings": []},
    {"sha": COMMIT},
    [],
    listing({"rfilename": "a", "size": 1, "blobId": "nothex"}),
    listing({"rfilename": "a", "size": 1, "blobId": BLOB, "lfs": {"sha256": "short", "size": 1}}),
    listing({"rfilename": "a", "size": 1, "blobId": BLOB, "lfs": {"sha256": SHA, "size": 2}}),
])
def test_malformed_listings_are_refused(bad):
    with pytest.raises(AgentError) as err:
        parse_listing("o/r", "main", bad)
    assert err.value.code == 14


PATHS = [
    "config.json", "model.safetensors", "model-00001-of-00002.safetensors", "onnx/model.onnx", "onnx/sub/x.json",
    ".gitattributes", "README.md", "original/consolidated.pth", "tokenizer.json", "data/a.json", "Data/B.JSON",
]
PATTERNS = [None, [], ["*.json"], ["*.safetensors", "*.json"], ["onnx/"], ["onnx/*"], ["*/x.json"], ["original/"],
            ["data\\a.json"], ["[cC]onfig.json"], ["?EADME.md"], ["*.JSON"], [".*"]]


@pytest.mark.parametrize("allow", PATTERNS)
@pytest.mark.parametrize("ignore", [None, ["*.json"], ["onnx/"], ["original/*", ".*"]])
def test_globs_select_exactly_what_huggingface_hub_selects(allow, ignore):
    entries = tuple(Entry(p, 1, BLOB, GIT_SHA1) for p in PATHS)
    expected = list(filter_repo_objects(PATHS, allow_patterns=allow, ignore_patterns=ignore))
    assert [e.path for e in select(entries, allow, ignore)] == expected


def test_manifest_digest_is_sha256_of_sorted_path_size_digest_lines():
    entries = (Entry("b.json", 2, BLOB, GIT_SHA1), Entry("a.bin", 5, SHA, SHA256))
    lines = f"a.bin 5 {SHA}\nb.json 2 {BLOB}"
    assert manifest_digest(entries) == hashlib.sha256(lines.encode()).hexdigest()
    assert manifest_digest(tuple(reversed(entries))) == manifest_digest(entries)


def test_manifest_digest_changes_when_any_digest_changes():
    one = (Entry("a.bin", 5, SHA, SHA256),)
    other = (Entry("a.bin", 5, "d" * 64, SHA256),)
    assert manifest_digest(one) != manifest_digest(other)


def by_digest(entry: Entry) -> str:
    return entry.digest


def test_a_fresh_destination_plans_every_byte_in_ranged_parts():
    entries = (Entry("w.bin", 100, SHA, SHA256), Entry("c.json", 10, BLOB, GIT_SHA1))
    plan = plan_fetch(entries, by_digest, DiskState(), part_size=40)
    assert [t.parts for t in plan.tasks] == [((0, 40), (40, 80), (80, 100)), ((0, 10),)]
    assert plan.bytes_missing == 110 and plan.bytes_present == 0


def test_a_resumed_partial_plans_only_the_missing_ranges():
    entries = (Entry("w.bin", 100, SHA, SHA256),)
    plan = plan_fetch(entries, by_digest, DiskState(partial={SHA: [(0, 30), (50, 60)]}), part_size=15)
    (task,) = plan.tasks
    assert task.parts == ((30, 45), (45, 50), (60, 75), (75, 90), (90, 100))
    assert task.done == ((0, 30), (50, 60))
    assert plan.bytes_missing == 60 and plan.bytes_present == 40


def test_a_verified_blob_is_only_linked_never_fetched_again():
    entries = (Entry("w.bin", 100, SHA, SHA256),)
    plan = plan_fetch(entries, by_digest, DiskState(verified=frozenset({SHA})), part_size=40)
    assert plan.tasks == () and plan.to_link == entries and plan.bytes_missing == 0


def test_a_complete_cache_plans_nothing():
    entries = (Entry("w.bin", 100, SHA, SHA256),)
    disk = DiskState(verified=frozenset({SHA}), linked=frozenset({"w.bin"}))
    plan = plan_fetch(entries, by_digest, disk, part_size=40)
    assert plan.tasks == () and plan.to_link == () and plan.files_present == 1 and plan.bytes_present == 100


def test_files_with_identical_bytes_are_fetched_once():
    entries = (Entry("a/w.bin", 100, SHA, SHA256), Entry("b/w.bin", 100, SHA, SHA256))
    plan = plan_fetch(entries, by_digest, DiskState(), part_size=1000)
    (task,) = plan.tasks
    assert [e.path for e in task.entries] == ["a/w.bin", "b/w.bin"] and plan.bytes_missing == 100


def test_an_empty_file_is_a_task_with_nothing_to_download():
    entries = (Entry("empty.txt", 0, "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", GIT_SHA1),)
    (task,) = plan_fetch(entries, by_digest, DiskState(), part_size=10).tasks
    assert task.parts == ()
