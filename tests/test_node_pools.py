"""Node pools a tenant is authorized for (issue 23 item 4, design/node-pools.md): the API's
rules, the grant's authorization (PoolNotGranted), which pool a hydration warms and how its
nodes are selected, and compose-fleet-cluster composing one node agent and one capacity
decision per pool. Tables, one behaviour per test."""

from __future__ import annotations

import copy

import pytest

from fleetcache import reasons
from fleetcache.apis import xrds
from fleetcache.functions.decisions import admission
from fleetcache.functions.decisions.admission import Cache, Grant
from fleetcache.functions.node_tier import node_agent, warmer_names
from fleetcache.functions.node_tier.capacity import node_hydrations
from fleetcache.functions.node_tier.warmer_inputs import Decision, NodeCache
from fleetcache.functions.views import grant as grant_view
from tests import test_fleet_cluster_node_cache as fc
from tests import test_model_cache_grant as mg
from tests import test_node_tier_hydration as nt

GIB = 1024**3
LARGE = {"name": "gpu-large", "nodeSelector": {"matchLabels": {"gpu": "b200"}},
         "path": "/mnt/nvme1", "capacityPerNode": "200Gi", "maxConcurrentNodes": 2}


# --- the API --------------------------------------------------------------------------------


def fleet_cluster(**spec) -> dict:
    return {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "FleetCluster",
            "metadata": {"name": "gpu-east-1"},
            "spec": {"kubeconfigSecretRef": {"name": "k"}, **spec}}


def cel(obj: dict, old: dict | None = None) -> list[str]:
    return xrds.load_xrds()[obj["kind"]].cel_messages(obj, old)


def test_a_node_cache_and_named_pools_are_accepted_together():
    assert cel(fleet_cluster(nodeCache=dict(fc.NODE_CACHE), nodePools=[LARGE])) == []


def test_a_pool_named_default_beside_node_cache_is_refused_naming_the_fix():
    assert cel(fleet_cluster(nodeCache=dict(fc.NODE_CACHE),
                             nodePools=[{**LARGE, "name": "default"}])) == [
        "spec.nodePools[] names a pool default while spec.nodeCache is set, which is the pool "
        "default; remove one of them"]


def test_a_pool_named_default_without_node_cache_is_accepted():
    assert cel(fleet_cluster(nodePools=[{**LARGE, "name": "default"}])) == []


def test_two_pools_of_one_name_are_refused():
    assert cel(fleet_cluster(nodePools=[LARGE, {**LARGE, "path": "/mnt/nvme2"}])) == [
        "spec.nodePools[].name must be unique; rename the repeated pool"]


def test_two_pools_on_one_path_are_refused():
    assert "spec.nodePools[].path must differ between pools" in " ".join(
        cel(fleet_cluster(nodePools=[LARGE, {**LARGE, "name": "gpu-small"}])))


def test_a_pool_on_the_node_cache_path_is_refused():
    assert cel(fleet_cluster(nodeCache=dict(fc.NODE_CACHE),
                             nodePools=[{**LARGE, "path": fc.NODE_CACHE["path"]}])) == [
        "spec.nodePools[].path repeats spec.nodeCache.path; give each pool its own filesystem"]


def grant_xr(**spec) -> dict:
    return {"apiVersion": "fleetcache.dev/v1alpha1", "kind": "ModelCacheGrant",
            "metadata": {"name": "team-a", "namespace": "ml"},
            "spec": {"clusters": {"clusterNames": ["gpu-east-1"]}, "quota": {"bytes": "1Ti"},
                     **spec}}


def test_a_grants_pools_may_grow():
    assert cel(grant_xr(nodePools=["default", "gpu-large"]), grant_xr(nodePools=["default"])) == []


def test_a_grants_pools_may_not_shrink():
    assert cel(grant_xr(nodePools=["gpu-large"]), grant_xr(nodePools=["default", "gpu-large"])) \
        == ["spec.nodePools may only grow; node copies were admitted in the pools it names"]


# --- authorization: the grant's rows --------------------------------------------------------


def cache(pool: str) -> Cache:
    return Cache(name="qwen", created="", digest="qwen@1", targets=frozenset({"gpu-east-1"}),
                 pinned=False, content="c", commit="", bytes=GIB, pool=pool)


