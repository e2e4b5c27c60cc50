"""`kubectl get` columns over the demo's final state: every column shows a value."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from fleetcache.devtools import demo, render
from fleetcache.devtools.demo import node_tier

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


def on_node_tier(obj: dict) -> bool:
    spec = obj.get("spec", {})
    return "Node" in (spec.get("tier"), spec.get("storage", {}).get("tier")) \
        or "path" in spec.get("nodeCache", {})


@pytest.fixture(scope="module")
def final_state() -> dict[tuple[str, str, str], dict]:
    """The last state of every composite the demo touched (every act, the node tier's
    included), by (kind, namespace, name)."""
    state: dict[tuple[str, str, str], dict] = {}

    def keep(c: dict) -> None:
        state[c["kind"], c["metadata"].get("namespace", ""), c["metadata"]["name"]] = \
            copy.deepcopy(c)

    assert demo.run(ROOT, fast=True, out=lambda _: None, on_composite=keep) == 0
    return state


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


def test_caches_off_the_node_tier_show_no_node_columns(final_state):
    for (kind, _, _), obj in final_state.items():
        if kind in ("ModelCache", "ModelCacheHydration", "FleetCluster") and not on_node_tier(obj):
            assert all(jsonpath(obj, path) is None for path in NODE_TIER)
