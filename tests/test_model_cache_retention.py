"""compose-model-cache's retention, as a specification: pinning and the TTL pass through to
every hydration, a cluster that leaves the placement keeps its copy as long as retention
says, and the status counts lapsed, evicted and retained copies (Lapsed condition)."""

from __future__ import annotations

import copy
import datetime

import pytest

from fleetcache.apis import specs, xrds
from fleetcache.functions import protocol
from fleetcache.functions.composers import model_cache
from fleetcache.functions.decisions import cache_rollup
from fleetcache.functions.k8s import objects
from tests.support.fleet import GIB, fleet_cluster, grant_admitting, model_cache_xr, observed_hydration, with_resolved

UTC = datetime.UTC
NOW = datetime.datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
EAST = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-east-2")]
FLEET = EAST + [fleet_cluster("gpu-west-1")]
WEST_LEFT = EAST + [fleet_cluster("gpu-west-1", labels={"gpu": "a10"})]  # west left


def at(hour: int, minute: int = 0) -> str:
    return f"2026-12-03T{hour:02d}:{minute:02d}:00Z"


def compose(xr: dict, fleet: list[dict], observed: dict | None = None,
            now: datetime.datetime = NOW) -> protocol.Outcome:
    return model_cache.compose(protocol.Request(
        composite=xr, observed=observed or {}, now=now,
        required={"fleet-clusters": fleet, "model-cache-grant": [grant_admitting(xr)]}))


def cache(**spec: object) -> dict:
    return with_resolved(model_cache_xr(**spec))


def hydrations(outcome: protocol.Outcome) -> dict[str, dict]:
    return {r["spec"]["clusterName"]: r for r, _ in outcome.desired.values()
            if r["kind"] == "ModelCacheHydration"}


def condition(outcome: protocol.Outcome, type_: str) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == type_)


def observed_fleet(xr: dict, **status_by_cluster: dict) -> dict:
    """Every cluster's hydration as composed for FLEET, Ready and unmounted, with the given
    status fields per cluster (keys with '_' for '-': gpu_west_1)."""
    observed = {}
    for key, (desired, _) in compose(xr, FLEET).desired.items():
        hydration = observed_hydration(desired, "Ready", done=3 * GIB)
        hydration["status"].update(mountedBy=0, pinned=False, lapsed=False)
        hydration["status"].update(status_by_cluster.get(
            desired["spec"]["clusterName"].replace("-", "_"), {}))
        observed[key] = hydration
    return observed


def west_left(status: dict | None = None, retained_since: str | None = None,
              now: datetime.datetime = NOW, **spec: object) -> protocol.Outcome:
    """gpu-west-1 left the placement; its hydration reports `status` (merged)."""
    xr = cache(**spec)
    if retained_since:
        xr["status"]["retained"] = [{"cluster": "gpu-west-1", "since": retained_since,
                                     "until": retained_since, "reason": "AfterRemoval"}]
    return compose(xr, WEST_LEFT, observed_fleet(xr, gpu_west_1=status or {}), now)


# --- spec.retention passes through ------------------------------------------------------


@pytest.mark.parametrize("retention, passed", [
    ({}, {"pinned": False}),
    ({"pinned": True}, {"pinned": True}),
    ({"ttlAfterLastUse": "72h"}, {"pinned": False, "ttlAfterLastUse": "72h"}),
    ({"pinned": True, "ttlAfterLastUse": "168h", "afterRemoval": "30m"},
     {"pinned": True, "ttlAfterLastUse": "168h"}),
])
def test_every_hydration_gets_the_pin_and_the_ttl_of_its_cache(retention, passed):
    outcome = compose(cache(retention=retention), FLEET)
    assert {c: h["spec"]["retention"] for c, h in hydrations(outcome).items()} == \
        dict.fromkeys(["gpu-east-1", "gpu-east-2", "gpu-west-1"], passed)


@pytest.mark.parametrize("retention, field", [
    ({"ttlAfterLastUse": "30m"}, "spec.retention.ttlAfterLastUse"),
    ({"ttlAfterLastUse": "0h"}, "spec.retention.ttlAfterLastUse"),
    ({"afterRemoval": "1d"}, "spec.retention.afterRemoval"),
    ({"pinned": "yes"}, "spec.retention.pinned"),
])
def test_a_bad_retention_is_an_input_error_naming_the_field(retention, field):
    with pytest.raises(specs.InputError, match=field.replace(".", r"\.")):
        compose(cache(retention=retention), FLEET)


# --- a cluster that left the placement ------------------------------------------------------


