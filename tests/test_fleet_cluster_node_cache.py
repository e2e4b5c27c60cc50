"""compose-fleet-cluster with spec.nodeCache: the node agent, its keep-list and the warm
slots composed in fleetcache-system on the cluster, the label admission policy, and the
per-node capacity decision in status.nodeCache."""

from __future__ import annotations

import copy
import json

import celpy
import pytest

from fleetcache.apis import cel, xrds
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers.fleet_cluster import HYDRATIONS_KEY, PROVIDER_CONFIG_KEY, compose
from fleetcache.functions.node_tier import node_agent
from fleetcache.functions.node_tier.warmer_inputs import NodeCache, pool_affinity
from tests.support.builders import fleet_cluster_xr
from tests.support.k8s import assert_valid_k8s, iter_remote_manifests, restricted_violations
from tests.support.xrd import assert_valid

GI = 1024**3
COMMIT = "a" * 40
NODE_CACHE = {"nodeSelector": {"matchLabels": {"gpu": "h100"}}, "path": "/mnt/nvme0",
              "capacityPerNode": "100Gi", "maxConcurrentNodes": 3,
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                               "effect": "NoSchedule"}]}
AGENT_USER = "system:serviceaccount:fleetcache-system:fleetcache-node-agent"
PREFIX = "node-cache.fleetcache.dev/"


def cluster_xr(status: dict | None = None, **node_cache) -> dict:
    xr = fleet_cluster_xr(providerConfigRef={"name": "gpu-east-1"},
                          nodeCache={**copy.deepcopy(NODE_CACHE), **node_cache})
    return {**xr, "status": status} if status is not None else xr


def hydration(cache: str, gib: int, *, tier: str = "Node", node: dict | None = None,
              created: str = "2026-01-01T00:00:00Z", **status) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": f"{cache}-gpu-east-1", "namespace": "ml",
                         "creationTimestamp": created,
                         "labels": {naming.LABEL_CLUSTER: "gpu-east-1"}},
            "spec": {"clusterName": "gpu-east-1", "modelCacheName": cache, "tier": tier,
                     "commit": COMMIT, "bytes": gib * GI, "storage": {"size": f"{gib + 1}Gi"}},
            "status": {**({"nodeTier": node} if node else {}), **status}}


def run(xr: dict | None = None, hydrations: list[dict] | None = None,
        observed: dict | None = None) -> protocol.Outcome:
    required = {} if hydrations is None else {HYDRATIONS_KEY: hydrations}
    return compose(protocol.Request(composite=xr or cluster_xr(), observed=observed or {},
                               required=required))


def remote(outcome: protocol.Outcome) -> dict[str, dict]:
    return dict(iter_remote_manifests(outcome))


def agent_pod(outcome: protocol.Outcome) -> dict:
    return remote(outcome)[node_agent.AGENT_KEY]["spec"]["template"]["spec"]


def containers(outcome: protocol.Outcome) -> dict[str, dict]:
    return {c["name"]: c for c in agent_pod(outcome)["containers"]}


def condition(outcome: protocol.Outcome, type_: str) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == type_)


# --- the spec -------------------------------------------------------------------------------


def test_a_fleet_cluster_with_a_node_cache_is_valid_and_gets_the_xrds_defaults():
    xr = cluster_xr()
    assert_valid(xr)
    spec = xrds.with_defaults(xr)["spec"]["nodeCache"]
    assert (spec["optInLabel"], spec["highWatermark"], spec["lowWatermark"], spec["labels"]) == \
        ({"key": "fleetcache.dev/node-cache", "value": "enabled"}, 80, 70, "NodeAgent")


@pytest.mark.parametrize("change, refusal", [
    ({"path": None}, "exactly one of spec.nodeCache.path or spec.nodeCache.storageClassName"),
    ({"storageClassName": "local-nvme"}, "exactly one of"),
    ({"path": "/"}, "an absolute path other than /"),
    ({"path": "mnt/nvme0"}, "an absolute path other than /"),
    ({"path": "/mnt/../etc"}, "without . or .. segments"),
    ({"lowWatermark": 85}, "lowWatermark must be below"),
    ({"maxConcurrentNodes": 65}, "at most 64"),
    ({"maxConcurrentNodes": 0}, "at least 1"),
    ({"capacityPerNode": "0"}, "a positive quantity"),
])
def test_the_xrd_refuses_a_node_cache_it_cannot_serve(change, refusal):
    node = {**NODE_CACHE, **change}
    xr = cluster_xr()
    xr["spec"]["nodeCache"] = {k: v for k, v in node.items() if v is not None}
    problems = [str(v) for v in xrds.violations(xr)]
    assert any(refusal in p for p in problems), problems


