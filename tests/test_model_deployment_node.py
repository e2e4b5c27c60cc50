"""compose-model-deployment, Node delivery: replicas read their GPU node's own copy.

Every row of the extended delivery table (Node tried first on a cluster whose cache is on
tier Node, its volume Ready and a node warm on the commit, unless policy Never; else the
volume, else the table as before), policies Never/Prefer/Require, switchToCache over the
Volume -> Node roll, a Node replica kept through a commit update, the Require revert carried
from the replica into its spec, ranking, status, the example, and hostile node tier input.
Fixtures follow the round-three contract: hydration spec.tier and status.nodeTier.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from fleetcache import messages
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_deployment as composer
from fleetcache.functions.node_tier.warmer_names import VOLUME_MOUNT
from tests.support import xrd
from tests.support.deployments import CACHE, NAMESPACE, cache_required, cache_row, deployment
from tests.support.fleet import COMMIT, DIGEST, fleet_cluster

OLD_COMMIT = "0" * 40
NEW_COMMIT = "1" * 40
LABEL_KEY = "node-cache.fleetcache.dev/" + hashlib.sha256(
    f"{NAMESPACE}/{CACHE}".encode()).hexdigest()[:16]
CLAIM = f"{CACHE}-node-1a2b3c4d"
FLEET = [fleet_cluster("gpu-a"), fleet_cluster("gpu-b"), fleet_cluster("gpu-c")]
ON_GPU_A = {"placement": {"clusterNames": ["gpu-a"]}}


def node_tier(phase: str = "Ready", ready: int = 3, desired: int = 3, commit: str = COMMIT,
              **extra: object) -> dict:
    """A hydration's status.nodeTier as compose-model-cache-hydration publishes it."""
    tier = {"phase": phase, "commit": commit, "claimName": CLAIM, "labelKey": LABEL_KEY,
            "desiredNodes": desired, "readyNodes": ready, "downloadingNodes": 0,
            "failedNodes": 0, "pendingNodes": 0, "reason": "", "message": ""}
    tier.update(extra)
    return tier


def on_tier_node(cache: dict, cluster: str, tier: dict | None) -> dict:
    """`cache` (what cache_required gives) with `cluster`'s hydration on tier Node."""
    for hydration in cache[composer.HYDRATIONS_KEY]:
        if hydration["spec"]["clusterName"] == cluster:
            hydration["spec"]["tier"] = "Node"
            if tier is not None:
                hydration["status"]["nodeTier"] = tier
    return cache


def node_cache(*rows: dict, tiers: dict[str, dict | None], commit: str = COMMIT) -> dict:
    cache = cache_required(*rows, commit=commit)
    for cluster, tier in tiers.items():
        on_tier_node(cache, cluster, tier)
    return cache


def compose(xr: dict, cache: dict, observed: dict | None = None,
            clusters: list[dict] | None = None) -> protocol.Outcome:
    return composer.compose(protocol.Request(
        composite=xr, observed=observed or {},
        required={composer.FLEET_CLUSTERS_KEY: FLEET if clusters is None else clusters,
                  **cache}))


def replicas(outcome: protocol.Outcome) -> dict[int, dict]:
    return {r["spec"]["replica"]: r for r, _ in outcome.desired.values()}


def observe(outcome: protocol.Outcome, status: dict | None = None) -> dict:
    """The composed ModelReplicas as observed next time, Ready, with `status` merged in."""
    out = {}
    for key, (desired, _) in outcome.desired.items():
        observed = copy.deepcopy(desired)
        observed["status"] = {"conditions": [{"type": "Ready", "status": "True"}],
                              **(status or {})}
        out[key] = observed
    return out


def only(outcome: protocol.Outcome) -> dict:
    return replicas(outcome)[0]["spec"]


# --- the extended delivery table ----------------------------------------------------------