@pytest.mark.parametrize("status, since, reason", [
    ({"mountedBy": 2, "lastUsedTime": at(12)}, at(2), "Mounted"),  # afterRemoval long past
    ({"pinned": True}, at(2), "Pinned"),
    ({}, None, "AfterRemoval"),  # left in this call: afterRemoval (1h) has not passed
])
def test_a_cluster_that_left_keeps_its_hydration_with_removal_and_says_why(status, since,
                                                                           reason):
    outcome = west_left(status, retained_since=since)
    removal = hydrations(outcome)["gpu-west-1"]["spec"]["removal"]
    assert outcome.status["retained"] == [{"cluster": "gpu-west-1", **removal,
                                           "reason": reason}]
    assert outcome.status["retainedClusters"] == 1


@pytest.mark.parametrize("now, last_used, after_removal, kept_until", [
    (at(10, 30), None, "1h", at(11)),          # left at 10:00: kept until 11:00
    (at(11), None, "1h", None),                # 11:00: removed
    (at(11), at(10), "1h", None),              # last used when it left: same
    (at(12, 30), at(12), "1h", at(13)),        # mounted until 12:00 after leaving: from then
    (at(10, 20), None, "30m", at(10, 30)),     # minutes
    (at(10), None, "0h", None),                # 0h: removed as soon as nothing mounts it
])
def test_a_cluster_that_left_is_kept_until_the_later_of_leaving_and_last_use_plus_after_removal(
        now, last_used, after_removal, kept_until):
    status = {"lastUsedTime": last_used} if last_used else {}
    outcome = west_left(status, retained_since=at(10),
                        now=datetime.datetime.fromisoformat(now.replace("Z", "+00:00")),
                        retention={"afterRemoval": after_removal})
    kept = hydrations(outcome).get("gpu-west-1")
    if kept_until is None:
        assert kept is None
        assert outcome.status["retained"] == []
    else:
        assert kept["spec"]["removal"] == {"since": at(10), "until": kept_until}
        assert outcome.status["retained"] == [{"cluster": "gpu-west-1", "since": at(10),
                                               "until": kept_until, "reason": "AfterRemoval"}]


def test_a_kept_hydration_is_composed_as_observed_so_it_fetches_nothing_new():
    xr = cache()
    observed = observed_fleet(xr)
    outcome = compose(xr, WEST_LEFT, observed)
    kept = hydrations(outcome)["gpu-west-1"]
    was = observed["hydration-gpu-west-1"]
    assert {k: v for k, v in kept["spec"].items() if k != "removal"} == was["spec"]
    assert kept["metadata"]["name"] == was["metadata"]["name"]
    assert "status" not in kept


def test_a_kept_hydration_leaves_spec_crossplane_to_the_hydrations_own_reconciler():
    xr = cache()
    observed = observed_fleet(xr)
    observed["hydration-gpu-west-1"]["spec"]["crossplane"] = {
        "compositionRef": {"name": "modelcachehydrations.fleetcache.dev"},
        "resourceRefs": [{"apiVersion": objects.OBJECT_API_VERSION, "kind": "Object",
                          "name": "qwen-gpu-west-1-cache"}]}
    kept = hydrations(compose(xr, WEST_LEFT, observed))["gpu-west-1"]
    assert "crossplane" not in kept["spec"]


def test_a_kept_hydration_takes_the_caches_current_pin():
    xr = cache()
    observed = observed_fleet(xr)
    pinned_now = cache(retention={"pinned": True, "ttlAfterLastUse": "24h"})
    kept = hydrations(compose(pinned_now, WEST_LEFT, observed))["gpu-west-1"]
    assert kept["spec"]["retention"] == {"pinned": True, "ttlAfterLastUse": "24h"}


@pytest.mark.parametrize("row_since, hydration_since, latched", [
    (at(8), None, at(8)),            # the status row
    (None, at(9), at(9)),            # the hydration's own spec.removal (beyond 100 rows)
    (at(9), at(8), at(8)),           # the earliest of the two
    (None, None, at(12)),            # first seen gone: now
    ("2027-01-01T00:00:00Z", None, at(12)),  # never later than now
    ("not a time", None, at(12)),
])
def test_since_is_latched_the_first_time_and_never_refreshed(row_since, hydration_since,
                                                             latched):
    xr = cache()
    if row_since:
        xr["status"]["retained"] = [{"cluster": "gpu-west-1", "since": row_since}]
    observed = observed_fleet(xr, gpu_west_1={"mountedBy": 1})
    if hydration_since:
        observed["hydration-gpu-west-1"]["spec"]["removal"] = {"since": hydration_since,
                                                               "until": hydration_since}
    kept = hydrations(compose(xr, WEST_LEFT, observed))["gpu-west-1"]
    assert kept["spec"]["removal"]["since"] == latched