# --- what is composed ---------------------------------------------------------------------


def test_without_a_node_cache_nothing_of_the_node_tier_is_composed_or_reported():
    outcome = run(fleet_cluster_xr(providerConfigRef={"name": "gpu-east-1"}),
                  [hydration("qwen", 10)])
    assert [k for k in outcome.desired if k.startswith("node-")] == []
    assert "nodeCache" not in outcome.status
    assert {c.type for c in outcome.conditions} == {"CapacityLow"}


def test_a_storage_class_node_cache_composes_nothing_and_says_use_path():
    xr = cluster_xr(storageClassName="local-nvme")
    del xr["spec"]["nodeCache"]["path"]
    outcome = run(xr, [hydration("qwen", 10)])
    assert [k for k in outcome.desired if k.startswith("node-")] == []
    assert "nodeCache" not in outcome.status
    agent = condition(outcome, "NodeAgent")
    assert (agent.status, agent.reason) == ("False", "NodeCacheModeUnsupported")
    assert "set spec.nodeCache.path" in agent.message


@pytest.mark.parametrize("key, kind, name, namespace", [
    ("node-namespace", "Namespace", "fleetcache-system", None),
    ("node-agent-account", "ServiceAccount", "fleetcache-node-agent", "fleetcache-system"),
    ("node-agent-cluster-role", "ClusterRole", "fleetcache-node-agent", None),
    ("node-agent-cluster-role-binding", "ClusterRoleBinding", "fleetcache-node-agent", None),
    ("node-agent", "DaemonSet", "fleetcache-node-agent", "fleetcache-system"),
    ("node-dirs", "ConfigMap", "fleetcache-node-dirs", "fleetcache-system"),
    ("node-warm-slot-0", "Lease", "node-warm-slot-0", "fleetcache-system"),
    ("node-warm-slot-2", "Lease", "node-warm-slot-2", "fleetcache-system"),
    ("node-warm-slots-role", "Role", "fleetcache-node-warm-slots", "fleetcache-system"),
    ("node-agent-labels-policy", "ValidatingAdmissionPolicy", "fleetcache-node-agent-labels", None),
    ("node-agent-labels-policy-binding", "ValidatingAdmissionPolicyBinding",
     "fleetcache-node-agent-labels", None),
])
def test_composes_the_node_agent_keep_list_and_slots_on_the_cluster(key, kind, name, namespace):
    manifest = remote(run(hydrations=[]))[key]
    assert (manifest["kind"], manifest["metadata"]["name"],
            manifest["metadata"].get("namespace")) == (kind, name, namespace)


def test_every_object_reaches_the_cluster_through_its_provider_config():
    outcome = run(hydrations=[])
    objects = [o for k, (o, _) in outcome.desired.items() if k.startswith("node-")]
    assert {o["spec"]["providerConfigRef"]["name"] for o in objects} == {"gpu-east-1"}
    assert {o["metadata"]["namespace"] for o in objects} == {"crossplane-system"}


@pytest.mark.parametrize("node_cache", [{}, {"labels": "None"}, {"tolerations": []}])
def test_every_composed_manifest_is_a_valid_kubernetes_object(node_cache):
    outcome = run(cluster_xr(**node_cache), [hydration("qwen", 10)])
    manifests = list(iter_remote_manifests(outcome))
    assert len(manifests) >= 8
    for _, manifest in manifests:
        assert_valid_k8s(manifest)


def test_only_fleetcache_system_allows_privileged_pods_and_audits_and_warns_restricted():
    labels = remote(run(hydrations=[]))["node-namespace"]["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("pod-security")} == {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/audit": "restricted",
        "pod-security.kubernetes.io/warn": "restricted"}