TABLE = [
    # (volume phase, node tier (None: tier Volume there), node policy, delivery, reason)
    ("Ready", node_tier(), "Prefer", "Node", "NodeReady"),
    ("Ready", node_tier(), "Require", "Node", "NodeReady"),
    ("Ready", node_tier(), "Never", "Cache", "NodeDeliveryNever"),
    ("Ready", node_tier("Warming", ready=1, desired=5), "Prefer", "Node", "NodeReady"),
    ("Ready", node_tier("Degraded", ready=2, desired=4, failedNodes=2), "Prefer", "Node",
     "NodeReady"),
    ("Ready", node_tier("Warming", ready=0, desired=5), "Prefer", "Cache", "NodeTierWarming"),
    ("Ready", node_tier("Pending", ready=0, desired=0), "Prefer", "Cache", "NodeTierWarming"),
    ("Ready", node_tier(commit=OLD_COMMIT), "Prefer", "Cache", "NodeTierWarming"),
    ("Ready", node_tier("Pending", ready=0, desired=0, claimName="", labelKey="",
                        reason="NodeTierNotConfigured"), "Prefer", "Cache",
     "NodeTierUnavailable"),
    ("Ready", node_tier("Pending", ready=0, desired=0, reason="NoEligibleNodes"), "Require",
     "Cache", "NodeTierUnavailable"),
    ("Ready", node_tier("Failed", ready=0, failedNodes=3), "Prefer", "Cache",
     "NodeTierUnavailable"),
    ("Ready", node_tier("Evicted", ready=0, desired=3), "Prefer", "Cache",
     "NodeTierUnavailable"),
    ("Ready", None, "Prefer", "Cache", "CacheReady"),
    ("Hydrating", node_tier(), "Prefer", "Source", "Hydrating"),
    ("Failed", node_tier(), "Prefer", "Source", "HydrationFailed"),
]


@pytest.mark.parametrize("volume,tier,policy,delivery,reason", TABLE)
def test_delivery_follows_the_extended_table(volume, tier, policy, delivery, reason):
    cache = node_cache(cache_row("gpu-a", volume), tiers={"gpu-a": tier} if tier else {})
    outcome = compose(deployment(delivery={"node": {"policy": policy}}, **ON_GPU_A), cache)
    assert outcome.status["placements"] == [
        {"replica": 0, "cluster": "gpu-a", "delivery": delivery, "reason": reason,
         "commit": COMMIT}]
    spec = only(outcome)
    assert spec["delivery"] == delivery
    assert ("nodeCache" in spec) == (delivery == "Node")
    assert spec.get("deliveryReason", reason).startswith(reason)


def test_a_cluster_outside_the_caches_targets_loads_from_the_source():
    cache = node_cache(cache_row("gpu-b", "Ready"), tiers={"gpu-b": node_tier()})
    outcome = compose(deployment(**ON_GPU_A), cache)
    assert outcome.status["placements"][0]["reason"] == "NotACacheTarget"


def test_a_node_replica_carries_the_node_copy_and_the_volume_it_falls_back_to():
    spec = only(compose(deployment(**ON_GPU_A), node_cache(
        cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier(ready=2, desired=5)})))
    assert spec["nodeCache"] == {"claimName": CLAIM, "labelKey": LABEL_KEY, "commit": COMMIT,
                                 "manifestDigest": DIGEST, "policy": "Prefer",
                                 "requireTimeout": "15m"}
    assert spec["cache"] == {
        "modelCacheName": CACHE, "volumeName": naming.cache_volume_name(CACHE),
        "mountPath": VOLUME_MOUNT, "commit": COMMIT,
        "snapshotPath": f"{VOLUME_MOUNT}/hub/models--Qwen--Qwen3-0.6B/"
                        f"snapshots/{COMMIT}"}
    assert spec["model"] == {"repo": "Qwen/Qwen3-0.6B", "revision": "main", "commit": COMMIT}
    assert spec["deliveryReason"] == f"NodeReady: 2/5 nodes warm on {COMMIT[:12]}"


