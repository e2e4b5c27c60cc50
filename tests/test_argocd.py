"""The Argo CD health checks, run as Lua (lupa) on the statuses the demo's rounds produce."""

from __future__ import annotations

import copy
from pathlib import Path

import lupa
import pytest
import yaml

from fleetcache import reasons
from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import node_tier as demo_node_tier
from fleetcache.devtools.simulation import ControlPlane, Provider, key_of
from fleetcache.functions import read
from tests.support.played_demo import played_demo

ROOT = Path(__file__).resolve().parents[1]
ARGOCD_CM = ROOT / "examples" / "argocd" / "argocd-cm.yaml"
KINDS = ("FleetCluster", "ModelCacheGrant", "ModelCache", "ModelCacheHydration", "ModelDeployment",
         "ModelReplica")


def lua_value(lua: lupa.LuaRuntime, value):
    if isinstance(value, dict):
        return lua.table_from({k: lua_value(lua, v) for k, v in value.items()})
    if isinstance(value, list):
        return lua.table_from([lua_value(lua, v) for v in value])
    return value


@pytest.fixture(scope="module")
def health():
    scripts = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    checks = {kind: lua.eval(f"function(obj)\n{scripts[f'resource.customizations.health.fleetcache.dev_{kind}']}\nend")
              for kind in KINDS}

    def check(obj: dict) -> tuple[str, str]:
        result = checks[obj["kind"]](lua_value(lua, obj))
        return result["status"], result["message"]

    return check


@pytest.fixture(scope="module")
def demo_rounds() -> list[dict]:
    """Every composite as the demo's rounds left it, in order."""
    played = played_demo()
    assert played.code == 0, played.output
    return list(played.composites)


def states(rounds: list[dict], kind: str) -> list[dict]:
    return [c for c in rounds if c["kind"] == kind]


def states_of(rounds: list[dict], kind: str, name: str) -> list[dict]:
    """One composite's states in order, by name (the acts share a control plane, so the
    last composite of a kind belongs to whichever act reconciled last)."""
    found = [c for c in rounds if c["kind"] == kind and c["metadata"]["name"] == name]
    assert len({c["metadata"].get("namespace") for c in found}) == 1, f"{kind} {name}"
    return found


def last_of(rounds: list[dict], kind: str, name: str) -> dict:
    return states_of(rounds, kind, name)[-1]


def first_of(rounds: list[dict], kind: str, name: str) -> dict:
    return states_of(rounds, kind, name)[0]


def with_phase(rounds: list[dict], kind: str, phase: str) -> dict:
    return next(c for c in rounds if c["kind"] == kind and c.get("status", {}).get("phase") == phase)


def test_argocd_cm_has_a_health_check_for_every_kind():
    data = yaml.safe_load(ARGOCD_CM.read_text())["data"]
    assert sorted(data) == sorted(f"resource.customizations.health.fleetcache.dev_{k}"
                                  for k in KINDS)


def test_a_ready_fleet_cluster_is_healthy(health, demo_rounds):
    status, message = health(last_of(demo_rounds, "FleetCluster", "gpu-east-1"))
    assert status == "Healthy" and "ProviderConfig" in message


def test_a_fleet_cluster_waiting_for_its_provider_config_is_progressing(health, demo_rounds):
    assert health(first_of(demo_rounds, "FleetCluster", "gpu-east-1"))[0] == "Progressing"


def test_a_model_cache_that_is_resolving_is_progressing(health, demo_rounds):
    resolving = next(c for c in states(demo_rounds, "ModelCache")
                     if read.condition_of(c, "Resolved").get("reason") == "Resolving")
    status, message = health(resolving)
    assert status == "Progressing" and "resolving" in message


def test_a_model_cache_partway_through_the_fleet_is_progressing_with_its_counts(
        health, demo_rounds):
    hydrating = next(c for c in states(demo_rounds, "ModelCache")
                     if c.get("status", {}).get("hydratingClusters"))
    status, message = health(hydrating)
    assert status == "Progressing" and "hydrating" in message