def test_the_node_agent_breaks_restricted_only_by_the_prepare_containers_host_path_and_chown():
    assert sorted(restricted_violations(agent_pod(run(hydrations=[])))) == sorted([
        "hostPath volumes: volume 'host' uses hostPath",
        "volume types: volume 'host' is hostPath, not one of ['configMap', 'csi', 'downwardAPI', "
        "'emptyDir', 'ephemeral', 'image', 'persistentVolumeClaim', 'projected', 'secret']",
        "capabilities: containers[prepare] may add only NET_BIND_SERVICE, not ['CHOWN']",
        "running as non-root: containers[prepare] must run with runAsNonRoot: true (set on the "
        "pod or the container)",
        "running as non-root user: containers[prepare].securityContext.runAsUser must not be 0",
    ])


def test_prepare_runs_as_root_with_exactly_chown_and_no_api_access():
    outcome = run(hydrations=[])
    prepare = containers(outcome)["prepare"]
    assert prepare["securityContext"] == {
        "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 0, "runAsGroup": 0,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}
    assert prepare["args"] == ["node-prepare", "--root", "/host",
                               "--keep-file", "/etc/fleetcache/keep/keep.json"]
    assert {m["name"] for m in prepare["volumeMounts"]} == {"host", "keep", "tmp"}
    assert agent_pod(outcome)["automountServiceAccountToken"] is False


def test_label_is_non_root_without_capabilities_and_reads_the_host_path_only():
    label = containers(run(hydrations=[]))["label"]
    context = label["securityContext"]
    assert (context["runAsNonRoot"], context["runAsUser"], context["capabilities"]) == \
        (True, 65532, {"drop": ["ALL"]})
    assert restricted_violations({"containers": [label]}) == []
    mounts = {m["name"]: m for m in label["volumeMounts"]}
    assert mounts["host"]["readOnly"] is True
    assert mounts["token"]["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert label["args"] == ["node-label", "--root", "/host", "--node", "$(NODE_NAME)",
                             "--keep-file", "/etc/fleetcache/keep/keep.json"]
    assert label["env"][0] == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {
        "apiVersion": "v1", "fieldPath": "spec.nodeName"}}}


def test_only_the_label_container_gets_a_projected_token():
    pod = agent_pod(run(hydrations=[]))
    token = next(v for v in pod["volumes"] if v["name"] == "token")
    assert token["projected"]["sources"][0]["serviceAccountToken"]["path"] == "token"
    users = {c["name"] for c in pod["containers"]
             if any(m["name"] == "token" for m in c["volumeMounts"])}
    assert users == {"label"}


def test_the_host_path_is_the_node_cache_path_as_a_directory_never_created():
    volumes = {v["name"]: v for v in agent_pod(run(hydrations=[]))["volumes"]}
    assert volumes["host"] == {"name": "host", "hostPath": {"path": "/mnt/nvme0",
                                                           "type": "Directory"}}
    assert volumes["keep"] == {"name": "keep", "configMap": {"name": "fleetcache-node-dirs"}}


def test_the_node_agent_runs_on_the_pool_the_node_volumes_use_with_their_tolerations():
    pod = agent_pod(run(hydrations=[]))
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == \
        pool_affinity(NODE_CACHE["nodeSelector"], None) == NodeCache.of(NODE_CACHE).pool
    assert pod["tolerations"] == NODE_CACHE["tolerations"]


def test_the_node_agent_may_only_get_and_patch_nodes():
    manifests = remote(run(hydrations=[]))
    assert manifests["node-agent-cluster-role"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = manifests["node-agent-cluster-role-binding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "fleetcache-node-agent"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fleetcache-node-agent",
                                    "namespace": "fleetcache-system"}]
    assert manifests["node-agent-account"]["automountServiceAccountToken"] is False


def test_without_labels_the_node_agent_has_no_label_container_no_node_rbac_and_no_policy():
    outcome = run(cluster_xr(labels="None"), [])
    assert set(containers(outcome)) == {"prepare"}
    assert not {"token"} & {v["name"] for v in agent_pod(outcome)["volumes"]}
    assert not {"node-agent-cluster-role", "node-agent-cluster-role-binding",
                "node-agent-labels-policy", "node-agent-labels-policy-binding"} & set(outcome.desired)