def test_a_volume_replica_says_how_far_the_nodes_are():
    spec = only(compose(deployment(**ON_GPU_A), node_cache(
        cache_row("gpu-a", "Ready"),
        tiers={"gpu-a": node_tier("Warming", ready=0, desired=5, downloadingNodes=2)})))
    assert (spec["delivery"], spec["deliveryReason"]) == (
        "Cache", f"NodeTierWarming: 0/5 nodes warm on {COMMIT[:12]}; using the cluster volume")


def test_a_node_tier_that_does_not_serve_says_the_hydrations_reason():
    spec = only(compose(deployment(**ON_GPU_A), node_cache(cache_row("gpu-a", "Ready"), tiers={
        "gpu-a": node_tier("Pending", ready=0, desired=0, claimName="",
                           reason="NodeTierNotConfigured",
                           message="FleetCluster gpu-a sets no spec.nodeCache")})))
    assert spec["deliveryReason"] == (
        "NodeTierUnavailable: node tier Pending (NodeTierNotConfigured): FleetCluster gpu-a "
        "sets no spec.nodeCache; using the cluster volume")


def test_the_require_timeout_and_policy_reach_the_replica():
    xr = deployment(delivery={"node": {"policy": "Require", "requireTimeout": "30m"}}, **ON_GPU_A)
    spec = only(compose(xr, node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()})))
    assert (spec["nodeCache"]["policy"], spec["nodeCache"]["requireTimeout"]) == ("Require", "30m")


def test_without_a_manifest_digest_a_ready_volume_is_used_as_before():
    cache = node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()})
    cache[composer.MODEL_CACHE_KEY][0]["status"]["resolved"]["manifestDigest"] = "not-a-digest"
    cache[composer.HYDRATIONS_KEY][0]["spec"]["manifestDigest"] = "not-a-digest"
    assert compose(deployment(**ON_GPU_A), cache).status["placements"][0]["reason"] == \
        "CacheReady"


# --- rolls: switchToCache, commit updates, eviction -----------------------------------------


def warming_then_warm(policy: dict, observed_from_start: bool = True) -> tuple[dict, dict]:
    """A replica composed while the nodes warm (volume), then again once a node is warm."""
    xr = deployment(delivery=policy, **ON_GPU_A)
    first = compose(xr, node_cache(cache_row("gpu-a", "Ready"),
                                   tiers={"gpu-a": node_tier("Warming", ready=0)}))
    again = compose(xr, node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()}),
                    observe(first) if observed_from_start else None)
    return only(first), only(again)


def test_on_ready_rolls_a_volume_replica_onto_the_node_copy_once():
    before, after = warming_then_warm({})
    assert (before["delivery"], after["delivery"]) == ("Cache", "Node")


def test_switch_to_cache_never_keeps_a_running_volume_replica_on_the_volume():
    before, after = warming_then_warm({"switchToCache": "Never"})
    assert (before["delivery"], after["delivery"]) == ("Cache", "Cache")
    assert after["deliveryReason"].startswith("SwitchToNodeNever: 3/3 nodes warm")


def test_switch_to_cache_never_still_gives_new_replicas_the_node_copy():
    _, new = warming_then_warm({"switchToCache": "Never"}, observed_from_start=False)
    assert new["delivery"] == "Node"


def test_a_node_replica_stays_on_node_while_the_nodes_warm_a_new_commit():
    """The volume is Ready on the new commit, no node holds it yet: one roll (to the new
    commit, still Node; the pod reads the volume on a node without the copy), not two."""
    xr = deployment(**ON_GPU_A)
    old = compose(xr, node_cache(cache_row("gpu-a", "Ready"),
                                 tiers={"gpu-a": node_tier(commit=OLD_COMMIT)},
                                 commit=OLD_COMMIT))
    assert only(old)["delivery"] == "Node"
    new = compose(xr, node_cache(cache_row("gpu-a", "Ready"), tiers={
        "gpu-a": node_tier("Warming", ready=0, commit=COMMIT)}), observe(old))
    spec = only(new)
    assert (spec["delivery"], spec["nodeCache"]["commit"], spec["model"]["commit"]) == (
        "Node", COMMIT, COMMIT)
    assert spec["deliveryReason"].startswith("NodeTierWarming: 0/3 nodes warm")
    assert "read the cluster volume" in spec["deliveryReason"]