def row(pool: str, granted: frozenset[str]) -> tuple[bool, str]:
    grant = Grant("team-a", frozenset({"gpu-east-1"}), 100 * GIB, False, granted)
    (decided,) = admission.decide(grant, [cache(pool)], {}).rows
    return decided.admitted, decided.reason


@pytest.mark.parametrize("pool, granted, expected", [
    ("default", frozenset({"default"}), (True, "Admitted")),
    ("gpu-large", frozenset({"default", "gpu-large"}), (True, "Admitted")),
    ("gpu-large", frozenset({"default"}), (False, reasons.PoolNotGranted)),
    ("default", frozenset({"gpu-large"}), (False, reasons.PoolNotGranted)),
    ("default", frozenset(), (False, reasons.PoolNotGranted)),
    ("", frozenset(), (True, "Admitted")),  # a Volume-tier cache fills no pool
])
def test_a_grant_admits_a_node_cache_only_in_a_pool_it_grants(pool, granted, expected):
    assert row(pool, granted) == expected


def test_a_pool_not_granted_names_the_pool_the_grant_and_its_pools_with_the_remedy():
    grant = Grant("team-a", frozenset({"gpu-east-1"}), 100 * GIB, False, frozenset({"default"}))
    (decided,) = admission.decide(grant, [cache("gpu-large")], {}).rows
    assert decided.message.startswith("spec.storage.nodePool gpu-large is not a pool "
                                      "ModelCacheGrant team-a grants (spec.nodePools: default)")
    assert reasons.remedy(reasons.PoolNotGranted) in decided.message


@pytest.mark.parametrize("spec, pools", [
    ({}, {"default"}),
    ({"nodePools": []}, set()),
    ({"nodePools": ["gpu-large"]}, {"gpu-large"}),
])
def test_a_grant_without_node_pools_grants_default_only(spec, pools):
    assert grant_view.granted_pools(spec) == pools


@pytest.mark.parametrize("storage, pool", [
    ({"tier": "Node"}, "default"),
    ({"tier": "Node", "nodePool": "gpu-large"}, "gpu-large"),
    ({"tier": "Volume", "nodePool": "gpu-large"}, ""),
    ({}, ""),
])
def test_the_pool_a_cache_fills_is_its_node_pool_only_on_the_node_tier(storage, pool):
    assert grant_view.node_pool({"spec": {"storage": storage}}) == pool


def test_moving_a_cache_to_another_pool_changes_its_admission_digest():
    base = {"spec": {"source": {}, "placement": {}, "storage": {"tier": "Node"}}}
    moved = copy.deepcopy(base)
    moved["spec"]["storage"]["nodePool"] = "gpu-large"
    assert grant_view.admission_digest(base) != grant_view.admission_digest(moved)


def test_the_default_pool_leaves_the_admission_digest_as_it_was_before_pools():
    base = {"spec": {"source": {}, "placement": {}, "storage": {"tier": "Node"}}}
    named = copy.deepcopy(base)
    named["spec"]["storage"]["nodePool"] = "default"
    assert grant_view.admission_digest(base) == grant_view.admission_digest(named)


# --- which pool a hydration warms -----------------------------------------------------------


TWO_POOLS = {"nodeCache": dict(fc.NODE_CACHE), "nodePools": [LARGE]}


@pytest.mark.parametrize("spec, name, expected", [
    (TWO_POOLS, "default", ("/mnt/nvme0", "spec.nodeCache")),
    (TWO_POOLS, "gpu-large", ("/mnt/nvme1", "spec.nodePools[gpu-large]")),
    ({"nodePools": [{**LARGE, "name": "default"}]}, "default",
     ("/mnt/nvme1", "spec.nodePools[default]")),
    (TWO_POOLS, "gpu-small", None),
    ({"nodeCache": dict(fc.NODE_CACHE)}, "gpu-large", None),
])
def test_a_hydration_reads_the_pool_it_names(spec, name, expected):
    found = NodeCache.of_pool(spec, name)
    assert ((found.path, found.field) if found else None) == expected


def test_a_pools_nodes_are_its_selector_its_opt_in_label_and_never_the_control_plane():
    pool = NodeCache.of_pool(TWO_POOLS, "gpu-large")
    assert pool is not None and pool.pool == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpu", "operator": "In", "values": ["b200"]},
        {"key": "fleetcache.dev/node-cache", "operator": "In", "values": ["enabled"]},
        {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"},
        {"key": "node-role.kubernetes.io/master", "operator": "DoesNotExist"}]}]}