def test_one_lease_per_slot_created_once_and_never_overwritten():
    outcome = run(hydrations=[])
    slots = {k: o for k, (o, _) in outcome.desired.items() if k.startswith("node-warm-slot-")}
    assert sorted(slots) == ["node-warm-slot-0", "node-warm-slot-1", "node-warm-slot-2"]
    for obj in slots.values():
        assert obj["spec"]["managementPolicies"] == ["Observe", "Create", "Delete"]
        lease = obj["spec"]["forProvider"]["manifest"]
        assert lease["metadata"]["labels"]["fleetcache.dev/node-warm-slot"] == "true"
        assert lease["spec"] == {"leaseDurationSeconds": 60}


def test_warmers_may_update_exactly_the_slots_and_create_none():
    role = remote(run(hydrations=[]))["node-warm-slots-role"]
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "resourceNames": ["node-warm-slot-0", "node-warm-slot-1", "node-warm-slot-2"],
         "verbs": ["update"]}]


def test_the_keep_list_names_the_node_caches_of_the_cluster():
    outcome = run(hydrations=[hydration("qwen", 10), hydration("llama", 20, tier="Volume")])
    keep = json.loads(remote(outcome)["node-dirs"]["data"]["keep.json"])
    assert keep == {"ml/qwen": {"since": None, "afterRemoval": "1h"}}


def test_before_the_hydrations_are_fetched_the_keep_list_and_decision_stand_as_they_were():
    latched = {"capacityPerNodeBytes": 100 * GI, "demandBytes": 0, "usedPercent": 0,
               "summary": "0B/100.0GiB (0%)", "admitted": ["ml/qwen"], "waiting": [],
               "evicted": []}
    observed_dirs = run(hydrations=[hydration("qwen", 10)]).desired["node-dirs"][0]
    outcome = run(cluster_xr(status={"nodeCache": latched}), None,
                  {"node-dirs": copy.deepcopy(observed_dirs)})
    assert outcome.status["nodeCache"] == latched
    assert outcome.desired["node-dirs"][0] == observed_dirs
    assert "node-dirs" not in run(cluster_xr(), None).desired  # never an empty keep-list


def test_the_fleet_cluster_is_ready_without_waiting_for_the_node_tier():
    outcome = run(hydrations=[])
    assert outcome.composite_ready is True
    assert PROVIDER_CONFIG_KEY not in outcome.desired


# --- the decision in status.nodeCache -----------------------------------------------------------


def test_status_node_cache_admits_what_fits_per_node_and_lets_the_rest_wait():
    outcome = run(hydrations=[
        hydration("warm", 50, node={"phase": "Ready", "readyNodes": 2}, mountedBy=1,
                  placedReplicas=1, pinned=False),
        hydration("small", 20, created="2026-01-01T00:00:01Z"),
        hydration("big", 40, created="2026-01-01T00:00:02Z")])
    assert outcome.status["nodeCache"] == {
        "capacityPerNodeBytes": 100 * GI, "demandBytes": 50 * GI, "usedPercent": 50,
        "summary": "50.0GiB/100.0GiB (50%)", "admitted": ["ml/small"], "waiting": ["ml/big"],
        "evicted": []}
    low = condition(outcome, "NodeCapacityLow")
    assert (low.status, low.reason) == ("True", "NodeCapacityLow")
    assert_valid({**cluster_xr(), "status": outcome.status})


def test_the_node_cache_column_reads_demand_over_capacity():
    outcome = run(hydrations=[hydration("warm", 70, node={"phase": "Ready"})])
    assert outcome.status["nodeCache"]["summary"] == "70.0GiB/100.0GiB (70%)"


@pytest.mark.parametrize("daemonset, status, reason, said", [
    (None, "False", "NodeAgentNotReady", "waiting for DaemonSet fleetcache-system/"
                                         "fleetcache-node-agent to report its nodes"),
    ({"desiredNumberScheduled": 3, "numberReady": 1}, "False", "NodeAgentNotReady",
     "1/3 pool nodes run the node agent"),
    ({"desiredNumberScheduled": 3, "numberReady": 3}, "True", "NodeAgentReady",
     "3/3 pool nodes run the node agent"),
])
def test_the_node_agent_condition_follows_the_daemonsets_numbers(daemonset, status, reason, said):
    observed = {}
    if daemonset is not None:
        observed["node-agent"] = {"status": {"atProvider": {"manifest": {"status": daemonset}}}}
    agent = condition(run(hydrations=[], observed=observed), "NodeAgent")
    assert (agent.status, agent.reason) == (status, reason)
    assert said in agent.message


