"""`kubectl get` columns over the demo's final state (every column shows a value), and over
composers' output where something is wrong (the FAILED and REASON columns say what)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetcache import reasons
from fleetcache.apis.xrds import CROSSPLANE_PRINTER_COLUMNS
from fleetcache.devtools import render
from fleetcache.devtools.demo import node_tier
from fleetcache.functions import protocol
from fleetcache.functions.composers import model_cache, model_deployment, model_replica
from tests.support.deployments import (
    CLUSTER,
    NO_CACHE,
    cache_required,
    cache_row,
    deployment,
    replica_xr,
)
from tests.support.fleet import (
    GIB,
    fleet_cluster,
    grant,
    grant_admitting,
    grant_row,
    model_cache_xr,
    observed_hydration,
    with_resolved,
)
from tests.support.played_demo import played_demo

ROOT = Path(__file__).resolve().parents[1]
FILTER = re.compile(r"^\[\?\(@\.([A-Za-z0-9_]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]")
FIELD = re.compile(r"^\.([A-Za-z0-9_]+)")


def jsonpath(obj, path: str):
    """The subset of kubectl's JSONPath that printer columns use: fields and filters."""
    current = [obj]
    rest = path
    while rest:
        if match := FIELD.match(rest):
            current = [c[match.group(1)] for c in current
                       if isinstance(c, dict) and match.group(1) in c]
        elif match := FILTER.match(rest):
            key, value = match.groups()
            current = [item for c in current if isinstance(c, list) for item in c
                       if isinstance(item, dict) and str(item.get(key)) == value]
        else:
            raise ValueError(f"unsupported JSONPath {path!r} at {rest!r}")
        rest = rest[match.end():]
    return current[0] if current else None


def printer_columns() -> dict[str, list[dict]]:
    columns = {}
    for xrd in render.load_documents(ROOT / "apis"):
        version = xrd["spec"]["versions"][0]
        columns[xrd["spec"]["names"]["kind"]] = version.get("additionalPrinterColumns", [])
    return columns


# Usage is measured on a volume; an evicted copy has none, so kubectl prints <none> there.
MEASURED = (".status.usedHuman",)
# Node counts exist only on caches of tier Node, node capacity only on FleetClusters with
# spec.nodeCache; kubectl prints <none> on the others.
NODE_TIER = (".status.nodeTier.summary", ".status.nodeCache.summary")
# A rollout's summary exists only on caches with spec.rollout.waves (design/rollouts.md);
# kubectl prints <none> on the others.
ROLLOUT = (".status.rollout.summary",)
# Image counts exist only on caches with spec.images and their hydrations (DESIGN §8);
# kubectl prints <none> on the others.
IMAGES = (".status.imagesSummary", ".status.images.summary")


def on_node_tier(obj: dict) -> bool:
    spec = obj.get("spec", {})
    return "Node" in (spec.get("tier"), spec.get("storage", {}).get("tier")) \
        or "path" in spec.get("nodeCache", {})


def in_waves(obj: dict) -> bool:
    return bool(obj.get("spec", {}).get("rollout", {}).get("waves"))


def keeps_images(obj: dict) -> bool:
    return bool(obj.get("spec", {}).get("images"))


@pytest.fixture(scope="module")
def final_state() -> dict[tuple[str, str, str], dict]:
    """The last state of every composite the demo touched (every act, the node tier's
    included), by (kind, namespace, name)."""
    played = played_demo()
    assert played.code == 0, played.output
    return {(c["kind"], c["metadata"].get("namespace", ""), c["metadata"]["name"]): c
            for c in played.composites}


def column(kind: str, name: str) -> str:
    return next(c["jsonPath"] for c in printer_columns()[kind] if c["name"] == name)


def test_the_jsonpath_subset_reads_fields_and_filters():
    obj = {"status": {"conditions": [{"type": "Synced", "status": "True"},
                                     {"type": "Ready", "status": "False"}]}}
    assert jsonpath(obj, ".status.conditions[?(@.type=='Ready')].status") == "False"
    assert jsonpath(obj, ".status.missing") is None