@pytest.mark.parametrize("status, pool, admitted", [
    ({"nodeCache": {"admitted": ["ml/qwen"]}}, "default", True),
    ({"nodeCache": {"admitted": ["ml/qwen"]}}, "gpu-large", False),
    ({"nodePools": [{"name": "gpu-large", "admitted": ["ml/qwen"]}]}, "gpu-large", True),
    ({"nodePools": [{"name": "gpu-large", "admitted": ["ml/qwen"]}]}, "default", False),
])
def test_a_hydration_obeys_its_own_pools_decision(status, pool, admitted):
    assert Decision.of_pool(status, pool, "ml/qwen").admitted is admitted


def pooled_hydration(**spec) -> dict:
    xr = nt.node_xr()
    xr["spec"].update(spec)
    return xr


def large_cluster(admitted: tuple[str, ...] = (nt.KEY,)) -> dict:
    cluster = nt.node_cluster()
    cluster["spec"]["nodePools"] = [copy.deepcopy(LARGE)]
    cluster["status"]["nodePools"] = [{"name": "gpu-large", "admitted": list(admitted),
                                       "evicted": [], "waiting": []}]
    return cluster


def test_a_hydration_of_a_pool_warms_only_that_pools_nodes_from_its_path():
    outcome = nt.run(pooled_hydration(nodePool="gpu-large"), cluster=large_cluster())
    pv = nt.manifest(outcome, warmer_names.PV_KEY)["spec"]
    assert pv["hostPath"]["path"] == "/mnt/nvme1/ml/qwen"
    assert pv["nodeAffinity"]["required"] == NodeCache.of_pool(
        large_cluster()["spec"], "gpu-large").pool
    assert nt.warmer_pod(outcome)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"] == pv["nodeAffinity"]["required"]


def test_a_cluster_without_the_pool_keeps_the_cache_on_its_volume_and_says_so():
    outcome = nt.run(pooled_hydration(nodePool="gpu-small"), cluster=large_cluster())
    tier = outcome.status["nodeTier"]
    assert (tier["phase"], tier["reason"]) == ("Pending", reasons.NodeTierNotConfigured)
    assert "FleetCluster gpu-east-1 has no node pool gpu-small" in tier["message"]
    assert nt.node_keys(outcome) == set()


def test_a_hydration_waits_for_its_own_pools_room_not_the_defaults():
    outcome = nt.run(pooled_hydration(nodePool="gpu-large"), cluster=large_cluster(admitted=()))
    tier = outcome.status["nodeTier"]
    assert (tier["reason"], "status.nodePools[gpu-large]" in tier["message"]) == \
        (reasons.NodeCapacityLow, True)


@pytest.mark.parametrize("pool, selected", [("default", ["a"]), ("gpu-large", ["b"])])
def test_a_pools_capacity_decision_weighs_only_its_own_caches(pool, selected):
    a = fc.hydration("a", 10)
    b = fc.hydration("b", 10)
    b["spec"]["nodePool"] = "gpu-large"
    assert [h["spec"]["modelCacheName"] for h in node_hydrations("gpu-east-1", [a, b], pool)] \
        == selected


# --- compose-fleet-cluster with two pools -----------------------------------------------------


def two_pool_cluster(status: dict | None = None, **large) -> dict:
    xr = fc.cluster_xr(status)
    xr["spec"]["nodePools"] = [{**copy.deepcopy(LARGE), **large}]
    return xr


def agents(outcome) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in fc.remote(outcome).values()
            if m["kind"] == "DaemonSet"}


