"""Prune planning and commit comparison are pure: what to remove and what is shared, without disk or hub."""

from __future__ import annotations

from fleetcache.agent.plan import VolumeState, compared_record, plan_prune
from fleetcache.manifest import GIT_SHA1, SHA256, Entry

OLD, NEW, OTHER = "a" * 40, "b" * 40, "c" * 40
SHARD_OLD = ("hf-cache", "1" * 64)
SHARD_NEW = ("hf-cache", "2" * 64)
CONFIG = ("hf-cache", "3" * 40)
ORPHAN = ("hf-cache", "4" * 64)


def volume(**overrides) -> VolumeState:
    state = {
        "commits": {OLD: frozenset({SHARD_OLD, CONFIG}), NEW: frozenset({SHARD_NEW, CONFIG})},
        "refs": {"hub/models--acme--tiny/refs/main": NEW, "hub/models--acme--tiny/refs/v1": OLD},
        "blobs": {SHARD_OLD: 100, SHARD_NEW: 200, CONFIG: 7},
    }
    return VolumeState(**{**state, **overrides})


def test_prune_removes_the_commits_not_kept():
    assert plan_prune(volume(), frozenset({NEW})).commits == (OLD,)


def test_prune_removes_refs_naming_a_commit_not_kept():
    assert plan_prune(volume(), frozenset({NEW})).refs == ("hub/models--acme--tiny/refs/v1",)


def test_prune_keeps_a_blob_a_kept_commit_shares_with_a_pruned_one():
    assert plan_prune(volume(), frozenset({NEW})).blobs == (SHARD_OLD,)


def test_prune_removes_a_blob_no_commit_references():
    plan = plan_prune(volume(blobs={SHARD_NEW: 200, CONFIG: 7, ORPHAN: 5}), frozenset({NEW}))
    assert plan.blobs == (ORPHAN,) and plan.freed_bytes == 5


def test_freed_bytes_are_the_sizes_of_the_removed_blobs():
    assert plan_prune(volume(), frozenset({NEW})).freed_bytes == 100


def test_keeping_every_commit_removes_nothing():
    plan = plan_prune(volume(), frozenset({OLD, NEW}))
    assert (plan.commits, plan.refs, plan.blobs, plan.freed_bytes) == ((), (), (), 0)


def test_a_kept_commit_absent_from_the_volume_keeps_nothing_else():
    plan = plan_prune(volume(), frozenset({OTHER}))
    assert plan.commits == (OLD, NEW) and plan.freed_bytes == 307


def entries(*pairs):
    return tuple(Entry(path, size, digest, SHA256 if len(digest) == 64 else GIT_SHA1) for path, size, digest in pairs)


def test_shared_bytes_count_the_resolved_files_whose_content_the_compared_commit_has():
    new = entries(("model.safetensors", 200, "2" * 64), ("config.json", 7, "3" * 40))
    old = entries(("model.safetensors", 100, "1" * 64), ("config.json", 7, "3" * 40))
    assert compared_record(OLD, new, old) == {"commit": OLD, "bytes": 107, "files": 2, "sharedBytes": 7}


def test_shared_bytes_match_content_at_another_path():
    new = entries(("renamed.json", 7, "3" * 40))
    old = entries(("config.json", 7, "3" * 40))
    assert compared_record(OLD, new, old)["sharedBytes"] == 7


def test_a_commit_the_hub_does_not_know_is_reported_missing_with_zeros():
    new = entries(("config.json", 7, "3" * 40))
    assert compared_record(OLD, new, None) == {"commit": OLD, "bytes": 0, "files": 0, "sharedBytes": 0,
                                               "missing": True}