def test_the_model_cache_with_a_failed_cluster_ends_degraded_naming_it(health, demo_rounds):
    status, message = health(last_of(demo_rounds, "ModelCache", "tiny-chat"))
    assert status == "Degraded"
    assert "gpu-west-2 (DigestMismatch)" in message


def test_a_ready_hydration_is_healthy(health, demo_rounds):
    ready = with_phase(demo_rounds, "ModelCacheHydration", "Ready")
    assert health(ready) == ("Healthy", ready["status"]["message"])


@pytest.mark.parametrize("phase", ["Pending", "Hydrating"])
def test_a_hydration_on_its_way_is_progressing_with_its_message(health, demo_rounds, phase):
    hydration = with_phase(demo_rounds, "ModelCacheHydration", phase)
    assert health(hydration) == ("Progressing", hydration["status"]["message"])


def test_the_failed_hydration_is_degraded_with_its_reason_and_remedy(health, demo_rounds):
    failed = with_phase(demo_rounds, "ModelCacheHydration", "Failed")
    status, message = health(failed)
    assert status == "Degraded"
    assert message.startswith("DigestMismatch: ") and "Check the mirror" in message


def test_a_model_deployment_with_every_replica_ready_is_healthy(health, demo_rounds):
    status, message = health(last_of(demo_rounds, "ModelDeployment", "tiny-chat"))
    assert status == "Healthy"
    assert message == "6/6 replicas ready (cache 5, source 1)"


def test_a_model_deployment_coming_up_is_progressing(health, demo_rounds):
    assert health(first_of(demo_rounds, "ModelDeployment", "tiny-chat"))[0] == "Progressing"


def test_a_ready_replica_is_healthy_and_a_pending_one_progressing(health, demo_rounds):
    assert health(with_phase(demo_rounds, "ModelReplica", "Ready"))[0] == "Healthy"
    assert health(with_phase(demo_rounds, "ModelReplica", "Pending"))[0] == "Progressing"


def test_a_failed_replica_is_degraded_with_its_message(health, demo_rounds):
    failed = copy.deepcopy(with_phase(demo_rounds, "ModelReplica", "Ready"))
    failed["status"].update(phase="Failed", reason="HydrationFailed", message="no cache here")
    assert health(failed) == ("Degraded", "no cache here")


def test_a_fleet_cluster_with_low_capacity_is_degraded_with_its_message(health, demo_rounds):
    cluster = copy.deepcopy(last_of(demo_rounds, "FleetCluster", "gpu-east-1"))
    cluster["status"]["conditions"] = [
        c for c in cluster["status"]["conditions"] if c["type"] != "CapacityLow"] + [
        {"type": "CapacityLow", "status": "True", "reason": "CapacityLow", "message": "92% used"}]
    assert health(cluster) == ("Degraded", "92% used")


def test_a_model_cache_short_only_by_lapsed_copies_is_healthy(health, demo_rounds):
    lapsed = last_of(demo_rounds, "ModelCache", "weekly-chat")
    assert read.condition_of(lapsed, "Lapsed")["status"] == "True"
    assert health(lapsed) == ("Healthy", read.condition_of(lapsed, "Lapsed")["message"])


def test_a_model_cache_short_by_an_eviction_it_did_not_lapse_into_is_not_healthy(health,
                                                                                 demo_rounds):
    evicted = last_of(demo_rounds, "ModelCache", "stale-chat")
    assert health(evicted)[0] == "Progressing"


def test_an_evicted_hydration_is_suspended_not_degraded(health, demo_rounds):
    evicted = with_phase(demo_rounds, "ModelCacheHydration", "Evicted")
    assert health(evicted) == ("Suspended", evicted["status"]["message"])


def test_a_hydration_waiting_for_capacity_is_degraded_with_its_reason(health, demo_rounds):
    waiting = copy.deepcopy(with_phase(demo_rounds, "ModelCacheHydration", "Ready"))
    waiting["status"].update(phase="Pending", reason="CapacityLow", message="needs 3 GiB")
    assert health(waiting) == ("Degraded", "CapacityLow: needs 3 GiB")


def test_a_grant_within_its_budget_is_healthy_with_its_figures(health, demo_rounds):
    grant = last_of(demo_rounds, "ModelCacheGrant", "demo")
    status, message = health(grant)
    assert status == "Healthy"
    assert message.startswith(read.condition_of(grant, "OverQuota")["message"])
    assert message.endswith(f"{grant['status']['cachesSummary']} caches admitted")