def test_a_node_replica_keeps_its_spec_while_the_volume_hydrates_a_new_commit():
    xr = deployment(**ON_GPU_A)
    old = compose(xr, node_cache(cache_row("gpu-a", "Ready"),
                                 tiers={"gpu-a": node_tier(commit=OLD_COMMIT)},
                                 commit=OLD_COMMIT))
    hydrating = node_cache(cache_row("gpu-a", "Hydrating", servingCommit=OLD_COMMIT),
                           tiers={"gpu-a": node_tier(commit=OLD_COMMIT)})
    outcome = compose(xr, hydrating, observe(old))
    before, after = only(old), only(outcome)
    assert {k: v for k, v in after.items() if k != "deliveryReason"} == \
        {k: v for k, v in before.items() if k != "deliveryReason"}
    assert outcome.status["placements"][0]["reason"] == "PreviousCommitWhileHydrating"
    assert outcome.status["replicas"]["previousCommit"] == 1


def test_policy_never_moves_a_node_replica_to_the_volume_while_the_volume_hydrates():
    old = compose(deployment(**ON_GPU_A), node_cache(
        cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier(commit=OLD_COMMIT)},
        commit=OLD_COMMIT))
    hydrating = node_cache(cache_row("gpu-a", "Hydrating", servingCommit=OLD_COMMIT),
                           tiers={"gpu-a": node_tier(commit=OLD_COMMIT)})
    spec = only(compose(deployment(delivery={"node": {"policy": "Never"}}, **ON_GPU_A),
                        hydrating, observe(old)))
    assert (spec["delivery"], spec["cache"]["commit"]) == ("Cache", OLD_COMMIT)


def test_a_new_replica_on_a_hydrating_cluster_follows_the_table():
    hydrating = node_cache(cache_row("gpu-a", "Hydrating", servingCommit=OLD_COMMIT),
                           tiers={"gpu-a": node_tier(commit=OLD_COMMIT)})
    spec = only(compose(deployment(**ON_GPU_A), hydrating))
    assert (spec["delivery"], spec["cache"]["commit"]) == ("Cache", OLD_COMMIT)


def test_an_evicted_node_tier_moves_node_replicas_back_to_the_volume():
    xr = deployment(**ON_GPU_A)
    warm = compose(xr, node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()}))
    evicted = compose(xr, node_cache(cache_row("gpu-a", "Ready"), tiers={
        "gpu-a": node_tier("Evicted", ready=0, reason="Evicted")}), observe(warm))
    assert (only(warm)["delivery"], only(evicted)["delivery"]) == ("Node", "Cache")


def test_policy_never_moves_node_replicas_back_to_the_volume():
    warm = compose(deployment(**ON_GPU_A), node_cache(cache_row("gpu-a", "Ready"),
                                                      tiers={"gpu-a": node_tier()}))
    never = compose(deployment(delivery={"node": {"policy": "Never"}}, **ON_GPU_A),
                    node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()}),
                    observe(warm))
    assert only(never)["delivery"] == "Cache"


# --- Require, reverted once -------------------------------------------------------------------

REVERTED = "2026-12-03T10:15:00Z"


def require(observed_status: dict | None, policy: str = "Require") -> dict:
    xr = deployment(delivery={"node": {"policy": "Require"}}, **ON_GPU_A)
    cache = node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()})
    first = compose(xr, cache)
    later = deployment(delivery={"node": {"policy": policy}}, **ON_GPU_A)
    return only(compose(later, cache, observe(first, observed_status)))


def test_a_revert_the_replica_latched_is_carried_into_its_spec():
    spec = require({"nodeCache": {"revertedAt": REVERTED}})
    assert spec["nodeCache"]["revertedAt"] == REVERTED


def test_a_carried_revert_stays_in_the_spec():
    xr = deployment(delivery={"node": {"policy": "Require"}}, **ON_GPU_A)
    cache = node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()})
    first = compose(xr, cache)
    observed = observe(first)
    for replica in observed.values():
        replica["spec"]["nodeCache"]["revertedAt"] = REVERTED
    assert only(compose(xr, cache, observed))["nodeCache"]["revertedAt"] == REVERTED