# --- the label admission policy ------------------------------------------------------------------


def policy() -> dict:
    return remote(run(hydrations=[]))["node-agent-labels-policy"]


def node(name: str = "gpu-1", labels: dict | None = None, **extra) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gpu": "h100", **(labels or {})}, **extra},
            "spec": {"podCIDR": "10.0.1.0/24"}}


def request(user: str = AGENT_USER, node_name: str | None = "gpu-1") -> dict:
    extra = {"authentication.kubernetes.io/node-name": [node_name]} if node_name else {}
    return {"operation": "UPDATE", "userInfo": {"username": user, "extra": extra}}


def refusals(old: dict, new: dict, req: dict) -> list[str] | None:
    """The messages of the policy's failing validations; None when its matchConditions
    leave the request alone."""
    activation = {"object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old),
                  "request": celpy.json_to_cel(req)}
    spec = policy()["spec"]
    for match in spec["matchConditions"]:
        if not cel.compile_rule(match["expression"]).evaluate(activation):
            return None
    out = []
    for rule in spec["validations"]:
        verdict = cel.compile_rule(rule["expression"]).evaluate(activation)
        assert isinstance(verdict, celpy.celtypes.BoolType), verdict  # never an evaluation error
        if not verdict:
            out.append(rule["message"])
    return out


WARM = {PREFIX + "0123456789abcdef": COMMIT}


@pytest.mark.parametrize("old, new", [
    (node(), node(labels=WARM)),  # a warm cache's label added
    (node(labels=WARM), node(labels={PREFIX + "0123456789abcdef": "b" * 40})),  # changed
    (node(labels=WARM), node()),  # removed
    (node(labels=WARM), node(labels=WARM)),  # nothing changed
    ({**node(), "metadata": {"name": "gpu-1"}},
     {**node(), "metadata": {"name": "gpu-1", "labels": WARM}}),  # old had no labels
])
def test_the_policy_lets_the_node_agent_change_node_cache_labels_of_its_own_node(old, new):
    assert refusals(old, new, request()) == []


@pytest.mark.parametrize("old, new, req, message", [
    (node("gpu-2"), node("gpu-2", labels=WARM), request(),
     "may change only the Node its pod runs on"),
    (node(), node(labels=WARM), request(node_name=None),
     "may change only the Node its pod runs on"),  # a token without the node-name claim
    (node(), {**node(), "spec": {"podCIDR": "10.0.1.0/24", "unschedulable": True}}, request(),
     "may not change a Node's spec"),
    (node(), {**node(), "spec": {"podCIDR": "10.0.1.0/24", "taints": [
        {"key": "x", "effect": "NoSchedule"}]}}, request(), "may not change a Node's spec"),
    (node(), node(annotations={"a": "b"}), request(), "annotations, finalizers or owners"),
    (node(), node(finalizers=["example.com/hold"]), request(), "annotations, finalizers or owners"),
    (node(), node(labels={"gpu": "a100"}), request(), "may add or change only labels"),
    (node(), node(labels={"node-role.kubernetes.io/control-plane": ""}), request(),
     "may add or change only labels"),
    (node(), {**node(), "metadata": {"name": "gpu-1", "labels": {}}}, request(),
     "may remove only labels"),
])
def test_the_policy_refuses_everything_else_the_node_agent_could_do(old, new, req, message):
    said = refusals(old, new, req)
    assert said and any(message in m for m in said), said


def test_the_policy_leaves_everyone_but_the_node_agent_alone():
    assert refusals(node(), node(labels={"gpu": "a100"}),
                    request(user="system:node:gpu-1")) is None


def test_the_policy_matches_node_updates_and_its_binding_denies():
    manifests = remote(run(hydrations=[]))
    spec = manifests["node-agent-labels-policy"]["spec"]
    assert spec["matchConstraints"]["resourceRules"] == [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
        "resources": ["nodes"]}]
    assert spec["failurePolicy"] == "Fail"
    assert manifests["node-agent-labels-policy-binding"]["spec"] == {
        "policyName": "fleetcache-node-agent-labels", "validationActions": ["Deny"]}
