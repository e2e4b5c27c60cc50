"""node_capacity: the per-node capacity decision of a cluster's node tier, as tables. The
rules are capacity.decide's (tests/test_capacity.py); these tables show what a tier-Node
hydration is to that decision, and the keep-list the node agent reads."""

from __future__ import annotations

import datetime

import pytest

from fleetcache import reasons
from fleetcache.functions import naming
from fleetcache.functions.node_tier.capacity import (
    Settings,
    copy_of,
    decide,
    demand,
    keep_list,
    least_free,
    node_hydrations,
    pool_condition,
    status_of,
)

GI = 1024**3
COMMIT = "a" * 40
OLD = "b" * 40
SETTINGS = Settings(capacity=100 * GI, high=80, low=70)
NOW = datetime.datetime(2026, 12, 3, 10, tzinfo=datetime.UTC)


def hydration(cache: str, gib: int, *, node: dict | None = None, namespace: str = "ml",
              created: str = "2026-01-01T00:00:00Z", size: str | None = None,
              spec: dict | None = None, **status) -> dict:
    """A tier-Node hydration of `gib` GiB on gpu-a; `node` is its status.nodeTier."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": f"{cache}-gpu-a", "namespace": namespace,
                         "creationTimestamp": created},
            "spec": {"clusterName": "gpu-a", "modelCacheName": cache, "tier": "Node",
                     "commit": COMMIT, "bytes": gib * GI,
                     "storage": {"size": size or f"{gib + 1}Gi"}, **(spec or {})},
            "status": {**({"nodeTier": node} if node is not None else {}), **status}}


def warm(cache: str, gib: int, *, last_used: str = "2026-12-01T01:00:00Z", pinned: bool = False,
         mounted: int = 0, placed: int = 0, **status) -> dict:
    """Every pool node holds it; unpinned, no replica mounts it or is placed."""
    return hydration(cache, gib, node={"phase": "Ready", "readyNodes": 3},
                     servingCommit=COMMIT, pinned=pinned, mountedBy=mounted,
                     placedReplicas=placed, lastUsedTime=last_used, **status)


def new(cache: str, gib: int, created: str = "2026-01-01T00:00:00Z") -> dict:
    return hydration(cache, gib, node={"phase": "Pending", "reason": "NodeCapacityLow"},
                     created=created)


def run(*hydrations: dict, latched: dict | None = None, settings: Settings = SETTINGS):
    return decide(settings, list(hydrations), latched or {})


# --- what a hydration is to the decision ----------------------------------------------------


@pytest.mark.parametrize("status, bytes_", [
    ({}, 10 * GI),  # one commit
    ({"servingCommit": COMMIT, "storedCommits": [COMMIT]}, 10 * GI),
    ({"servingCommit": OLD}, 20 * GI),  # an update: two commits, capped at twice the commit
    ({"servingCommit": COMMIT, "storedCommits": [COMMIT, OLD]}, 20 * GI),  # old still read
])
def test_demand_counts_two_commits_while_the_cluster_holds_two(status, bytes_):
    assert demand(hydration("q", 10, size="64Gi", **status)) == bytes_


def test_demand_of_an_update_is_the_volume_tiers_figure_when_blobs_are_shared():
    assert demand(hydration("q", 10, size="13Gi", servingCommit=OLD)) == 13 * GI


@pytest.mark.parametrize("bytes_", ["ten", True, -1, 10**30, float("nan")])
def test_a_cache_whose_bytes_are_unreadable_has_no_demand_and_waits(bytes_):
    broken = hydration("q", 1, spec={"bytes": bytes_})
    assert demand(broken) is None
    assert run(broken).waiting == ("ml/q",)


@pytest.mark.parametrize("node, phase, started", [
    (None, "Pending", False),
    ({"phase": "Pending", "reason": "NodeCapacityLow"}, "Pending", False),
    ({"phase": "Pending", "reason": "AwaitingVolumeTier", "readyNodes": 2}, "Pending", True),
    ({"phase": "Warming"}, "Hydrating", True),
    ({"phase": "Degraded"}, "Hydrating", True),
    ({"phase": "Ready"}, "Ready", True),
    ({"phase": "Failed"}, "Failed", True),
    ({"phase": "Evicted"}, "Evicted", False),
    ({"phase": "Bogus phase"}, "Pending", False),
])
def test_the_node_tier_phase_maps_onto_the_volume_tiers(node, phase, started):
    copy = copy_of(hydration("q", 5, node=node))
    assert (copy.key, copy.phase, copy.started) == ("ml/q", phase, started)
    assert copy.used == (5 * GI if started else None)


@pytest.mark.parametrize("wanted", [{"placedReplicas": 1}, {"mountedBy": 1}, {"pinned": True}])
def test_an_evicted_cache_wanted_again_asks_for_admission_like_a_new_one(wanted):
    evicted = hydration("q", 5, node={"phase": "Evicted"}, **wanted)
    decision = run(evicted, latched={"evicted": ["ml/q"]})
    assert (decision.evicted, decision.admitted) == ((), ("ml/q",))


def test_an_evicted_cache_nobody_wants_stays_evicted_and_counts_nothing():
    evicted = hydration("q", 5, node={"phase": "Evicted"}, pinned=False, mountedBy=0,
                        placedReplicas=0)
    decision = run(evicted, latched={"evicted": ["ml/q"]})
    assert (decision.evicted, decision.admitted, decision.used) == (("ml/q",), (), 0)


def test_only_tier_node_hydrations_of_this_cluster_are_node_caches():
    volume = hydration("vol", 1, spec={"tier": "Volume"})
    elsewhere = hydration("far", 1, spec={"clusterName": "gpu-b"})
    nameless = hydration("x", 1, spec={"modelCacheName": "Not A Name"})
    assert node_hydrations("gpu-a", [volume, elsewhere, nameless, new("q", 1)]) == [new("q", 1)]


# --- admission and eviction: the volume tier's rules, per node --------------------------------


@pytest.mark.parametrize("warm_gib, sizes, admitted, waiting", [
    (0, [80], ["ml/c0"], []),  # exactly at the high watermark fits
    (0, [81], [], ["ml/c0"]),
    (50, [20, 10], ["ml/c0", "ml/c1"], []),
    (50, [40, 10], [], ["ml/c0", "ml/c1"]),  # no overtaking
])
def test_admission_keeps_each_nodes_demand_under_the_high_watermark(warm_gib, sizes, admitted,
                                                                     waiting):
    caches = [new(f"c{i}", gib, created=f"2026-01-01T00:00:0{i}Z") for i, gib in enumerate(sizes)]
    decision = run(*([warm("old", warm_gib, mounted=1)] if warm_gib else []), *caches)
    assert (list(decision.admitted), list(decision.waiting)) == (admitted, waiting)


def test_admission_never_overcommits_the_free_space_the_nodes_reported():
    started = warm("old", 10, mounted=1)
    started["status"]["nodeTier"]["minFreeBytes"] = 15 * GI  # a disk smaller than the budget
    decision = run(started, new("a", 10, "2026-01-01T00:00:01Z"),
                   new("b", 10, "2026-01-01T00:00:02Z"))
    assert (decision.admitted, decision.waiting) == (("ml/a",), ("ml/b",))


def test_the_least_free_space_any_cache_reported_is_the_nodes():
    caches = [hydration("a", 1, node={"minFreeBytes": 9}), hydration("b", 1, node={"minFreeBytes": 4}),
              hydration("c", 1, node={"minFreeBytes": "lots"}), hydration("d", 1)]
    assert least_free(caches) == 4
    assert least_free([hydration("d", 1)]) is None


def test_above_the_high_watermark_lapsed_then_least_recently_used_caches_go_down_to_low():
    decision = run(warm("old", 30, last_used="2026-12-01T01:00:00Z"),
                   warm("lapsed", 10, last_used="2026-12-01T05:00:00Z", lapsed=True),
                   warm("mid", 20, last_used="2026-12-01T02:00:00Z"),
                   warm("new", 25, last_used="2026-12-01T03:00:00Z"))  # 85: lapsed, old -> 45
    assert decision.evicted == ("ml/lapsed", "ml/old")
    assert decision.used == 45 * GI


def test_between_the_watermarks_nothing_is_evicted():
    assert run(warm("a", 40), warm("b", 38)).evicted == ()


@pytest.mark.parametrize("kept", [
    warm("kept", 90, pinned=True),
    warm("kept", 90, mounted=1),  # a Node replica reads it (Node replicas count as mounting)
    warm("kept", 90, placed=1),
    hydration("kept", 90, node={"phase": "Degraded", "readyNodes": 1}, pinned=False,
              mountedBy=0, placedReplicas=0),  # not Ready on its nodes: kept
])
def test_pinned_mounted_placed_or_unsettled_node_copies_are_never_evicted(kept):
    decision = run(kept)
    assert decision.evicted == ()
    assert decision.stuck and decision.capacity_low


def test_deciding_again_on_the_published_lists_changes_nothing():
    caches = [warm("a", 50, last_used="2026-12-01T01:00:00Z"), warm("b", 40), new("c", 5)]
    first = run(*caches)
    again = run(*caches, latched=status_of(first))
    assert (again.admitted, again.waiting, again.evicted) == \
        (first.admitted, first.waiting, first.evicted)


# --- the keep-list ----------------------------------------------------------------------------


def removed(cache: str, *, until: str = "2026-12-03T11:00:00Z", **status) -> dict:
    return hydration(cache, 1, spec={"removal": {"since": "2026-12-03T09:00:00Z",
                                                 "until": until}},
                     **{"pinned": False, "mountedBy": 0, "placedReplicas": 0, **status})


@pytest.mark.parametrize("cache, row", [
    (new("placed", 1), {"since": None, "afterRemoval": "1h"}),
    (warm("serving", 1), {"since": None, "afterRemoval": "1h"}),
    (removed("leaving"), {"since": "2026-12-03T09:00:00Z", "afterRemoval": "2h0m0s"}),
    (removed("leaving", mountedBy=1), {"since": None, "afterRemoval": "1h"}),  # still read
    (removed("leaving", pinned=True), {"since": None, "afterRemoval": "1h"}),
    (hydration("leaving", 1, spec={"removal": {"since": "2026-12-03T09:00:00Z",
                                               "until": "2026-12-03T11:00:00Z"}}),
     {"since": None, "afterRemoval": "1h"}),  # whether replicas use it is not known: kept
    (removed("gone", until="2026-12-03T10:00:00Z"), None),  # removed past afterRemoval
])
def test_the_keep_list_holds_every_node_cache_not_evicted_nor_removed_past_its_time(cache, row):
    key = f"ml/{cache['spec']['modelCacheName']}"
    keep = keep_list([cache], run(cache), NOW)
    assert keep.get(key) == row


def test_an_evicted_cache_leaves_the_keep_list_so_the_nodes_delete_it():
    cache = warm("q", 90)
    decision = run(cache)
    assert decision.evicted == ("ml/q",)
    assert keep_list([cache], decision, NOW) == {}


# --- the report -------------------------------------------------------------------------------


def test_status_says_demand_against_capacity_per_node():
    status = status_of(run(warm("a", 30), new("b", 60)))
    assert status == {"capacityPerNodeBytes": 100 * GI, "demandBytes": 30 * GI, "usedPercent": 30,
                      "summary": "30.0GiB/100.0GiB (30%)", "admitted": [],
                      "waiting": ["ml/b"], "evicted": []}


def test_node_capacity_low_names_what_waits_and_what_is_not_removable():
    decision = run(warm("pinned", 90, pinned=True), new("b", 5))
    low, reason, message = pool_condition("gpu-a", SETTINGS, decision, 7 * GI)
    assert (low, reason) == (True, "NodeCapacityLow")
    assert "no node copy is removable" in message
    assert "1 node cache waiting for room (ml/b)" in message
    assert "the fullest pool node has 7.0GiB free" in message
    assert reasons.remedy("NodeCapacityLow") in message


def test_node_capacity_is_available_when_everything_fits():
    low, reason, _ = pool_condition("gpu-a", SETTINGS, run(warm("a", 10)), None)
    assert (low, reason) == (False, "NodeCapacityAvailable")