def test_a_grant_that_cannot_count_its_usage_yet_is_progressing(health, demo_rounds):
    counting = next(g for g in states(demo_rounds, "ModelCacheGrant")
                    if read.condition_of(g, "OverQuota").get("status") == "Unknown")
    assert health(counting) == ("Progressing", read.condition_of(counting, "OverQuota")["message"])


def test_a_grant_over_its_budget_is_degraded_with_the_numbers(health, demo_rounds):
    grant = copy.deepcopy(last_of(demo_rounds, "ModelCacheGrant", "demo"))
    grant["status"]["conditions"] = [
        c for c in grant["status"]["conditions"] if c["type"] != "OverQuota"] + [
        {"type": "OverQuota", "status": "True", "reason": "OverQuota",
         "message": "hold 5.0GiB, over the budget of 4.0GiB"}]
    assert health(grant) == ("Degraded", "hold 5.0GiB, over the budget of 4.0GiB")


def test_a_composite_crossplane_cannot_sync_is_degraded_with_crossplanes_message(health,
                                                                                demo_rounds):
    cache = copy.deepcopy(last_of(demo_rounds, "ModelCache", "tiny-chat"))
    cache["status"]["conditions"] = [
        c for c in cache["status"]["conditions"] if c["type"] != "Synced"] + [
        {"type": "Synced", "status": "False", "reason": "ReconcileError",
         "message": "spec.placement: set exactly one"}]
    assert health(cache) == ("Degraded", "spec.placement: set exactly one")


