"""The node tier (spec.tier Node): what compose-model-cache-hydration composes on the cluster
for it (functions/node_tier.py), the status it reads back from the warmer DaemonSet and the
per-node records, how it obeys the FleetCluster's node capacity decision, and the
ModelCache's rollup (functions/node_rollup.py). design/node-tier.md §3.1, §3.4, §3.7, §4.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from fleetcache import reasons
from fleetcache.apis import specs
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_cache
from fleetcache.functions.composers.model_cache_hydration import compose
from fleetcache.functions.node_tier import rollup, warmer_inputs, warmer_names, warmers
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from tests.support.builders import (
    CACHE,
    CLUSTER,
    COMMIT,
    DIGEST,
    GIB,
    NAMESPACE,
    cache_replica,
    fleet_cluster,
    hydration_request,
    hydration_xr,
    observe,
    pvc,
    with_status,
)
from tests.support.fleet import (
    condition,
    grant_admitting,
    hydrations,
    model_cache_xr,
    observed_hydration,
    with_resolved,
)
from tests.support.k8s import assert_valid_k8s, restricted_violations
from tests.support.xrd import assert_valid

NEW_COMMIT = "0" * 39 + "1"
KEY = f"{NAMESPACE}/{CACHE}"
NODE_CACHE = {"nodeSelector": {"matchLabels": {"gpu": "h100"}}, "path": "/mnt/nvme0",
              "capacityPerNode": "2Ti",
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                               "effect": "NoSchedule"}]}
READY_VOLUME = {"phase": "Ready", "resolved": {"commit": COMMIT, "manifestDigest": DIGEST},
                "servingRepo": "Qwen/Qwen3-0.6B", "servingCommit": COMMIT,
                "servingManifestDigest": DIGEST, "storedCommits": [COMMIT]}
# The pool of NODE_CACHE as a NodeSelector, written out by hand.
POOL = {"nodeSelectorTerms": [{"matchExpressions": [
    {"key": "gpu", "operator": "In", "values": ["h100"]},
    {"key": "fleetcache.dev/node-cache", "operator": "In", "values": ["enabled"]},
    {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
    {"key": "node-role.kubernetes.io/master", "operator": "DoesNotExist"}]}]}
POOL_HASH = hashlib.sha256(json.dumps(POOL, sort_keys=True, separators=(",", ":")).encode()
                           ).hexdigest()[:8]
PV_NAME = "fleetcache-node-" + hashlib.sha256(f"ml/qwen/{POOL_HASH}".encode()).hexdigest()[:16]
CLAIM = f"qwen-node-{POOL_HASH}"
LABEL_KEY = "node-cache.fleetcache.dev/" + hashlib.sha256(b"ml/qwen").hexdigest()[:16]
NO_REPLICAS: tuple = ()


def node_cluster(node_cache: dict | None = None, *, admitted=(KEY,), evicted=(),
                 decided: bool = True) -> dict:
    """A Ready FleetCluster with spec.nodeCache and its published status.nodeCache."""
    cluster = fleet_cluster(CLUSTER)
    cluster["spec"]["nodeCache"] = copy.deepcopy(NODE_CACHE if node_cache is None
                                                 else node_cache)
    if decided:
        cluster["status"]["nodeCache"] = {"admitted": list(admitted), "evicted": list(evicted),
                                          "waiting": []}
    return cluster


def node_xr(**status) -> dict:
    """A tier-Node hydration whose volume is Ready on COMMIT (latched), unless `status`."""
    return with_status(hydration_xr(tier="Node"), **(status or READY_VOLUME))


def run(xr: dict | None = None, *, cluster: object = None, observed: dict | None = None,
        replicas: list[dict] | None = NO_REPLICAS) -> protocol.Outcome:
    """The hydration composed on a node cluster; `replicas`: its ModelReplicas on the cluster
    (None: not fetched yet)."""
    return compose(hydration_request(node_xr() if xr is None else xr, observed=observed,
                                     cluster=node_cluster() if cluster is None else cluster,
                                     replicas=None if replicas is None else list(replicas)))


def node_keys(outcome: protocol.Outcome) -> set[str]:
    return {k for k in outcome.desired if k.startswith("node-")}


def manifest(outcome: protocol.Outcome, key: str) -> dict:
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]


def warmer_pod(outcome: protocol.Outcome) -> dict:
    return manifest(outcome, warmer_names.WARMER_KEY)["spec"]["template"]["spec"]


def daemonset(desired: int, ready: int) -> dict:
    return {"desiredNumberScheduled": desired, "numberReady": ready,
            "currentNumberScheduled": desired, "numberMisscheduled": 0}


def record(phase: str, commit: str = COMMIT, **more) -> str:
    return json.dumps({"phase": phase, "commit": commit, "bytesDone": 0,
                       "bytesTotal": 3 * GIB, "freeBytes": 500 * GIB, "reason": None,
                       "message": None, **more})


def tier_of(ds: dict | None, records: dict | None = None, xr: dict | None = None,
            cluster: object = None) -> dict:
    """status.nodeTier once the node objects exist and report `ds` and `records`."""
    first = run(xr, cluster=cluster)
    states = {warmer_names.WARMER_KEY: ds} if ds is not None else {}
    observed = observe(first, states={**states, "volume": pvc("Bound")},
                       data={warmer_names.STATUS_KEY: records or {}})
    return run(xr, cluster=cluster, observed=observed).status["nodeTier"]


# --- what is composed -----------------------------------------------------------------------


def test_a_ready_volume_on_a_node_cluster_composes_every_node_object():
    assert node_keys(run()) == {"node-pv", "node-claim", "node-status", "node-warmer",
                                "node-service-account", "node-role", "node-role-binding",
                                "node-slots-binding"}


def test_nothing_of_the_node_tier_is_composed_while_the_volume_hydrates():
    outcome = run(hydration_xr(tier="Node"))
    assert node_keys(outcome) == set()
    assert outcome.status["nodeTier"]["phase"] == "Pending"
    assert outcome.status["nodeTier"]["reason"] == "AwaitingVolumeTier"


@pytest.mark.parametrize("key, kind, name, namespace", [
    ("node-pv", "PersistentVolume", PV_NAME, None),
    ("node-claim", "PersistentVolumeClaim", CLAIM, NAMESPACE),
    ("node-status", "ConfigMap", "qwen-node-status", NAMESPACE),
    ("node-warmer", "DaemonSet", "qwen-node-warmer", NAMESPACE),
    ("node-service-account", "ServiceAccount", "qwen-node-warmer", NAMESPACE),
    ("node-role", "Role", "qwen-node-warmer", NAMESPACE),
    ("node-role-binding", "RoleBinding", "qwen-node-warmer", NAMESPACE),
    ("node-slots-binding", "RoleBinding", "ml-qwen-node-warm-slots", "fleetcache-system"),
])
def test_remote_names_are_the_contracts(key, kind, name, namespace):
    remote = manifest(run(), key)
    assert (remote["kind"], remote["metadata"]["name"]) == (kind, name)
    assert remote["metadata"].get("namespace") == namespace


def test_the_status_names_the_claim_and_the_node_label_replicas_use():
    tier = run().status["nodeTier"]
    assert (tier["claimName"], tier["labelKey"], tier["commit"]) == (CLAIM, LABEL_KEY, COMMIT)


def test_every_node_object_is_a_valid_kubernetes_manifest():
    outcome = run()
    for key in node_keys(outcome):
        assert_valid_k8s(manifest(outcome, key))


def test_the_hydration_with_its_node_tier_status_is_valid_against_its_xrd():
    outcome = tier_of(daemonset(3, 2), {"a": record("Ready"), "b": record("Failed")})
    assert_valid(with_status(hydration_xr(tier="Node"), nodeTier=outcome))


def test_the_pool_is_the_selector_the_opt_in_label_and_never_the_control_plane():
    outcome = run()
    assert manifest(outcome, "node-pv")["spec"]["nodeAffinity"] == {"required": POOL}
    assert warmer_pod(outcome)["affinity"] == {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": POOL}}


def test_match_expressions_and_a_custom_opt_in_label_join_the_pool():
    node_cache = {**NODE_CACHE, "optInLabel": {"key": "example.com/warm", "value": "yes"},
                  "nodeSelector": {"matchExpressions": [
                      {"key": "gpu", "operator": "In", "values": ["h100", "a100"]}]}}
    terms = manifest(run(cluster=node_cluster(node_cache)), "node-pv")["spec"][
        "nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert terms[:2] == [{"key": "gpu", "operator": "In", "values": ["h100", "a100"]},
                         {"key": "example.com/warm", "operator": "In", "values": ["yes"]}]


def test_another_pool_is_another_pv_and_claim_since_pv_affinity_is_immutable():
    other = manifest(run(cluster=node_cluster({**NODE_CACHE, "nodeSelector": {}})), "node-pv")
    assert other["metadata"]["name"] != PV_NAME
    assert other["spec"]["claimRef"]["name"] != CLAIM


def test_the_pv_is_the_pools_directory_for_this_cache_pre_bound_to_the_claim():
    spec = manifest(run(), "node-pv")["spec"]
    assert spec["hostPath"] == {"path": "/mnt/nvme0/ml/qwen", "type": "Directory"}
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "namespace": NAMESPACE, "name": CLAIM}
    assert (spec["storageClassName"], spec["persistentVolumeReclaimPolicy"],
            spec["accessModes"]) == ("fleetcache-node", "Retain", ["ReadWriteOnce"])


def test_the_claim_binds_the_pv_by_name_and_is_labelled_as_a_node_cache_claim():
    claim = manifest(run(), "node-claim")
    assert claim["spec"]["volumeName"] == PV_NAME
    assert claim["spec"]["storageClassName"] == "fleetcache-node"
    assert claim["metadata"]["labels"]["fleetcache.dev/node-cache-claim"] == "true"


def test_the_warmer_passes_pod_security_restricted():
    pod = warmer_pod(run())
    assert restricted_violations(pod) == []
    security = pod["containers"][0]["securityContext"]
    assert (pod["securityContext"]["runAsUser"], security["readOnlyRootFilesystem"],
            security["allowPrivilegeEscalation"], security["capabilities"]) == \
        (65532, True, False, {"drop": ["ALL"]})


def test_the_warmer_reads_the_cluster_volume_read_only_and_writes_only_the_node_claim():
    pod = warmer_pod(run())
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["volume"]["persistentVolumeClaim"] == {
        "claimName": naming.cache_volume_name(CACHE), "readOnly": True}
    assert mounts["/var/cache/fleetcache-volume"] == {
        "name": "volume", "mountPath": "/var/cache/fleetcache-volume", "readOnly": True}
    assert volumes["node"]["persistentVolumeClaim"] == {"claimName": CLAIM}
    assert "readOnly" not in mounts["/var/cache/fleetcache-node"]


def test_the_warmer_copies_this_commit_from_the_volume_root_fetch_wrote():
    container = warmer_pod(run())["containers"][0]
    assert container["args"] == [
        "node-warm", "--source", "/var/cache/fleetcache-volume",
        "--dest", "/var/cache/fleetcache-node", "--repo", "Qwen/Qwen3-0.6B",
        "--commit", COMMIT, "--manifest-digest", DIGEST, "--node", "$(NODE_NAME)",
        "--status-configmap", "ml/qwen-node-status", "--slots-namespace", "fleetcache-system",
        "--holder", "ml/qwen/$(NODE_NAME)",
        "--prune-selector",
        "app.kubernetes.io/component=node-warmer,fleetcache.dev/model-cache=qwen",
        "--pruner-lease", "qwen-node-pruner", "--keep", COMMIT]
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "spec.nodeName"}}} in container["env"]


def test_the_warmer_is_ready_only_while_its_node_holds_this_commit():
    probe = warmer_pod(run())["containers"][0]["readinessProbe"]
    assert probe["exec"]["command"] == [
        "fleetcache-agent", "node-ready", "--dest", "/var/cache/fleetcache-node",
        "--commit", COMMIT, "--manifest-digest", DIGEST]


def test_the_warmer_tolerates_the_pools_taints_restarts_all_at_once_and_asks_little():
    outcome = run()
    pod = warmer_pod(outcome)
    assert pod["tolerations"] == NODE_CACHE["tolerations"]
    assert manifest(outcome, "node-warmer")["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
    assert pod["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}


def test_the_warmer_rbac_is_its_records_pod_listing_and_its_pruner_lease_only():
    outcome = run()
    assert manifest(outcome, "node-role")["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["qwen-node-status"],
         "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["qwen-node-pruner"], "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    slots = manifest(outcome, "node-slots-binding")
    assert slots["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": "fleetcache-node-warm-slots"}
    assert slots["subjects"] == [{"kind": "ServiceAccount", "name": "qwen-node-warmer",
                                  "namespace": NAMESPACE}]
    assert manifest(outcome, "node-service-account")["automountServiceAccountToken"] is False
    assert warmer_pod(outcome)["automountServiceAccountToken"] is True


def test_the_status_configmap_is_observed_created_and_deleted_never_overwritten():
    resource = run().desired["node-status"][0]
    assert resource["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"]
    assert "data" not in resource["spec"]["forProvider"]["manifest"]


# --- status from the DaemonSet and the records ------------------------------------------------


def test_every_eligible_node_warm_is_ready():
    tier = tier_of(daemonset(3, 3), {n: record("Ready") for n in ("a", "b", "c")})
    assert (tier["phase"], tier["reason"], tier["summary"]) == ("Ready", "NodesWarm", "3/3")
    assert (tier["readyNodes"], tier["pendingNodes"], tier["minFreeBytes"]) == (3, 0, 500 * GIB)


def test_a_node_that_left_the_pool_stops_counting_though_its_record_remains():
    tier = tier_of(daemonset(2, 2), {n: record("Ready") for n in ("a", "b", "gone")})
    assert (tier["desiredNodes"], tier["readyNodes"], tier["phase"]) == (2, 2, "Ready")


def test_counts_are_clamped_to_what_the_daemonset_still_schedules():
    records = {"a": record("Ready"), "b": record("Copying"), "c": record("Waiting"),
               "d": record("Failed", reason="DigestMismatch")}
    tier = tier_of(daemonset(2, 1), records)
    assert (tier["readyNodes"], tier["downloadingNodes"], tier["failedNodes"],
            tier["pendingNodes"]) == (1, 1, 0, 0)


def test_a_not_ready_node_is_not_counted_ready_whatever_its_record_says():
    tier = tier_of(daemonset(3, 2), {n: record("Ready") for n in ("a", "b", "c")})
    assert (tier["readyNodes"], tier["pendingNodes"], tier["phase"]) == (2, 1, "Warming")


def test_nodes_copying_waiting_and_without_a_record_are_downloading_or_pending():
    tier = tier_of(daemonset(4, 1), {"a": record("Ready"), "b": record("Copying"),
                                     "c": record("Waiting")})
    assert (tier["phase"], tier["reason"]) == ("Warming", "NodesWarming")
    assert (tier["readyNodes"], tier["downloadingNodes"], tier["pendingNodes"]) == (1, 2, 1)


def test_the_first_failure_is_the_failed_node_with_the_smallest_name():
    records = {"gpu-9": record("Failed", reason="InsufficientCapacity", message="needs 3 GiB"),
               "gpu-10": record("Failed", reason="NodeCacheNotDedicated", message="root fs"),
               "gpu-1": record("Ready")}
    tier = tier_of(daemonset(3, 1), records)
    assert tier["firstFailure"] == {"node": "gpu-10", "reason": "NodeCacheNotDedicated",
                                    "message": "root fs"}
    assert (tier["phase"], tier["reason"], tier["failedNodes"]) == \
        ("Degraded", "NodeTierDegraded", 2)
    assert reasons.remedy("NodeCacheNotDedicated") in tier["message"]


def test_every_node_failed_is_failed_with_the_first_failures_reason_and_remedy():
    tier = tier_of(daemonset(2, 0), {n: record("Failed", reason="DigestMismatch")
                                     for n in ("a", "b")})
    assert (tier["phase"], tier["reason"]) == ("Failed", "DigestMismatch")
    assert tier["message"].endswith(reasons.remedy("DigestMismatch"))


def test_no_eligible_node_is_pending_with_the_opt_in_remedy():
    tier = tier_of(daemonset(0, 0))
    assert (tier["phase"], tier["reason"], tier["summary"]) == ("Pending", "NoEligibleNodes", "0/0")
    assert tier["message"].endswith(reasons.remedy("NoEligibleNodes"))


def test_before_the_daemonset_reports_its_nodes_the_tier_waits_for_it():
    tier = tier_of(None)
    assert (tier["phase"], tier["reason"]) == ("Pending", "AwaitingPrerequisites")


@pytest.mark.parametrize("node, text", [
    ("a", "not json"),
    ("b", json.dumps(["Ready"])),
    ("c", json.dumps({"phase": "Done", "commit": COMMIT})),
    ("d", record("Ready", commit=NEW_COMMIT)),
    ("Not_A_Node", record("Ready")),
    ("e", record("Ready", message="x" * 5000)),
    ("f", 7),
])
def test_a_record_that_is_not_one_of_this_commit_is_ignored(node, text):
    tier = tier_of(daemonset(1, 1), {node: text})
    assert (tier["readyNodes"], tier["pendingNodes"]) == (0, 1)


def test_a_hostile_failure_reason_and_message_are_not_copied_into_the_status():
    tier = tier_of(daemonset(1, 0), {"a": record("Failed", reason="not a reason!",
                                                 message="m" * 500)})
    assert tier["firstFailure"]["reason"] == "Failed"
    assert len(tier["firstFailure"]["message"]) == 120


# --- what the FleetCluster decides and says ------------------------------------------------


def test_a_cluster_without_node_cache_keeps_the_cache_volume_only_and_says_so():
    outcome = run(cluster=fleet_cluster(CLUSTER))
    assert node_keys(outcome) == set()
    assert "volume" in outcome.desired
    tier = outcome.status["nodeTier"]
    assert (tier["phase"], tier["reason"]) == ("Pending", "NodeTierNotConfigured")
    assert tier["message"].endswith(reasons.remedy("NodeTierNotConfigured"))


def test_a_node_cache_from_a_storage_class_is_refused_and_the_cache_stays_volume_only():
    outcome = run(cluster=node_cluster({"storageClassName": "topolvm",
                                        "capacityPerNode": "1Ti"}))
    assert node_keys(outcome) == set()
    assert outcome.status["nodeTier"]["reason"] == "NodeCacheModeUnsupported"


def test_a_node_cache_without_an_absolute_path_is_named_and_composes_nothing():
    outcome = run(cluster=node_cluster({**NODE_CACHE, "path": "mnt/nvme0"}))
    assert node_keys(outcome) == set()
    assert "spec.nodeCache.path 'mnt/nvme0'" in outcome.status["nodeTier"]["message"]


def test_an_evicted_cache_loses_warmer_pv_and_claim_and_keeps_its_volume():
    observed = observe(run())
    outcome = run(cluster=node_cluster(admitted=(), evicted=(KEY,)), observed=observed)
    assert node_keys(outcome) == set()
    assert "volume" in outcome.desired
    assert (outcome.status["nodeTier"]["phase"], outcome.status["phase"]) == ("Evicted", "Ready")


def test_a_cache_not_admitted_on_the_nodes_waits_and_composes_nothing_of_the_tier():
    outcome = run(cluster=node_cluster(admitted=()))
    assert node_keys(outcome) == set()
    assert outcome.status["nodeTier"]["reason"] == "NodeCapacityLow"
    assert outcome.status["nodeTier"]["message"].endswith(reasons.remedy("NodeCapacityLow"))


def test_before_the_cluster_decides_the_node_tier_waits_for_it():
    outcome = run(cluster=node_cluster(decided=False))
    assert node_keys(outcome) == set()
    assert "has not decided" in outcome.status["nodeTier"]["message"]


def test_a_started_node_tier_keeps_running_though_no_longer_listed_as_admitted():
    observed = observe(run())
    assert node_keys(run(cluster=node_cluster(admitted=()), observed=observed)) == \
        node_keys(run())


def test_a_new_commit_keeps_the_warmers_on_the_old_one_until_the_volume_holds_it():
    observed = observe(run())
    xr = with_status(hydration_xr(tier="Node", commit=NEW_COMMIT), **READY_VOLUME)
    outcome = run(xr, observed=observed)
    assert manifest(outcome, "node-warmer") == manifest(run(), "node-warmer")
    assert outcome.status["nodeTier"]["reason"] == "AwaitingVolumeTier"


def test_while_the_volume_updates_the_status_counts_the_commit_the_nodes_keep():
    observed = observe(run(), states={warmer_names.WARMER_KEY: daemonset(2, 2)},
                       data={warmer_names.STATUS_KEY: {"a": record("Ready"), "b": record("Ready")}})
    xr = with_status(hydration_xr(tier="Node", commit=NEW_COMMIT), **READY_VOLUME)
    tier = run(xr, observed=observed).status["nodeTier"]
    assert (tier["phase"], tier["commit"], tier["summary"]) == ("Ready", COMMIT, "2/2")
    assert tier["message"].endswith(f"they keep {COMMIT[:10]} until the volume holds "
                                    f"{NEW_COMMIT[:10]}")


def test_a_held_hydration_reports_the_nodes_it_keeps():
    observed = observe(run(), states={warmer_names.WARMER_KEY: daemonset(1, 1)},
                       data={warmer_names.STATUS_KEY: {"a": record("Ready")}})
    xr = with_status(hydration_xr(tier="Node", removal={"since": "2026-01-10T12:00:00Z",
                                                        "until": "2026-01-10T13:00:00Z"},
                                  commit=NEW_COMMIT), **READY_VOLUME)
    outcome = run(xr, observed=observed)
    assert outcome.status["reason"] == "LeftPlacement"
    assert node_keys(outcome) == node_keys(run())
    assert (outcome.status["nodeTier"]["phase"], outcome.status["nodeTier"]["commit"]) == \
        ("Ready", COMMIT)


def test_a_cluster_that_is_not_ready_keeps_the_node_objects_and_says_why():
    observed = observe(run())
    not_ready = node_cluster()
    not_ready["status"]["conditions"][0]["status"] = "False"
    outcome = run(cluster=not_ready, observed=observed)
    assert node_keys(outcome) == node_keys(run())
    assert outcome.status["nodeTier"]["reason"] == "ClusterNotReady"


def test_a_volume_tier_hydration_has_no_node_tier():
    xr = with_status(hydration_xr(), **READY_VOLUME)
    outcome = run(xr)
    assert node_keys(outcome) == set() and "nodeTier" not in outcome.status


# --- the ModelCache ---------------------------------------------------------------------------


def cache_outcome(tier: str | None, tiers: dict[str, dict] | None = None,
                  phase: str = "Ready") -> protocol.Outcome:
    """compose-model-cache over three Ready clusters whose hydrations report `tiers`."""
    storage = {"tier": tier} if tier else {}
    xr = with_resolved(model_cache_xr(storage=storage))
    fleet = [fleet_cluster(n) for n in ("gpu-east-1", "gpu-east-2", "gpu-west-1")]
    required = {"fleet-clusters": fleet, "model-cache-grant": [grant_admitting(xr)]}
    first = model_cache.compose(protocol.Request(composite=xr, required=required))
    observed = {}
    for key, (hydration, _) in first.desired.items():
        if hydration["kind"] != "ModelCacheHydration":
            continue
        observed[key] = observed_hydration(hydration, phase, done=3 * GIB)
        cluster = hydration["spec"]["clusterName"]
        if tiers and cluster in tiers:
            observed[key]["status"]["nodeTier"] = tiers[cluster]
    return model_cache.compose(protocol.Request(composite=xr, observed=observed, required=required))


def nodes(phase: str, desired: int, ready: int, failed: int = 0, reason: str = "") -> dict:
    tier = {"phase": phase, "desiredNodes": desired, "readyNodes": ready,
            "downloadingNodes": desired - ready - failed, "failedNodes": failed}
    if failed:
        tier["firstFailure"] = {"node": "n1", "reason": reason, "message": ""}
    return tier


@pytest.mark.parametrize("tier, expected", [(None, "Volume"), ("Volume", "Volume"),
                                            ("Node", "Node")])
def test_every_hydration_gets_the_caches_tier(tier, expected):
    outcome = cache_outcome(tier)
    assert {h["spec"]["tier"] for h in hydrations(outcome).values()} == {expected}


def test_a_node_cache_sums_its_hydrations_node_counts():
    outcome = cache_outcome("Node", {"gpu-east-1": nodes("Ready", 4, 4),
                                     "gpu-east-2": nodes("Warming", 3, 1)})
    assert outcome.status["nodeTier"] == {"desiredNodes": 7, "readyNodes": 5,
                                          "downloadingNodes": 2, "failedNodes": 0,
                                          "readyClusters": 1, "summary": "5/7"}
    assert condition(outcome, "Degraded").status == "False"


def test_a_volume_cache_has_no_node_tier_status():
    assert "nodeTier" not in cache_outcome(None).status


def test_failed_nodes_degrade_the_cache_naming_the_clusters_and_the_first_remedy():
    outcome = cache_outcome("Node", {
        "gpu-east-2": nodes("Degraded", 3, 1, failed=2, reason="NodeCacheNotDedicated"),
        "gpu-west-1": nodes("Failed", 2, 0, failed=2, reason="DigestMismatch"),
        "gpu-east-1": nodes("Ready", 4, 4)})
    degraded = condition(outcome, "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "NodeTierDegraded")
    assert degraded.message.startswith(
        "node copies failed on gpu-east-2 (2 of 3 nodes: NodeCacheNotDedicated), "
        "gpu-west-1 (2 of 2 nodes: DigestMismatch)")
    assert degraded.message.endswith(reasons.remedy("NodeCacheNotDedicated"))
    assert condition(outcome, "Available").status == "True"  # the volume tier's, unchanged


def test_the_degraded_message_names_at_most_five_clusters():
    names = [f"gpu-{i}" for i in range(7)]
    status, failing = rollup.rollup(
        {n: {"status": {"nodeTier": nodes("Failed", 1, 0, failed=1)}} for n in names})
    message = rollup.degraded_message(failing)
    assert "gpu-4 (" in message and "gpu-5 (" not in message
    assert "and 2 more clusters" in message
    assert status["failedNodes"] == 7


def test_a_failed_volume_tier_keeps_its_degraded_reason_and_names_the_nodes_too():
    outcome = cache_outcome("Node", {"gpu-east-1": nodes("Failed", 2, 0, failed=2,
                                                         reason="DigestMismatch")},
                            phase="Failed")
    degraded = condition(outcome, "Degraded")
    assert degraded.reason == "HydrationFailed"
    assert "node copies failed on gpu-east-1" in degraded.message


def test_an_s3_source_is_warmed_from_the_repository_folder_fetch_named_after_it():
    xr = with_status(hydration_xr(tier="Node", source={"s3": {"bucket": "models",
                                                              "prefix": "qwen/v1"}}),
                     **READY_VOLUME)
    args = warmer_pod(run(xr))["containers"][0]["args"]
    assert args[args.index("--repo") + 1] == "s3/models/qwen/v1"


def test_an_existing_volume_source_has_no_node_tier_and_says_which_field():
    h = warmer_inputs.Hydration(NAMESPACE, "qwen-x", CACHE, CLUSTER, "", COMMIT, DIGEST, {})
    volume = warmer_inputs.VolumeTier("Ready", "Hydrated", composing=True)
    outcome = protocol.Outcome()
    tier = warmers.run(hydration_request(node_xr()), h, node_cluster(),
                         FleetClusterView.of(node_cluster()), "qwen-cache", volume, [],
                         outcome)
    assert (tier["reason"], outcome.desired) == ("InvalidSpec", {})
    assert tier["message"].startswith("spec.source.volume:")


def test_a_cluster_without_warm_labels_publishes_no_label_key():
    outcome = run(cluster=node_cluster({**NODE_CACHE, "labels": "None"}))
    assert outcome.status["nodeTier"]["labelKey"] == ""
    assert node_keys(outcome) == node_keys(run())


def test_the_caches_node_tier_status_is_valid_against_its_xrd():
    outcome = cache_outcome("Node", {"gpu-east-1": nodes("Degraded", 3, 1, failed=2,
                                                         reason="DigestMismatch")})
    cache = with_resolved(model_cache_xr(storage={"tier": "Node"}))
    assert_valid({**cache, "status": {**cache["status"], "nodeTier": outcome.status["nodeTier"]}})


def test_a_read_write_once_volume_cannot_feed_warmers_on_many_nodes():
    xr = with_status(hydration_xr(tier="Node", storage={"size": "4Gi",
                                                        "accessMode": "ReadWriteOnce"}),
                     **READY_VOLUME)
    outcome = run(xr)
    assert node_keys(outcome) == set()
    assert outcome.status["nodeTier"]["reason"] == "VolumeNotShared"
    assert outcome.status["nodeTier"]["message"].endswith(reasons.remedy("VolumeNotShared"))


def test_the_access_mode_the_volume_has_counts_over_the_one_asked_for():
    observed = observe(run())
    observed["volume"]["status"]["atProvider"]["manifest"]["spec"]["accessModes"] = \
        ["ReadWriteOnce"]
    assert run(observed=observed).status["nodeTier"]["reason"] == "VolumeNotShared"


# --- what replicas read ------------------------------------------------------------------------


def node_replica(commit: str, index: int = 0) -> dict:
    """A ModelReplica of CACHE on CLUSTER delivered Node at `commit` (it mounts the volume
    at the same commit as its in-pod fallback)."""
    replica = cache_replica(commit, index)
    replica["spec"]["delivery"] = "Node"
    replica["spec"]["nodeCache"] = {"claimName": CLAIM, "labelKey": LABEL_KEY, "commit": commit,
                                    "manifestDigest": DIGEST, "policy": "Prefer"}
    return replica


def keep_args(outcome: protocol.Outcome) -> list[str]:
    args = warmer_pod(outcome)["containers"][0]["args"]
    return [b for a, b in zip(args, args[1:], strict=False) if a == "--keep"]


def test_the_warmers_prune_every_other_commit_of_the_repo_once_this_one_is_ready():
    assert keep_args(run()) == [COMMIT]


def test_a_commit_node_replicas_still_read_is_kept_on_the_nodes():
    outcome = run(replicas=[node_replica(NEW_COMMIT), node_replica(COMMIT, 1),
                            cache_replica(NEW_COMMIT.replace("1", "2"), 2)])
    assert keep_args(outcome) == sorted([COMMIT, NEW_COMMIT])


def test_while_the_replicas_are_not_known_the_warmers_stay_as_they_are():
    observed = observe(run())
    assert warmer_names.WARMER_KEY not in run(replicas=None).desired
    kept = run(replicas=None, observed=observed).desired[warmer_names.WARMER_KEY][0]
    assert kept["spec"]["forProvider"]["manifest"] == manifest(run(), warmer_names.WARMER_KEY)


def test_node_replicas_count_as_mounting_the_volume_they_fall_back_to():
    outcome = run(replicas=[node_replica(COMMIT)])
    assert (outcome.status["mountedBy"], outcome.status["placedReplicas"]) == (1, 1)


def test_a_model_cache_refuses_the_node_tier_for_an_existing_volume_source():
    spec = model_cache_xr(storage={"tier": "Node"},
                          source={"volume": {"claimName": "weights",
                                             "manifest": {"file": ".fleetcache/manifest.json"}}}
                          )["spec"]
    with pytest.raises(specs.InputError, match="spec.storage.tier Node needs a huggingFace, s3 or oci source"):
        model_cache.read_spec(spec)