def test_since_carries_over_to_the_next_call_through_the_status():
    xr = cache()
    observed = observed_fleet(xr, gpu_west_1={"mountedBy": 1})
    first = compose(xr, WEST_LEFT, observed, now=NOW)
    xr["status"] = first.status
    later = compose(xr, WEST_LEFT, observed, now=NOW + datetime.timedelta(hours=5))
    assert later.status["retained"][0]["since"] == at(12)


def test_a_cluster_that_comes_back_is_a_normal_target_again():
    xr = cache()
    observed = observed_fleet(xr, gpu_west_1={"mountedBy": 1})
    left = compose(xr, WEST_LEFT, observed)
    xr["status"] = left.status
    observed["hydration-gpu-west-1"]["spec"] = hydrations(left)["gpu-west-1"]["spec"]
    back = compose(xr, FLEET, observed)
    assert "removal" not in hydrations(back)["gpu-west-1"]["spec"]
    assert back.status["retained"] == []
    assert back.status["desiredClusters"] == 3


@pytest.mark.parametrize("status", [
    None,                                   # no status yet
    {"mountedBy": "two"},
    {"mountedBy": -1},
    {"mountedBy": True},
    {"lastUsedTime": "yesterday"},
])
def test_a_status_that_cannot_be_read_keeps_the_copy(status):
    xr = cache(retention={"afterRemoval": "0h"})
    observed = observed_fleet(xr)
    west = observed["hydration-gpu-west-1"]
    if status is None:
        del west["status"]
    else:
        del west["status"]["mountedBy"]
        west["status"].update(status)
    outcome = compose(xr, WEST_LEFT, observed)
    assert "gpu-west-1" in hydrations(outcome)
    assert outcome.status["retained"][0]["reason"] == "StatusUnknown"


def test_a_pin_the_hydration_does_not_report_yet_still_keeps_the_copy():
    xr = cache(retention={"pinned": True, "afterRemoval": "0h"})
    observed = observed_fleet(xr)
    del observed["hydration-gpu-west-1"]["status"]["pinned"]
    outcome = compose(xr, WEST_LEFT, observed)
    assert outcome.status["retained"][0]["reason"] == "Pinned"


def test_a_lapsed_copy_is_no_longer_pinned_so_it_goes_after_removal():
    xr = cache(retention={"pinned": True, "ttlAfterLastUse": "1h", "afterRemoval": "0h"})
    observed = observed_fleet(xr, gpu_west_1={"pinned": False, "lapsed": True})
    assert "gpu-west-1" not in hydrations(compose(xr, WEST_LEFT, observed))


def test_retained_rows_are_bounded_and_the_count_covers_every_cluster():
    fleet = [fleet_cluster(f"gpu-{i:03d}") for i in range(130)]
    xr = cache(rollout={"maxConcurrent": 200})
    observed = {}
    for key, (desired, _) in compose(xr, fleet).desired.items():
        observed[key] = observed_hydration(desired, "Ready", done=3 * GIB)
        observed[key]["status"]["mountedBy"] = 1
    outcome = compose(xr, [], observed)
    assert outcome.status["retainedClusters"] == 130
    assert len(outcome.status["retained"]) == cache_rollup.LISTED_CLUSTERS
    assert outcome.status["retained"][0]["cluster"] == "gpu-000"
    assert len(hydrations(outcome)) == 130


def test_retention_decides_while_the_source_resolves_again():
    xr = cache(retention={"afterRemoval": "0h"})
    observed = observed_fleet(xr)
    xr["spec"]["source"]["huggingFace"]["revision"] = "v2"  # a new source: resolving
    outcome = compose(xr, WEST_LEFT, observed)
    assert condition(outcome, "Resolved").status == "False"
    assert sorted(hydrations(outcome)) == ["gpu-east-1", "gpu-east-2"]


# --- lapsed and evicted copies -----------------------------------------------------------


LAPSED_EVICTED = {"phase": "Evicted", "reason": "Evicted", "lapsed": True}
EVICTED = {"phase": "Evicted", "reason": "Evicted"}
HYDRATING = {"phase": "Hydrating"}
FAILED = {"phase": "Failed", "reason": "DigestMismatch"}