@pytest.mark.parametrize("kind", ["FleetCluster", "ModelCache", "ModelCacheHydration",
                                  "ModelDeployment", "ModelReplica"])
def test_every_printer_column_shows_a_value_over_the_demos_final_state(final_state, kind):
    objects = [o for (k, _, _), o in final_state.items() if k == kind]
    assert objects, f"the demo never composed a {kind}"
    for column in printer_columns()[kind]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue  # set by the API server, which the demo does not run
        for obj in objects:
            if column["jsonPath"] in MEASURED and obj.get("status", {}).get("phase") == "Evicted":
                continue
            if column["jsonPath"] in NODE_TIER and not on_node_tier(obj):
                continue
            if column["jsonPath"] in ROLLOUT and not in_waves(obj):
                continue
            if column["jsonPath"] in IMAGES and not keeps_images(obj):
                continue
            value = jsonpath(obj, column["jsonPath"])
            assert value not in (None, ""), \
                f"{kind} {obj['metadata']['name']}: column {column['name']} is empty"


def test_an_evicted_copy_shows_no_usage_for_a_volume_it_no_longer_has(final_state):
    evicted = [o for (k, _, _), o in final_state.items() if k == "ModelCacheHydration"
               and o.get("status", {}).get("phase") == "Evicted"]
    assert evicted and all(jsonpath(o, path) is None for o in evicted for path in MEASURED)


def test_the_node_tier_columns_show_the_node_tier_acts_objects(final_state):
    """NODES, NODE-CACHE and DELIVERY as `kubectl get` prints them at the end of the node tier
    act: every opted-in node warm, each cluster's node capacity, replicas on the node copy."""
    ns, clusters = node_tier.NAMESPACE, node_tier.CLUSTERS
    cache = final_state["ModelCache", ns, node_tier.CACHE]
    tier = cache["status"]["nodeTier"]
    assert jsonpath(cache, column("ModelCache", "NODES")) == \
        f"{tier['readyNodes']}/{tier['desiredNodes']}" == f"{2 * len(clusters)}/{2 * len(clusters)}"
    hydrations = [o for (k, n, _), o in final_state.items()
                  if k == "ModelCacheHydration" and n == ns]
    assert sorted(jsonpath(h, column("ModelCacheHydration", "NODES")) for h in hydrations) == \
        ["2/2"] * len(clusters)
    for name in clusters:
        cluster = final_state["FleetCluster", "", name]
        assert jsonpath(cluster, column("FleetCluster", "NODE-CACHE")) == \
            cluster["status"]["nodeCache"]["summary"] != ""
    replicas = [o for (k, n, _), o in final_state.items() if k == "ModelReplica" and n == ns]
    assert [jsonpath(r, column("ModelReplica", "DELIVERY")) for r in replicas] == \
        ["Node"] * len(clusters)


def test_the_image_columns_show_the_node_tier_acts_engine_image(final_state):
    """IMAGES and ENGINE-IMAGE at the end of the node tier act: the engine image kept on every
    opted-in node of every cluster, and every replica there on a node that holds it."""
    ns, clusters = node_tier.NAMESPACE, node_tier.CLUSTERS
    cache = final_state["ModelCache", ns, node_tier.CACHE]
    assert jsonpath(cache, column("ModelCache", "IMAGES")) == f"1 image {2 * len(clusters)}/{2 * len(clusters)}"
    hydrations = [o for (k, n, _), o in final_state.items()
                  if k == "ModelCacheHydration" and n == ns]
    assert sorted(jsonpath(h, column("ModelCacheHydration", "IMAGES")) for h in hydrations) == \
        ["2/2"] * len(clusters)
    replicas = [o for (k, n, _), o in final_state.items() if k == "ModelReplica" and n == ns]
    assert [jsonpath(r, column("ModelReplica", "ENGINE-IMAGE")) for r in replicas] == \
        ["Warm"] * len(clusters)