def test_each_pool_has_its_own_node_agent_on_its_own_nodes_and_path():
    found = agents(fc.run(two_pool_cluster(), hydrations=[]))
    pods = {name: ds["spec"]["template"]["spec"] for name, ds in found.items()}
    assert {name: pod["volumes"][0]["hostPath"]["path"] for name, pod in pods.items()} == {
        "fleetcache-node-agent": "/mnt/nvme0", "fleetcache-node-agent-gpu-large": "/mnt/nvme1"}
    assert pods["fleetcache-node-agent-gpu-large"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"] == \
        NodeCache.of_pool(two_pool_cluster()["spec"], "gpu-large").pool


def test_no_two_node_agents_select_each_others_pods():
    found = agents(fc.run(two_pool_cluster(), hydrations=[]))
    for name, ds in found.items():
        for other, other_ds in found.items():
            pod_labels = other_ds["spec"]["template"]["metadata"]["labels"]
            matches = ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
            assert matches == (name == other), (name, other)


def test_each_pools_agent_reads_its_own_keep_list():
    outcome = fc.run(two_pool_cluster(), hydrations=[])
    found = agents(outcome)
    keep = {name: next(v["configMap"]["name"] for v in ds["spec"]["template"]["spec"]["volumes"]
                       if "configMap" in v) for name, ds in found.items()}
    assert keep == {"fleetcache-node-agent": "fleetcache-node-dirs",
                    "fleetcache-node-agent-gpu-large": "fleetcache-node-dirs-gpu-large"}
    assert {"fleetcache-node-dirs", "fleetcache-node-dirs-gpu-large"} <= \
        {m["metadata"]["name"] for m in fc.remote(outcome).values() if m["kind"] == "ConfigMap"}


def test_the_warm_slots_are_the_sum_of_the_pools():
    slots = [m for m in fc.remote(fc.run(two_pool_cluster(), hydrations=[])).values()
             if m["kind"] == "Lease"]
    assert len(slots) == fc.NODE_CACHE["maxConcurrentNodes"] + LARGE["maxConcurrentNodes"]


def test_each_pool_decides_its_own_capacity_and_reports_a_row():
    a = fc.hydration("a", 90)
    b = fc.hydration("b", 90)
    b["spec"]["nodePool"] = "gpu-large"
    status = fc.run(two_pool_cluster(), hydrations=[a, b]).status
    rows = {row["name"]: (row["capacityPerNodeBytes"], row["admitted"] + row["waiting"])
            for row in status["nodePools"]}
    assert rows == {"default": (100 * GIB, ["ml/a"]), "gpu-large": (200 * GIB, ["ml/b"])}
    assert status["nodeCache"]["waiting"] == ["ml/a"]  # 90 of 100Gi passes the default's 80%


def test_a_full_pool_names_itself_in_node_capacity_low():
    b = fc.hydration("b", 190)
    b["spec"]["nodePool"] = "gpu-large"
    low = fc.condition(fc.run(two_pool_cluster(), hydrations=[b]), "NodeCapacityLow")
    assert (low.status, low.reason) == ("True", reasons.NodeCapacityLow)
    assert "on cluster gpu-east-1 in pool gpu-large need" in low.message


def test_a_cluster_with_pools_is_valid_against_its_xrd_with_its_status():
    outcome = fc.run(two_pool_cluster(), hydrations=[fc.hydration("a", 10)])
    fc.assert_valid({**two_pool_cluster(), "status": outcome.status})


def test_a_node_in_two_pools_gets_both_pools_agents_each_on_its_own_path():
    """Overlap cannot be refused statically: a node labelled for both pools runs both node
    agents, each on its pool's path (paths differ by CEL), so neither deletes the other's
    directories (design/node-pools.md)."""
    xr = two_pool_cluster(nodeSelector={"matchLabels": {"gpu": "h100"}})
    found = agents(fc.run(xr, hydrations=[]))
    affinities = {name: ds["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"] for name, ds in found.items()}
    paths = {ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"]
             for ds in found.values()}
    assert len(set(map(str, affinities.values()))) == 1 and len(paths) == 2
    assert node_agent.PoolNames("gpu-large").dirs != node_agent.PoolNames("default").dirs


# --- compose-model-cache-grant: a row PoolNotGranted, valid against the XRD ------------------


def node_cache_in(name: str, pool: str) -> dict:
    cache = mg.model_cache(name)
    cache["spec"]["storage"] = {"tier": "Node", "nodePool": pool}
    return cache


def test_the_grant_composer_refuses_a_node_cache_of_a_pool_it_does_not_name():
    xr = mg.grant_xr()
    xr["spec"]["nodePools"] = ["default"]
    outcome = mg.compose(mg.request(xr, caches=[node_cache_in("a", "gpu-large"),
                                                node_cache_in("b", "default")], hydrations=[]))
    assert mg.rows(outcome) == {"a": (False, reasons.PoolNotGranted), "b": (True, "Admitted")}
    mg.assert_valid({**xr, "status": outcome.status})


def test_a_grant_written_before_pools_admits_a_default_pool_node_cache():
    outcome = mg.compose(mg.request(caches=[node_cache_in("a", "default")], hydrations=[]))
    assert mg.rows(outcome) == {"a": (True, "Admitted")}
