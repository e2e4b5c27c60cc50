"""compose-model-cache-grant and a ModelCache with spec.rollout.waves: the projection the
grant admits holds the rollout's peak (both commits on every target's volume) before the
rollout starts, that is, when the new commit has resolved and before it fans out."""

from __future__ import annotations

import pytest

from fleetcache import reasons
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers.model_cache_grant import (
    FLEET_CLUSTERS_KEY,
    HYDRATIONS_KEY,
    MODEL_CACHES_KEY,
    compose,
)
from tests.support.fleet import fleet_cluster
from tests.support.xrd import assert_valid

GIB = 1024**3
OLD_COMMIT, NEW_COMMIT, OTHER_COMMIT = "1" * 40, "2" * 40, "3" * 40
NEW_CONTENT = "bb" * 32
CLUSTERS = ("gpu-east-1", "gpu-east-2", "gpu-east-3")
FLEET = [fleet_cluster(name, labels={"tier": "serving"}) for name in CLUSTERS]
WAVES = [{"name": "canary", "clusterNames": ["gpu-east-1"], "pause": True},
         {"name": "half", "percent": 50}]
# The new commit is 10 GiB; the old one, which every target serves, 10 GiB sharing 4 GiB
# with it: at the peak each volume holds 16 GiB, the three targets 48 GiB.
PEAK_PER_CLUSTER = 16 * GIB
PEAK = 3 * PEAK_PER_CLUSTER


def compared(commit: str = OLD_COMMIT, size_gib: int = 10, shared_gib: int = 4,
             missing: bool = False) -> dict:
    return {"commit": commit, "bytes": size_gib * GIB, "files": 5,
            "sharedBytes": shared_gib * GIB, "missing": missing}


def model_cache(*, waves: list[dict] | None = WAVES, rows: tuple[dict, ...] = (compared(),),
                source: dict | None = None, name: str = "qwen",
                created: str = "2026-01-01T00:00:00Z") -> dict:
    """A ModelCache whose new commit resolved (10 GiB) after its targets served OLD_COMMIT."""
    spec: dict = {"grantRef": {"name": "team-a"},
                  "source": source or {"huggingFace": {"repo": f"org/{name}", "revision": "main"}},
                  "placement": {"clusterNames": list(CLUSTERS)}}
    if waves is not None:
        spec["rollout"] = {"waves": waves}
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created},
            "spec": spec,
            "status": {"resolved": {"commit": NEW_COMMIT, "bytes": 10 * GIB, "files": 5,
                                    "manifestDigest": NEW_CONTENT, "compared": list(rows)}}}


def grant_xr(quota: int, status: dict | None = None) -> dict:
    xr = {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
          "metadata": {"name": "team-a", "namespace": "ml"},
          "spec": {"clusters": {"clusterSelector": {"matchLabels": {"tier": "serving"}}},
                   "quota": {"bytes": str(quota)}}}
    if status is not None:
        xr["status"] = status
    return xr


def granted(quota: int, *caches: dict, status: dict | None = None) -> protocol.Outcome:
    return compose(protocol.Request(composite=grant_xr(quota, status), required={
        MODEL_CACHES_KEY: list(caches), HYDRATIONS_KEY: [], FLEET_CLUSTERS_KEY: FLEET}))


def row(outcome: protocol.Outcome, name: str = "qwen") -> dict:
    return next(r for r in outcome.status["caches"] if r["name"] == name)


def test_a_cache_with_waves_projects_both_commits_on_every_target():
    assert granted(100 * GIB, model_cache()).status["projectedBytes"] == PEAK


def test_a_cache_with_waves_is_admitted_before_its_rollout_starts_when_its_peak_fits():
    outcome = granted(PEAK, model_cache())
    assert (row(outcome)["admitted"], row(outcome)["reason"]) == (True, "Admitted")
    assert row(outcome)["admittedFootprint"] == {
        "manifestDigest": NEW_CONTENT, "bytes": PEAK_PER_CLUSTER, "clusters": 3}