def test_caches_without_images_show_no_image_columns(final_state):
    objects = [o for (k, _, _), o in final_state.items()
               if k in ("ModelCache", "ModelCacheHydration") and not keeps_images(o)]
    assert objects and all(jsonpath(o, path) is None for o in objects for path in IMAGES)


def test_caches_off_the_node_tier_show_no_node_columns(final_state):
    for (kind, _, _), obj in final_state.items():
        if kind in ("ModelCache", "ModelCacheHydration", "FleetCluster") and not on_node_tier(obj):
            assert all(jsonpath(obj, path) is None for path in NODE_TIER)


def test_caches_without_waves_show_no_rollout_column(final_state):
    caches = [o for (k, _, _), o in final_state.items() if k == "ModelCache" and not in_waves(o)]
    assert caches and all(jsonpath(o, path) is None for o in caches for path in ROLLOUT)


# --- what the columns say when something is wrong --------------------------------------------
# Each composer's output as `kubectl get` prints it: the composite with the status it wrote.


def listed(xr: dict, outcome: protocol.Outcome, kind: str) -> dict[str, object]:
    """Our columns of `xr` once Crossplane has written the outcome's status, by header."""
    shown = {**xr, "status": outcome.status}
    return {c["name"]: jsonpath(shown, c["jsonPath"]) for c in printer_columns()[kind]}


def cache_with(phases: dict[str, tuple[str, str]], **spec) -> dict[str, object]:
    """A resolved ModelCache on the three-cluster fleet, its hydrations observed in
    `phases` (cluster: (phase, reason)), as `kubectl get modelcaches` shows it."""
    xr = with_resolved(model_cache_xr(**spec))
    required = {"fleet-clusters": FLEET, "model-cache-grant": [grant_admitting(xr)]}
    first = model_cache.compose(protocol.Request(composite=xr, required=required))
    observed = {}
    for key, (desired, _) in first.desired.items():
        phase, reason = phases[desired["spec"]["clusterName"]]
        observed[key] = observed_hydration(desired, phase, reason=reason,
                                           done=3 * GIB if phase == "Ready" else 0)
    outcome = model_cache.compose(protocol.Request(composite=xr, observed=observed,
                                                   required=required))
    return listed(xr, outcome, "ModelCache")


FLEET = [fleet_cluster("gpu-east-1"), fleet_cluster("gpu-east-2"), fleet_cluster("gpu-west-1")]


def test_our_columns_never_share_a_header_with_crossplanes():
    crossplanes = {c["name"] for c in CROSSPLANE_PRINTER_COLUMNS}
    assert {kind: sorted({c["name"] for c in columns} & crossplanes)
            for kind, columns in printer_columns().items()} == \
        {kind: [] for kind in printer_columns()}


def test_a_degraded_cache_shows_one_failed_cluster_and_the_failures_own_reason():
    shown = cache_with({"gpu-east-1": ("Ready", reasons.Hydrated),
                        "gpu-east-2": ("Ready", reasons.Hydrated),
                        "gpu-west-1": ("Failed", reasons.AuthFailed)})
    assert (shown["CLUSTERS"], shown["FAILED"], shown["REASON"]) == ("2/3", 1, "AuthFailed")


def test_a_cache_failed_on_two_clusters_shows_the_first_failed_clusters_reason():
    shown = cache_with({"gpu-east-1": ("Ready", reasons.Hydrated),
                        "gpu-east-2": ("Failed", reasons.DigestMismatch),
                        "gpu-west-1": ("Failed", reasons.AuthFailed)})
    assert (shown["FAILED"], shown["REASON"]) == (2, "DigestMismatch")


def test_a_cache_missing_a_named_cluster_shows_why_it_is_degraded():
    shown = cache_with({"gpu-east-1": ("Ready", reasons.Hydrated)},
                       placement={"clusterNames": ["gpu-east-1", "gpu-ghost"]})
    assert (shown["CLUSTERS"], shown["FAILED"], shown["REASON"]) == ("1/2", 0, "ClusterNotFound")