def test_without_a_revert_the_spec_has_none():
    assert "revertedAt" not in require({"nodeCache": {"revertedAt": "not a time"}})
    assert "revertedAt" not in require({})


def test_under_prefer_a_revert_is_moot_and_dropped():
    assert "revertedAt" not in require({"nodeCache": {"revertedAt": REVERTED}}, "Prefer")


def test_a_replica_moved_to_another_cluster_starts_without_a_revert():
    xr = deployment(delivery={"node": {"policy": "Require"}},
                    placement={"clusterNames": ["gpu-b"]})
    cache = node_cache(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Ready"),
                       tiers={"gpu-a": node_tier(), "gpu-b": node_tier()})
    first = compose(deployment(delivery={"node": {"policy": "Require"}}, **ON_GPU_A), cache)
    moved = only(compose(xr, cache, observe(first, {"nodeCache": {"revertedAt": REVERTED}})))
    assert moved["clusterName"] == "gpu-b" and "revertedAt" not in moved["nodeCache"]


# --- ranking and status -----------------------------------------------------------------------


def test_new_replicas_rank_a_cluster_with_warm_nodes_before_a_ready_volume():
    cache = node_cache(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Ready"),
                       cache_row("gpu-c", "Ready"),
                       tiers={"gpu-a": node_tier("Warming", ready=0), "gpu-c": node_tier()})
    outcome = compose(deployment(placement={"clusterSelector": {}}), cache)
    assert outcome.status["placements"][0]["cluster"] == "gpu-c"


def test_status_counts_node_replicas_apart_from_the_volumes():
    cache = node_cache(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Ready"),
                       cache_row("gpu-c", "Hydrating"),
                       tiers={"gpu-a": node_tier(), "gpu-b": node_tier("Warming", ready=0)})
    outcome = compose(deployment(replicas=3, maxReplicasPerCluster=1,
                                 placement={"clusterSelector": {}}), cache)
    counts = outcome.status["replicas"]
    assert (counts["node"], counts["cache"], counts["source"]) == (1, 1, 1)


def test_a_cache_on_tier_volume_everywhere_reports_no_node_count():
    outcome = compose(deployment(**ON_GPU_A), cache_required(cache_row("gpu-a", "Ready")))
    assert "node" not in outcome.status["replicas"]


def test_status_and_replicas_are_valid_against_their_xrds():
    cache = node_cache(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Ready"),
                       cache_row("gpu-c", "Ready"),
                       tiers={"gpu-a": node_tier(), "gpu-b": node_tier("Failed", ready=0)})
    xr = deployment(replicas=3, maxReplicasPerCluster=1, placement={"clusterSelector": {}},
                    delivery={"node": {"policy": "Require", "requireTimeout": "1h"}})
    outcome = compose(xr, cache)
    assert {p["delivery"] for p in outcome.status["placements"]} == {"Node", "Cache"}
    with_status = copy.deepcopy(xr)
    with_status["status"] = outcome.status
    xrd.assert_valid(with_status)
    for replica in replicas(outcome).values():
        xrd.assert_valid(replica)


def test_the_node_example_is_valid_and_gives_node_replicas():
    example = xrd.load_yaml_docs(xrd.EXAMPLES / "modeldeployment-node.yaml")[0]
    xrd.assert_valid(example)
    xr = xrd.xrd_for(example).with_defaults(example)
    assert xr["spec"]["delivery"]["node"]["policy"] in ("Prefer", "Require")
    xr["metadata"]["namespace"] = NAMESPACE
    xr["spec"]["modelCacheRef"]["name"] = CACHE
    xr["spec"]["placement"] = {"clusterSelector": {}}
    cache = node_cache(cache_row("gpu-a", "Ready"), cache_row("gpu-b", "Ready"),
                       cache_row("gpu-c", "Ready"),
                       tiers={c: node_tier() for c in ("gpu-a", "gpu-b", "gpu-c")})
    outcome = compose(xr, cache)
    assert outcome.status["replicas"]["node"] == example["spec"]["replicas"]