@pytest.mark.parametrize("east_2, west_1, min_ready, lapsed, available_reason", [
    (LAPSED_EVICTED, LAPSED_EVICTED, 0, "True", "Lapsed"),
    (LAPSED_EVICTED, {}, 0, "True", "Lapsed"),
    (LAPSED_EVICTED, HYDRATING, 0, "False", "TooFewClustersReady"),
    (LAPSED_EVICTED, FAILED, 0, "False", "TooFewClustersReady"),
    (LAPSED_EVICTED, EVICTED, 0, "False", "TooFewClustersReady"),  # evicted, not lapsed
    (LAPSED_EVICTED, HYDRATING, 1, "False", "MinimumClustersReady"),  # no shortfall
    ({"lapsed": True}, {}, 0, "False", "MinimumClustersReady"),  # lapsed but still there
])
def test_lapsed_is_true_only_when_every_missing_cluster_lapsed_and_was_evicted(
        east_2, west_1, min_ready, lapsed, available_reason):
    xr = cache(minReady=min_ready)
    outcome = compose(xr, FLEET, observed_fleet(xr, gpu_east_2=east_2, gpu_west_1=west_1))
    assert condition(outcome, "Lapsed").status == lapsed
    assert condition(outcome, "Available").reason == available_reason


def test_the_lapsed_message_says_how_many_and_where():
    xr = cache(retention={"ttlAfterLastUse": "72h"})
    outcome = compose(xr, FLEET, observed_fleet(xr, gpu_east_2=LAPSED_EVICTED,
                                                gpu_west_1=LAPSED_EVICTED))
    lapsed = condition(outcome, "Lapsed")
    assert (lapsed.reason, lapsed.status) == ("Lapsed", "True")
    assert lapsed.message.startswith("2 copies lapsed (no replica mounted it for "
                                     "spec.retention.ttlAfterLastUse 72h) and evicted, on "
                                     "gpu-east-2, gpu-west-1; ")


def test_an_eviction_is_not_degraded_but_the_shortfall_names_it():
    xr = cache()
    outcome = compose(xr, FLEET, observed_fleet(xr, gpu_west_1=EVICTED))
    assert condition(outcome, "Degraded").status == "False"
    available = condition(outcome, "Available")
    assert available.status == "False"
    assert "evicted on gpu-west-1 to free room" in available.message
    progressing = condition(outcome, "Progressing")
    assert (progressing.status, progressing.reason) == ("False", "Evicted")


def test_an_evicted_copy_does_not_hold_a_rollout_slot():
    fleet = FLEET + [fleet_cluster("gpu-zone-9")]
    observed = observed_fleet(cache(), gpu_east_2=EVICTED)
    one_at_a_time = cache(rollout={"maxConcurrent": 1})
    assert "gpu-zone-9" in hydrations(compose(one_at_a_time, fleet, observed))


def test_an_evicted_copy_serves_no_previous_commit():
    xr = cache()
    observed = observed_fleet(xr, gpu_west_1={**EVICTED, "servingRepo": "Qwen/Qwen3-0.6B",
                                              "servingCommit": "a" * 40})
    row = next(r for r in compose(xr, FLEET, observed).status["clusters"]
               if r["name"] == "gpu-west-1")
    assert (row["phase"], row["servingCommit"]) == ("Evicted", "")


def test_status_counts_lapsed_evicted_retained_and_mounting_replicas():
    xr = cache()
    observed = observed_fleet(xr, gpu_east_1={"mountedBy": 3, "lapsed": False},
                              gpu_east_2=LAPSED_EVICTED,
                              gpu_west_1={"mountedBy": 2})
    extra = copy.deepcopy(observed["hydration-gpu-west-1"])
    extra["spec"]["clusterName"] = "gpu-gone"
    observed["hydration-gpu-gone"] = extra
    status = compose(xr, FLEET, observed).status
    assert {k: status[k] for k in ("desiredClusters", "readyClusters", "hydratingClusters",
                                   "lapsedClusters", "evictedClusters", "retainedClusters",
                                   "mountedReplicas")} == {
        "desiredClusters": 3, "readyClusters": 2, "hydratingClusters": 0, "lapsedClusters": 1,
        "evictedClusters": 1, "retainedClusters": 1, "mountedReplicas": 7}
    lapsed_rows = {r["name"]: r["lapsed"] for r in status["clusters"]}
    assert lapsed_rows == {"gpu-east-1": False, "gpu-east-2": True, "gpu-west-1": False}


# --- what is composed and written validates against the XRDs ---------------------------------


def test_composed_hydrations_and_the_status_validate_against_their_xrds():
    xr = cache(retention={"pinned": True, "ttlAfterLastUse": "168h", "afterRemoval": "30m"})
    observed = observed_fleet(xr, gpu_east_2=LAPSED_EVICTED, gpu_west_1={"mountedBy": 1})
    outcome = compose(xr, WEST_LEFT, observed)
    assert "removal" in hydrations(outcome)["gpu-west-1"]["spec"]
    for hydration in hydrations(outcome).values():
        assert xrds.violations(hydration) == [], hydration["spec"]["clusterName"]
    assert xrds.violations({**xr, "status": outcome.status}) == []
