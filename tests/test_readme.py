"""The README's five-minute tour matches what the examples and composers actually do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetcache.devtools import render
from fleetcache.functions import naming, protocol
from fleetcache.functions.composers import model_deployment
from tests.support.deployments import cache_required, cache_row
from tests.support.fleet import fleet_cluster

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TOUR = README[README.index("## A five-minute tour"):README.index("What happens underneath")]
CROSSPLANE_COLUMNS = ["SYNCED", "READY", "COMPOSITION", "AGE"]


def printed_rows(command: str) -> list[list[str]]:
    """The `# ...` lines the tour shows under `kubectl get <command>`."""
    block = TOUR[TOUR.index(f"kubectl get {command}\n"):].splitlines()[1:]
    rows = []
    for line in block:
        if not line.startswith("# ") or re.match(r"# \d\.", line):
            break
        rows.append(line[2:].split())
    return rows


def example(path: str) -> list[dict]:
    return render.load_documents(ROOT / path)


def test_every_file_the_tour_applies_exists_and_holds_fleetcache_kinds():
    paths = re.findall(r"kubectl apply -f (\S+)", TOUR)
    assert paths
    for path in paths:
        assert all(d["apiVersion"] == naming.API_VERSION for d in example(path)), path


@pytest.mark.parametrize("command, kind", [("fleetclusters", "FleetCluster"),
                                           ("modelcaches", "ModelCache"),
                                           ("modelcachegrants", "ModelCacheGrant"),
                                           ("modelcachehydrations", "ModelCacheHydration"),
                                           ("modeldeployments", "ModelDeployment"),
                                           ("modelreplicas", "ModelReplica")])
def test_the_tours_columns_are_the_xrds_then_crossplanes(command, kind):
    xrd = next(d for d in example("apis") if d["spec"]["names"]["kind"] == kind)
    ours = [c["name"] for c in xrd["spec"]["versions"][0]["additionalPrinterColumns"]]
    header = [c for c in printed_rows(command)[0] if c != "..."]
    expected = ["NAME", *ours, *CROSSPLANE_COLUMNS]
    assert header == expected[:len(header)]


def test_the_tours_fleet_clusters_are_the_example_fleet():
    names = sorted(d["metadata"]["name"] for d in example("examples/fleet/fleetclusters.yaml"))
    assert [row[0] for row in printed_rows("fleetclusters")[1:]] == names


def test_the_tours_hydrations_are_named_like_the_composer_names_them():
    cache = example("examples/fleet/modelcache.yaml")[0]["metadata"]["name"]
    for name, cluster, *_ in printed_rows("modelcachehydrations")[1:]:
        assert name == naming.child_name(cache, cluster)


def test_the_tours_replicas_are_where_and_how_compose_model_deployment_puts_them():
    deployment = example("examples/modeldeployment-cached.yaml")[0]
    deployment["metadata"]["uid"] = "1"
    phases = {row[1]: row[2] for row in printed_rows("modelcachehydrations")[1:]}
    cache = example("examples/fleet/modelcache.yaml")[0]["metadata"]["name"]
    labels = {"fleetcache.dev/tier": "serving", "gpu": "h100"}
    fleet = [fleet_cluster(n, labels=labels) for n in sorted(phases)]
    outcome = model_deployment.compose(protocol.Request(
        composite=deployment, required={
            model_deployment.FLEET_CLUSTERS_KEY: fleet,
            **cache_required(*(cache_row(n, p) for n, p in sorted(phases.items())),
                             name=cache)}))
    composed = sorted((r["metadata"]["name"], r["spec"]["clusterName"], r["spec"]["delivery"])
                      for r, _ in outcome.desired.values())
    shown = sorted((row[0], row[1], row[2]) for row in printed_rows("modelreplicas")[1:])
    assert shown == composed