# --- hostile node tier input -------------------------------------------------------------------

HOSTILE_TIERS = [
    "Ready",
    {"phase": ["Ready"], "readyNodes": "3"},
    node_tier(claimName="../../etc"),
    node_tier(claimName="x" * 300),
    node_tier(commit="c" * 200),
    node_tier(readyNodes=-4, desiredNodes="many"),
    node_tier(phase="Sideways"),
    node_tier("Failed", ready=0, reason="not a reason " * 40, message="m" * 20_000),
]


@pytest.mark.parametrize("tier", HOSTILE_TIERS, ids=range(len(HOSTILE_TIERS)))
def test_a_hostile_node_tier_never_reaches_a_pod_template(tier):
    outcome = compose(deployment(**ON_GPU_A),
                      node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": tier}))
    replica = replicas(outcome)[0]
    assert replica["spec"]["delivery"] == "Cache"
    assert len(replica["spec"]["deliveryReason"]) <= messages.MESSAGE_LIMIT
    xrd.assert_valid(replica)


def test_a_label_key_that_is_not_a_node_cache_label_places_anywhere_in_the_pool():
    spec = only(compose(deployment(**ON_GPU_A), node_cache(
        cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier(labelKey="kubernetes.io/hostname")})))
    assert (spec["delivery"], spec["nodeCache"]["labelKey"]) == ("Node", "")


@pytest.mark.parametrize("node", [{"policy": "Always"}, {"requireTimeout": "15s"},
                                  {"requireTimeout": 15}, "Prefer", {"policy": "Prefer", "x": 1}],
                         ids=["policy", "seconds", "number", "string", "unknown-field"])
def test_a_malformed_node_policy_is_an_input_error_naming_the_field(node):
    with pytest.raises(specs.InputError, match="spec.delivery.node"):
        compose(deployment(delivery={"node": node}, **ON_GPU_A),
                node_cache(cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier()}))


@pytest.mark.parametrize("node", ["junk", {"commit": OLD_COMMIT, "claimName": CLAIM,
                                           "manifestDigest": "short", "revertedAt": ["x"]}],
                         ids=["not-an-object", "bad-digest"])
def test_a_hostile_observed_node_replica_is_not_kept_on_its_old_commit(node):
    old = compose(deployment(**ON_GPU_A), node_cache(
        cache_row("gpu-a", "Ready"), tiers={"gpu-a": node_tier(commit=OLD_COMMIT)},
        commit=OLD_COMMIT))
    observed = observe(old, {"nodeCache": {"revertedAt": 7}})
    for replica in observed.values():
        replica["spec"]["nodeCache"] = node
    hydrating = node_cache(cache_row("gpu-a", "Hydrating", servingCommit=OLD_COMMIT),
                           tiers={"gpu-a": node_tier(commit=OLD_COMMIT)})
    replica = replicas(compose(deployment(**ON_GPU_A), hydrating, observed))[0]
    assert (replica["spec"]["delivery"], replica["spec"]["cache"]["commit"]) == (
        "Cache", OLD_COMMIT)
    xrd.assert_valid(replica)


def test_a_thousand_node_replicas_stay_far_under_the_response_limit():
    """Crossplane receives at most 4 MiB from a function (design/composers.md): a Node
    replica carries its node copy's few fields, not more."""
    fleet = [fleet_cluster(f"gpu-{i:03d}") for i in range(500)]
    rows = [cache_row(f"gpu-{i:03d}", "Ready") for i in range(500)]
    cache = node_cache(*rows, tiers={r["name"]: node_tier() for r in rows})
    outcome = compose(deployment(replicas=1000, maxReplicasPerCluster=2,
                                 placement={"clusterSelector": {}}), cache, clusters=fleet)
    assert outcome.status["replicas"]["node"] == 1000
    assert len(json.dumps([r for r, _ in outcome.desired.values()])) < 2 * 1024 * 1024