def test_a_cache_with_waves_whose_peak_passes_the_budget_is_refused_before_its_rollout_starts():
    outcome = granted(PEAK - 1, model_cache())
    assert (row(outcome)["admitted"], row(outcome)["reason"]) == (False, reasons.OverQuota)
    assert row(outcome)["message"].startswith(
        "10.0GiB (16.0GiB with the previous commit, at the peak of its rollout in waves) on "
        "3 clusters would make the projection 48.0GiB")


def test_a_refused_rollout_keeps_the_footprint_admitted_before_counted():
    before = {"caches": [{"name": "qwen", "commit": OLD_COMMIT, "manifestDigest": "aa" * 32,
                          "bytes": 10 * GIB, "clusters": 3, "admitted": True, "reason": "Admitted",
                          "message": "", "admittedDigest": "0123456789abcdef",
                          "admittedFootprint": {"manifestDigest": "aa" * 32, "bytes": 10 * GIB,
                                                "clusters": 3}}]}
    outcome = granted(PEAK - 1, model_cache(), status=before)
    assert row(outcome)["admittedFootprint"]["bytes"] == 10 * GIB
    assert outcome.status["projectedBytes"] == 30 * GIB


def test_the_row_reports_the_resolved_bytes_and_the_footprint_the_peak():
    outcome = granted(PEAK, model_cache())
    assert (row(outcome)["bytes"], row(outcome)["admittedFootprint"]["bytes"]) == (
        10 * GIB, PEAK_PER_CLUSTER)


def test_without_waves_the_projection_counts_the_resolved_commit_alone():
    assert granted(100 * GIB, model_cache(waves=None)).status["projectedBytes"] == 30 * GIB


def test_a_first_rollout_with_nothing_compared_projects_the_resolved_commit_alone():
    assert granted(100 * GIB, model_cache(rows=())).status["projectedBytes"] == 30 * GIB


def test_the_largest_unshared_commit_the_fleet_serves_makes_the_peak():
    cache = model_cache(rows=(compared(), compared(OTHER_COMMIT, size_gib=12, shared_gib=2)))
    assert granted(100 * GIB, cache).status["projectedBytes"] == 3 * 20 * GIB


def test_a_compared_commit_the_hub_no_longer_has_adds_nothing():
    cache = model_cache(rows=(compared(missing=True),))
    assert granted(100 * GIB, cache).status["projectedBytes"] == 30 * GIB


def test_an_existing_volume_with_waves_projects_nothing():
    cache = model_cache(source={"volume": {"claimName": "weights"}})
    assert granted(100 * GIB, cache).status["projectedBytes"] == 0


def test_the_peak_of_one_rollout_leaves_no_room_another_cache_could_take():
    rolling = model_cache()
    later = model_cache(waves=None, rows=(), name="later", created="2026-01-02T00:00:00Z")
    later["status"]["resolved"]["manifestDigest"] = "cc" * 32
    outcome = granted(PEAK + 29 * GIB, rolling, later)
    assert (row(outcome)["admitted"], row(outcome, "later")["reason"]) == (True, reasons.OverQuota)


@pytest.mark.parametrize("rows", [
    ({"commit": OLD_COMMIT, "bytes": "ten"},),
    ({"commit": "main", "bytes": 10 * GIB, "sharedBytes": 0},),
    "not a list",
], ids=["bytes not a number", "not a commit", "not a list"])
def test_a_malformed_compared_row_adds_nothing(rows):
    cache = model_cache()
    cache["status"]["resolved"]["compared"] = list(rows) if isinstance(rows, tuple) else rows
    assert granted(100 * GIB, cache).status["projectedBytes"] == 30 * GIB


def test_the_grant_status_with_a_rollouts_peak_is_valid_against_the_xrd():
    outcome = granted(PEAK, model_cache())
    assert_valid({**grant_xr(PEAK), "status": outcome.status})


def test_the_peak_is_decided_the_same_in_any_order():
    caches = [model_cache(), model_cache(waves=None, name="b", created="2026-01-01T00:00:00Z")]
    assert granted(200 * GIB, *caches).status == granted(200 * GIB, *reversed(caches)).status