@pytest.mark.parametrize("phases, reason", [
    ({"gpu-east-1": ("Ready", ""), "gpu-east-2": ("Hydrating", ""), "gpu-west-1": ("Pending", "")},
     "Hydrating"),
    ({"gpu-east-1": ("Ready", ""), "gpu-east-2": ("Ready", ""), "gpu-west-1": ("Ready", "")},
     "Complete"),
], ids=["hydrating", "complete"])
def test_a_cache_without_failures_shows_where_it_is_going(phases, reason):
    shown = cache_with(phases)
    assert (shown["FAILED"], shown["REASON"]) == (0, reason)


def test_a_cache_its_grant_refuses_shows_the_grants_reason():
    xr = with_resolved(model_cache_xr())
    refused = grant(grant_row(xr, admitted=False, reason=reasons.OverQuota,
                              message="3.0GiB on 3 clusters would pass the budget"))
    outcome = model_cache.compose(protocol.Request(composite=xr, required={
        "fleet-clusters": FLEET, "model-cache-grant": [refused]}))
    assert listed(xr, outcome, "ModelCache")["REASON"] == "OverQuota"


def test_a_failed_replica_shows_failed_and_why():
    xr = replica_xr("Fail", hydration={"phase": "Failed", "reason": "AuthFailed", "message": ""})
    shown = listed(xr, model_replica.compose(protocol.Request(composite=xr)), "ModelReplica")
    assert (shown["DELIVERY"], shown["PHASE"], shown["REASON"]) == \
        ("Fail", "Failed", "HydrationFailed")


def deployment_round(xr: dict, cache: dict, observed: dict | None = None) -> protocol.Outcome:
    return model_deployment.compose(protocol.Request(
        composite=xr, observed=observed or {},
        required={model_deployment.FLEET_CLUSTERS_KEY: [fleet_cluster(CLUSTER)], **cache}))


def test_a_deployment_shows_its_failed_replica_and_the_replicas_own_reason():
    xr = deployment(delivery={"onHydrationFailure": "Fail"},
                    placement={"clusterNames": [CLUSTER]})
    cache = cache_required(cache_row(CLUSTER, "Failed", reason="AuthFailed"))
    first = deployment_round(xr, cache)
    observed = {}
    for key, (replica, _) in first.desired.items():  # each replica composed and reporting
        said = model_replica.compose(protocol.Request(composite=replica))
        observed[key] = {**replica, "status": {**said.status, "conditions": [
            {"type": "Ready", "status": "False", "reason": "Creating"}]}}
    shown = listed(xr, deployment_round(xr, cache, observed), "ModelDeployment")
    assert (shown["REPLICAS"], shown["FAILED"], shown["REASON"]) == ("0/1", 1, "HydrationFailed")


def test_a_deployment_whose_replica_has_not_reported_says_replicas_not_ready():
    xr = deployment(placement={"clusterNames": [CLUSTER]})
    shown = listed(xr, deployment_round(xr, cache_required(cache_row(CLUSTER, "Ready"))),
                   "ModelDeployment")
    assert (shown["REPLICAS"], shown["REASON"]) == ("0/1", "ReplicasNotReady")


def test_a_deployment_whose_model_cache_is_missing_says_so():
    xr = deployment(placement={"clusterNames": [CLUSTER]})
    shown = listed(xr, deployment_round(xr, NO_CACHE), "ModelDeployment")
    assert shown["REASON"] == "ModelCacheNotFound"


def test_a_deployment_with_every_replica_ready_shows_available():
    xr = deployment(placement={"clusterNames": [CLUSTER]})
    cache = cache_required(cache_row(CLUSTER, "Ready"))
    first = deployment_round(xr, cache)
    observed = {key: {**replica, "status": {"reason": "Available", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Available"}]}}
        for key, (replica, _) in first.desired.items()}
    shown = listed(xr, deployment_round(xr, cache, observed), "ModelDeployment")
    assert (shown["REPLICAS"], shown["FAILED"], shown["REASON"]) == ("1/1", 0, "Available")