def after_a_fatal_result(composite: dict) -> dict:
    """`composite` as the control plane leaves it once its function answers with a fatal
    result (Crossplane's rule: Synced=False, the step's unreported conditions Unknown)."""
    kind, name = composite["kind"], composite["metadata"]["name"]

    def refusing(xr, _composition, _observed, _required) -> rendering.Rendered:
        return rendering.Rendered(composite=xr, results=[{
            "severity": "SEVERITY_FATAL", "step": "compose",
            "message": f"{kind} {name}: spec.placement must set exactly one"}])

    control = ControlPlane(refusing, {kind: {}}, {}, Provider({}, list))
    control.xrs[key_of(composite)] = copy.deepcopy(composite)
    control.reconcile(key_of(composite))
    return control.xrs[key_of(composite)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_healthy_composite_whose_function_turns_fatal_is_degraded_with_crossplanes_message(
        health, demo_rounds, kind):
    """Ready and the status fields stay as they were: only Synced tells."""
    healthy = next(c for c in reversed(states(demo_rounds, kind)) if health(c)[0] == "Healthy")
    failed = after_a_fatal_result(healthy)
    synced = read.condition_of(failed, "Synced")["message"]
    assert "returned a fatal result" in synced
    assert health(failed) == ("Degraded", synced)


def test_a_composite_without_status_yet_is_progressing(health):
    for kind in KINDS:
        status, _ = health({"apiVersion": "fleetcache.dev/v1alpha1", "kind": kind,
                            "metadata": {"name": "new"}})
        assert status == "Progressing"


# --- the node tier act's composites (fleetcache.demo_node_tier), on the same control plane --


def test_a_fleet_cluster_with_a_node_cache_is_healthy_with_its_node_capacity_reported(
        health, demo_rounds):
    cluster = last_of(demo_rounds, "FleetCluster", demo_node_tier.CHURN_CLUSTER)
    assert cluster["status"]["nodeCache"]["summary"]
    status, message = health(cluster)
    assert status == "Healthy" and "ProviderConfig" in message


def node_caches(rounds: list[dict]) -> list[dict]:
    """The node-tier act's ModelCache, every state in order."""
    return states_of(rounds, "ModelCache", demo_node_tier.CACHE)


def node_hydrations(rounds: list[dict]) -> list[dict]:
    """The node-tier act's hydrations, every state in order."""
    return [c for c in states(rounds, "ModelCacheHydration")
            if c["spec"]["clusterName"] in demo_node_tier.CLUSTERS]


def volume_ready_with_nodes(rounds: list[dict], **node_tier) -> dict:
    """A node-tier hydration whose volume is Ready, its status.nodeTier replaced."""
    hydration = copy.deepcopy(node_hydrations(rounds)[-1])
    assert hydration["status"]["phase"] == "Ready"
    hydration["status"]["nodeTier"] = node_tier
    return hydration


def test_a_model_cache_with_every_node_warm_is_healthy_with_the_node_count(health,
                                                                           demo_rounds):
    cache = node_caches(demo_rounds)[-1]
    tier = cache["status"]["nodeTier"]
    assert tier["readyNodes"] == tier["desiredNodes"] == 4
    assert health(cache) == ("Healthy", "2/2 clusters ready, nodes 4/4 warm")


def test_a_model_cache_whose_volumes_are_ready_and_nodes_warming_is_progressing(health,
                                                                                demo_rounds):
    warming = [c for c in node_caches(demo_rounds)
               if read.condition_of(c, "Available").get("status") == "True"
               and c["status"]["nodeTier"]["readyNodes"] < c["status"]["nodeTier"]["desiredNodes"]]
    assert warming, "the demo's node tier warms after its volumes are Ready"
    for cache in warming:  # which counts a run passes through depends on the agents' timing
        tier = cache["status"]["nodeTier"]
        assert health(cache) == ("Progressing", f"2/2 clusters ready, nodes {tier['readyNodes']}/"
                                                f"{tier['desiredNodes']} warm")


def test_a_model_cache_whose_nodes_failed_is_degraded_naming_the_first_failure(health,
                                                                               demo_rounds):
    cache = copy.deepcopy(node_caches(demo_rounds)[-1])
    message = ("node copies failed on gpu-nodes-a (1 of 2 nodes: InsufficientCapacity). "
               + reasons.remedy("InsufficientCapacity"))
    cache["status"]["nodeTier"].update(readyNodes=3, failedNodes=1, readyClusters=1)
    cache["status"]["conditions"] = [
        c for c in cache["status"]["conditions"] if c["type"] != "Degraded"] + [
        {"type": "Degraded", "status": "True", "reason": "NodeTierDegraded", "message": message}]
    assert health(cache) == ("Degraded", message)


def test_a_hydration_whose_nodes_are_warm_is_healthy_with_the_node_count(health, demo_rounds):
    for cluster in demo_node_tier.CLUSTERS:
        hydration = next(c for c in reversed(node_hydrations(demo_rounds))
                         if c["spec"]["clusterName"] == cluster)
        assert hydration["status"]["nodeTier"]["phase"] == "Ready"
        assert health(hydration) == ("Healthy",
                                     f"{hydration['status']['message']}; nodes 2/2 warm")


def test_a_hydration_whose_volume_is_ready_and_nodes_warming_is_progressing(health,
                                                                            demo_rounds):
    warming = [c for c in node_hydrations(demo_rounds)
               if c["status"]["nodeTier"]["phase"] == "Warming"]
    assert {c["status"]["phase"] for c in warming} == {"Ready"}
    for hydration in warming:  # which counts a run passes through depends on the agents' timing
        tier = hydration["status"]["nodeTier"]
        assert health(hydration) == ("Progressing", f"nodes {tier['readyNodes']}/{tier['desiredNodes']} warm")


def test_a_hydration_waiting_for_its_warmers_to_report_is_progressing(health, demo_rounds):
    waiting = next(c for c in node_hydrations(demo_rounds)
                   if c["status"]["phase"] == "Ready"
                   and c["status"]["nodeTier"]["reason"] == "AwaitingPrerequisites")
    tier = waiting["status"]["nodeTier"]
    assert health(waiting) == ("Progressing", f"AwaitingPrerequisites: {tier['message']}")


def test_a_node_tier_hydration_whose_volume_is_hydrating_follows_the_volume(health,
                                                                            demo_rounds):
    hydrating = next(c for c in node_hydrations(demo_rounds)
                     if c["status"]["phase"] == "Hydrating")
    assert hydrating["status"]["nodeTier"]["reason"] == "AwaitingVolumeTier"
    assert health(hydrating) == ("Progressing", hydrating["status"]["message"])


@pytest.mark.parametrize("phase, reason", [
    ("Degraded", "NodeTierDegraded"),           # some nodes failed, others warm
    ("Failed", "NodeCacheNotDedicated"),        # every node failed: the first failure's reason
])
def test_a_hydration_with_failed_nodes_is_degraded_naming_the_first_failure(
        health, demo_rounds, phase, reason):
    message = ("1/2 nodes on cluster gpu-nodes-a hold 8f1cb7796f, 0 copying or waiting for a "
               "slot, 1 failed, 0 not started; first failure on gpu-2: NodeCacheNotDedicated "
               "(/mnt/nvme0 is not a filesystem of its own)")
    hydration = volume_ready_with_nodes(
        demo_rounds, phase=phase, reason=reason, message=message, desiredNodes=2,
        readyNodes=1, failedNodes=1,
        firstFailure={"node": "gpu-2", "reason": "NodeCacheNotDedicated"})
    assert health(hydration) == ("Degraded", f"{reason}: {message}")


def test_a_hydration_whose_nodes_wait_for_room_is_degraded_as_capacity_low_is(health,
                                                                              demo_rounds):
    message = "FleetCluster gpu-nodes-a has no room for it under spec.nodeCache.highWatermark"
    hydration = volume_ready_with_nodes(demo_rounds, phase="Pending", reason="NodeCapacityLow",
                                        message=message)
    assert health(hydration) == ("Degraded", f"NodeCapacityLow: {message}")


@pytest.mark.parametrize("reason", ["VolumeNotShared", "InvalidSpec"])
def test_a_hydration_whose_spec_cannot_have_node_copies_is_degraded(health, demo_rounds,
                                                                    reason):
    hydration = volume_ready_with_nodes(demo_rounds, phase="Pending", reason=reason,
                                        message="fix the cache")
    assert health(hydration) == ("Degraded", f"{reason}: fix the cache")


def test_a_hydration_evicted_from_its_nodes_is_healthy_as_its_volume_serves(health,
                                                                            demo_rounds):
    message = "cluster gpu-nodes-a evicted inference/edge-chat from its nodes: the volume " \
              "keeps serving"
    hydration = volume_ready_with_nodes(demo_rounds, phase="Evicted", reason="Evicted",
                                        message=message)
    assert health(hydration) == ("Healthy", f"Evicted: {message}")


@pytest.mark.parametrize("reason", ["NodeTierNotConfigured", "NodeCacheModeUnsupported",
                                    "NoEligibleNodes"])
def test_a_hydration_on_a_cluster_whose_nodes_hold_no_copies_is_healthy_saying_so(
        health, demo_rounds, reason):
    hydration = volume_ready_with_nodes(demo_rounds, phase="Pending", reason=reason,
                                        message="this cache stays on the cluster's volume")
    assert health(hydration) == ("Healthy",
                                 f"{reason}: this cache stays on the cluster's volume")


def test_a_hydration_whose_volume_fetches_nothing_new_is_healthy_without_node_copies(
        health, demo_rounds):
    message = "the volume composes nothing new (the hydration is Ready, Lapsed)"
    hydration = volume_ready_with_nodes(demo_rounds, phase="Pending",
                                        reason="AwaitingVolumeTier", message=message)
    assert health(hydration) == ("Healthy", f"AwaitingVolumeTier: {message}")


def test_a_fleet_cluster_whose_node_caches_are_low_on_capacity_is_degraded(health,
                                                                           demo_rounds):
    cluster = copy.deepcopy(last_of(demo_rounds, "FleetCluster", demo_node_tier.CHURN_CLUSTER))
    cluster["status"]["conditions"] = [
        c for c in cluster["status"]["conditions"] if c["type"] != "NodeCapacityLow"] + [
        {"type": "NodeCapacityLow", "status": "True", "reason": "NodeCapacityLow",
         "message": "the node caches need 90.0GiB of 100.0GiB per node"}]
    assert health(cluster) == ("Degraded", "the node caches need 90.0GiB of 100.0GiB per node")


def test_a_replica_reading_the_node_copy_is_progressing_then_healthy(health, demo_rounds):
    on_nodes = [c for c in states(demo_rounds, "ModelReplica") if c["spec"]["delivery"] == "Node"]
    assert {c["metadata"]["namespace"] for c in on_nodes} == {demo_node_tier.NAMESPACE}
    by_phase = {phase: {health(c)[0] for c in on_nodes if c["status"]["phase"] == phase}
                for phase in ("Pending", "Ready")}
    assert by_phase == {"Pending": {"Progressing"}, "Ready": {"Healthy"}}


def test_the_node_tier_deployment_is_progressing_then_healthy_counting_its_node_replicas(
        health, demo_rounds):
    deployment = states_of(demo_rounds, "ModelDeployment", demo_node_tier.CACHE)
    assert health(deployment[0])[0] == "Progressing"
    assert health(deployment[-1]) == ("Healthy", "2/2 replicas ready (node 2, cache 0, source 0)")


def test_the_applicationset_rolls_out_region_by_region_in_waves():
    appset = yaml.safe_load((ROOT / "examples/argocd/applicationset-modelcaches.yaml").read_text())
    regions = [e["region"] for e in appset["spec"]["generators"][0]["list"]["elements"]]
    steps = appset["spec"]["strategy"]["rollingSync"]["steps"]
    assert appset["spec"]["strategy"]["type"] == "RollingSync"
    assert len(steps) == len(regions) == 2
    assert appset["spec"]["template"]["metadata"]["labels"]["fleetcache.dev/wave"] == "{{.wave}}"


# --- a ModelCache rolling out in waves (status.rollout, issue 21) ---------------------------


def rolling_out(cache: dict, phase: str, message: str = "", summary: str = "") -> dict:
    """`cache` with status.rollout in `phase`, as compose-model-cache writes it."""
    cache = copy.deepcopy(cache)
    cache["status"]["rollout"] = {"commit": "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9",
                                  "phase": phase, "wave": "canary", "summary": summary,
                                  "message": message}
    return cache


def healthy_cache(health, rounds: list[dict]) -> dict:
    return next(c for c in reversed(states(rounds, "ModelCache")) if health(c)[0] == "Healthy"
                and read.condition_of(c, "Available").get("status") == "True")


def test_a_rollout_paused_at_a_wave_is_suspended_with_its_message(health, demo_rounds):
    paused = rolling_out(healthy_cache(health, demo_rounds), "Paused",
                         "paused at canary: set spec.rollout.promote to canary")
    assert health(paused) == ("Suspended", "paused at canary: set spec.rollout.promote to canary")


@pytest.mark.parametrize("phase", ["Halted", "RolledBack"])
def test_a_rollout_stopped_by_a_failure_is_degraded_with_its_message(health, demo_rounds, phase):
    message = "wave canary failed: gpu-east-1 (DigestMismatch)"
    stopped = rolling_out(healthy_cache(health, demo_rounds), phase, message)
    assert health(stopped) == ("Degraded", message)


def test_a_stopped_rollout_says_its_summary_when_it_has_no_message(health, demo_rounds):
    halted = rolling_out(healthy_cache(health, demo_rounds), "Halted", summary="halted at canary")
    assert health(halted) == ("Degraded", "halted at canary")


def test_a_rollout_in_progress_is_progressing_with_the_rollout_message(health, demo_rounds):
    progressing = rolling_out(healthy_cache(health, demo_rounds), "Progressing",
                              "wave early: waiting for gpu-west-2", "wave 2/4")
    assert health(progressing) == ("Progressing", "wave early: waiting for gpu-west-2")


def test_a_rollout_in_progress_on_a_degraded_cache_stays_degraded(health, demo_rounds):
    degraded = last_of(demo_rounds, "ModelCache", "tiny-chat")
    assert health(rolling_out(degraded, "Progressing", "wave 2/4")) == health(degraded)


def test_a_complete_rollout_leaves_the_health_to_the_caches_own_rules(health, demo_rounds):
    for cache in (healthy_cache(health, demo_rounds), last_of(demo_rounds, "ModelCache", "tiny-chat")):
        assert health(rolling_out(cache, "Complete", "complete", "complete")) == health(cache)
