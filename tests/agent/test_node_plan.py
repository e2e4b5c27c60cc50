"""Node-tier planning, without disk or API: volume manifests, copy plans, keep-lists, labels."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetcache.agent.errors import AgentError
from fleetcache.agent.node_plan import (
    LABEL_PREFIX,
    Kept,
    VolumeNotReady,
    capacity_problem,
    clip,
    label_key,
    label_patch,
    parse_duration,
    parse_keep,
    plan_node_copy,
    plan_prepare,
    volume_entries,
)
from fleetcache.agent.plan import DiskState
from fleetcache.manifest import SHA256, Entry, manifest_digest
from fleetcache.shapes import is_resolved_commit as valid_commit

NOW = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
C = "c" * 40
A = Entry("a.safetensors", 100, "a" * 64, SHA256)
B = Entry("b.safetensors", 50, "b" * 64, SHA256)
B_TWIN = Entry("copy/b.safetensors", 50, "b" * 64, SHA256)


def manifest(*entries, commit=C):
    return {"commit": commit, "layout": "hf-cache", "files": [e.__dict__ for e in entries]}


def test_the_manifest_whose_entries_recompute_to_the_digest_is_chosen():
    digest = manifest_digest((A,))
    assert volume_entries([manifest(A, B), manifest(A)], "acme/x", C, digest) == ("hf-cache", (A,))


def test_a_manifest_that_recomputes_to_another_digest_is_a_digest_mismatch():
    with pytest.raises(AgentError) as err:
        volume_entries([manifest(A)], "acme/x", C, manifest_digest((B,)))
    assert err.value.reason == "DigestMismatch"


def test_no_manifest_of_the_commit_means_the_volume_is_not_ready_yet():
    with pytest.raises(VolumeNotReady):
        volume_entries([], "acme/x", C, manifest_digest((A,)))


@pytest.mark.parametrize("bad", [
    {"path": "../etc/passwd", "size": 1, "digest": "a" * 64, "algo": SHA256},
    {"path": "x", "size": -1, "digest": "a" * 64, "algo": SHA256},
    {"path": "x", "size": 1, "digest": "zz", "algo": SHA256},
    {"path": "x", "size": 1, "digest": "a" * 64, "algo": "md5"},
])
def test_a_malformed_volume_manifest_entry_is_refused(bad):
    with pytest.raises(AgentError) as err:
        volume_entries([{"commit": C, "files": [bad]}], "acme/x", C, "0" * 64)
    assert err.value.reason == "InvalidSource"


def test_the_copy_plan_copies_unverified_blobs_once_and_links_verified_ones():
    plan = plan_node_copy((A, B, B_TWIN), DiskState(verified=frozenset({A.digest})))
    assert [t.key for t in plan.tasks] == [B.digest] and plan.tasks[0].entries == (B, B_TWIN)
    assert plan.to_link == (A,) and plan.bytes_missing == 50


def test_the_copy_plan_resumes_a_killed_copys_prefix():
    plan = plan_node_copy((A,), DiskState(partial={A.digest: [(0, 40)]}))
    assert plan.tasks[0].done == ((0, 40),) and plan.tasks[0].parts == ((40, 100),)
    assert plan.bytes_present == 40 and plan.bytes_missing == 60


@pytest.mark.parametrize("free,needed,problem", [
    (100, 100, None), (100, 0, None),
    (10, 60, "60 bytes still to copy but 10 free on the node cache"),
])
def test_capacity_problem(free, needed, problem):
    assert capacity_problem(free, needed) == problem


def test_messages_are_clipped_to_120_characters():
    assert clip("x" * 200) == "x" * 119 + "…" and clip("short") == "short" and clip(None) is None


@pytest.mark.parametrize("value,duration", [
    ("1h", timedelta(hours=1)), ("30m", timedelta(minutes=30)), ("90s", timedelta(seconds=90)),
    ("1h30m", timedelta(hours=1, minutes=30)),
])
def test_durations(value, duration):
    assert parse_duration(value) == duration


@pytest.mark.parametrize("value", ["", "1d", "h", 5, None])
def test_bad_durations_are_refused(value):
    with pytest.raises(ValueError):
        parse_duration(value)


def test_the_keep_list_parses_placed_and_removed_rows():
    kept = parse_keep({"ns/a": {"since": None, "afterRemoval": "1h"},
                       "ns/b": {"since": "2026-12-03T09:00:00Z", "afterRemoval": "2h"}})
    assert kept == {("ns", "a"): Kept(None, timedelta(hours=1)),
                    ("ns", "b"): Kept(datetime(2026, 12, 3, 9, 0, tzinfo=UTC), timedelta(hours=2))}


@pytest.mark.parametrize("data", [
    [], {"ns": {}}, {"../x/y": {}}, {"ns/Upper": {}}, {"ns/a": {"since": "yesterday"}},
    {"ns/a": {"since": "2026-12-03T09:00:00"}}, {"ns/a": "placed"},
])
def test_a_bad_keep_list_is_refused_as_a_whole(data):
    with pytest.raises(ValueError):
        parse_keep(data)


PLACED = Kept(None, timedelta(hours=1))


def removed(minutes_ago):
    return Kept(NOW - timedelta(minutes=minutes_ago), timedelta(hours=1))


@pytest.mark.parametrize("kept,present,create,delete,namespaces", [
    ({("a", "x"): PLACED}, {}, [("a", "x")], [], []),
    ({("a", "x"): PLACED}, {"a": {"x"}}, [], [], []),
    ({("a", "x"): PLACED}, {"a": {"x", "y"}}, [], [("a", "y")], []),
    ({("a", "x"): removed(30)}, {"a": {"x"}}, [], [], []),
    ({("a", "x"): removed(60)}, {"a": {"x"}}, [], [("a", "x")], ["a"]),
    ({("a", "x"): removed(90)}, {}, [], [], []),
    ({}, {"b": {"y"}, "c": set()}, [], [("b", "y")], ["b", "c"]),
])
def test_prepare_plan(kept, present, create, delete, namespaces):
    plan = plan_prepare(kept, present, NOW)
    assert (list(plan.create), list(plan.delete), list(plan.delete_namespaces)) == (create, delete, namespaces)


def test_label_patch_sets_changes_and_removes_only_prefixed_keys():
    current = {"gpu": "a100", label_key("a", "x"): "0" * 40, label_key("a", "gone"): C, LABEL_PREFIX + "zz": C}
    patch = label_patch(current, {("a", "x"): C, ("a", "new"): C})
    assert patch == {label_key("a", "x"): C, label_key("a", "new"): C, label_key("a", "gone"): None,
                     LABEL_PREFIX + "zz": None}


@pytest.mark.parametrize("commit,valid", [
    ("a" * 40, True), ("s3-" + "a" * 40, True), ("vol-" + "a" * 40, True),
    ("A" * 40, False), ("a" * 39, False), ("gs-" + "a" * 40, False), ("main", False), (None, False),
])
def test_commits_a_node_copy_can_be_labelled_with(commit, valid):
    assert valid_commit(commit) is valid
