"""`fleetcache demo`: the example fleet through the real pipeline, round by round.

Three FleetClusters from examples/fleet/ and the ModelCache that selects them go through
the real function server over gRPC. Between rounds a small stand-in for Crossplane and
provider-kubernetes turns desired Objects into observed ones and gives each cluster its
own state: gpu-east-1 has finished hydrating, gpu-east-2 is 40 % through, and gpu-west-1
is still waiting for its volume to bind. The demo prints what was composed and where the
ModelCache stands, and exits non-zero if the fleet does not end in those three phases.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache import render as rendering
from fleetcache.functions import kit

DEMO_COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
DEMO_BYTES = 1_503_238_500
DEMO_FILES = 6
DEMO_DIGEST = "9b1d6b0e3c2f4a5d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d"
EXPECTED_PHASES = {"gpu-east-1": "Ready", "gpu-east-2": "Hydrating", "gpu-west-1": "Pending"}

Echo = Callable[[str], None]


def observe(desired: dict, remote_status: dict | None = None, *, ready: bool = True,
            remote_data: dict | None = None) -> dict:
    """What provider-kubernetes reports once an Object's manifest exists on its cluster."""
    observed = copy.deepcopy(desired)
    remote = copy.deepcopy(desired.get("spec", {}).get("forProvider", {}).get("manifest", {}))
    if remote_status is not None:
        remote["status"] = remote_status
    if remote_data is not None:
        remote["data"] = remote_data
    observed["status"] = {
        "atProvider": {"manifest": remote},
        "conditions": [{"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
                       {"type": "Ready", "status": "True" if ready else "False",
                        "reason": "Available" if ready else "Creating"}],
    }
    return observed


def with_status(xr: dict, status: dict) -> dict:
    out = copy.deepcopy(xr)
    out["status"] = copy.deepcopy(status)
    return out


def cluster_state(name: str, rendered: rendering.Rendered) -> dict[str, dict]:
    """Observed Objects of one hydration, by composed-resource key, for the demo's story."""
    observed: dict[str, dict] = {}
    for res in rendered.resources:
        key = res["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
        kind = kit.get_path(res, "spec.forProvider.manifest.kind")
        if kind == "PersistentVolumeClaim":
            bound = name != "gpu-west-1"
            observed[key] = observe(res, {"phase": "Bound" if bound else "Pending"}, ready=bound)
        elif kind == "Job":
            if name == "gpu-east-1":
                observed[key] = observe(res, {
                    "startTime": "2026-12-02T10:00:00Z", "succeeded": 1,
                    "conditions": [{"type": "Complete", "status": "True"}]})
            else:  # started; on gpu-west-1 its pod waits for the volume to bind
                observed[key] = observe(res, {"startTime": "2026-12-02T10:00:00Z", "active": 1},
                                        ready=False)
        elif kind == "ConfigMap":
            progress = {
                "gpu-east-1": ("Ready", DEMO_BYTES, DEMO_FILES),
                "gpu-east-2": ("Hydrating", DEMO_BYTES * 40 // 100, 2),
                "gpu-west-1": ("Pending", 0, 0),
            }[name]
            observed[key] = observe(res, remote_data={
                "phase": progress[0], "bytesDone": str(progress[1]),
                "bytesTotal": str(DEMO_BYTES), "filesDone": str(progress[2]),
                "filesTotal": str(DEMO_FILES), "commit": DEMO_COMMIT,
                "manifestDigest": DEMO_DIGEST, "reason": "", "message": ""})
        else:
            observed[key] = observe(res)
    return observed


Pipeline = Callable[..., rendering.Rendered]


def reconcile(pipeline: Pipeline, composite: dict, composition: dict,
              required: list[dict], observe_all: Callable[[rendering.Rendered], dict[str, dict]],
              rounds: int = 4) -> rendering.Rendered:
    """Render, let the clusters act on what was composed, and render again until nothing
    new is composed: what Crossplane's reconcile loop does over a few passes."""
    observed: list[dict] = []
    rendered = pipeline(composite, composition, observed, required)
    for _ in range(rounds):
        observed = [annotated(r, k) for k, r in observe_all(rendered).items()]
        again = pipeline(rendered.composite, composition, observed, required)
        settled = [r["metadata"]["name"] for r in again.resources] == \
            [r["metadata"]["name"] for r in rendered.resources]
        rendered = again
        if settled:
            break
    return rendered


def annotated(res: dict, key: str) -> dict:
    out = copy.deepcopy(res)
    out.setdefault("metadata", {}).setdefault("annotations", {})[
        rendering.RESOURCE_NAME_ANNOTATION] = key
    return out


def summarize(rendered: rendering.Rendered, echo: Echo) -> None:
    for res in rendered.resources:
        key = res["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
        manifest = kit.get_path(res, "spec.forProvider.manifest")
        if manifest:
            where = kit.get_path(res, "spec.providerConfigRef.name")
            echo(f"    {key:<28} Object -> {manifest['kind']} {manifest['metadata']['name']}"
                 f" on {where}")
        else:
            echo(f"    {key:<28} {res['kind']} {res['metadata']['name']}")


def print_table(rows: list[list[str]], echo: Echo) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        echo("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def run(repo_root: Path, *, out: Echo = print,
        on_composite: Callable[[dict], None] | None = None) -> int:
    """Play the rounds; return 0 when the fleet ends as the story says, 1 otherwise.

    `on_composite` sees every composite as each round leaves it (the Argo CD health
    checks are tested on those)."""
    schemas = rendering.xrd_schemas(rendering.load_documents(repo_root / "apis"))
    fleet = [rendering.admit(d, schemas)
             for d in rendering.load_documents(repo_root / "examples" / "fleet")]
    clusters = [d for d in fleet if d.get("kind") == "FleetCluster"]
    caches = [d for d in fleet if d.get("kind") == "ModelCache"]
    compositions = {d["spec"]["compositeTypeRef"]["kind"]: d
                    for d in rendering.load_documents(repo_root / "compositions")
                    if d.get("kind") == "Composition"}
    if len(caches) != 1 or len(clusters) != 3:
        out(f"examples/fleet must hold 3 FleetClusters and 1 ModelCache "
            f"(found {len(clusters)} and {len(caches)})")
        return 1
    cache = caches[0]

    with rendering.function_process() as address, rendering.channel_to(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)

        def pipeline(composite: dict, composition: dict, observed: list[dict] | None = None,
                     required: list[dict] | None = None) -> rendering.Rendered:
            rendered = rendering.run_pipeline(stub, composite, composition, observed, required)
            if on_composite is not None:
                on_composite(rendered.composite)
            return rendered

        out(f"fleetcache demo: function server on {address}\n")

        out("Round 1 - FleetClusters compose their ProviderConfigs")
        fleet_status = []
        for cluster in sorted(clusters, key=lambda c: c["metadata"]["name"]):
            rendered = pipeline(cluster, compositions["FleetCluster"])
            if rendered.fatal:
                out(f"  {cluster['metadata']['name']}: {rendered.fatal[0]}")
                return 1
            summarize(rendered, out)
            observed = [annotated(observe(r), r["metadata"]["annotations"][
                rendering.RESOURCE_NAME_ANNOTATION]) for r in rendered.resources]
            again = pipeline(rendered.composite,
                                           compositions["FleetCluster"], observed)
            fleet_status.append(again.composite)

        out("\nRound 2 - the ModelCache resolves once, on the first Ready cluster")
        rendered = pipeline(cache, compositions["ModelCache"], [], fleet_status)
        if rendered.fatal:
            out(f"  {rendered.fatal[0]}")
            return 1
        summarize(rendered, out)

        out("\nRound 3 - the resolve Job wrote its result; the commit is latched and every "
            "cluster gets a hydration")
        observed = []
        for res in rendered.resources:
            key = res["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
            data = None
            if kit.get_path(res, "spec.forProvider.manifest.kind") == "ConfigMap":
                data = {"phase": "Resolved", "commit": DEMO_COMMIT, "bytes": str(DEMO_BYTES),
                        "files": str(DEMO_FILES), "manifestDigest": DEMO_DIGEST,
                        "repo": "", "revision": "", "reason": "", "message": ""}
            observed.append(annotated(observe(res, remote_data=data), key))
        rendered = pipeline(rendered.composite, compositions["ModelCache"],
                                          observed, fleet_status)
        summarize(rendered, out)
        cache_xr = rendered.composite
        hydrations = [rendering.admit(h, schemas) for h in rendered.by_kind("ModelCacheHydration")]

        out("\nRound 4 - each cluster's hydration composes its volume, Job and progress")
        observed_hydrations = []
        for hydration in hydrations:
            name = hydration["spec"]["clusterName"]
            out(f"  {name}:")
            rendered = reconcile(pipeline, hydration, compositions["ModelCacheHydration"],
                                 fleet_status, lambda r, n=name: cluster_state(n, r))
            summarize(rendered, out)
            key = hydration["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
            observed_hydrations.append(annotated(with_status(hydration,
                                                             rendered.composite["status"]), key))

        out("\nRound 5 - the ModelCache rolls the fleet up")
        final = pipeline(cache_xr, compositions["ModelCache"],
                                       observed_hydrations, fleet_status)

    status = final.composite.get("status", {})
    out("\n$ kubectl get modelcachehydrations")
    rows = [["CLUSTER", "PHASE", "PROGRESS", "REASON"]]
    rows += [[c["name"], c["phase"],
              f"{c['bytesDone'] * 100 // c['bytesTotal'] if c['bytesTotal'] else 0}%",
              c.get("reason", "")] for c in status.get("clusters", [])]
    print_table(rows, out)
    out("\n$ kubectl get modelcache " + cache["metadata"]["name"])
    print_table([["NAME", "READY", "SIZE", "COMMIT", "PROGRESS"],
                 [cache["metadata"]["name"], status.get("summary", ""),
                  status.get("sizeHuman", ""), status.get("commitShort", ""),
                  f"{status.get('progressPercent', 0)}%"]], out)
    out("\nModelCache status:")
    out(rendering.dump([{"status": status}]))
    phases = {c["name"]: c["phase"] for c in status.get("clusters", [])}
    if phases != EXPECTED_PHASES:
        out(f"demo FAILED: expected {EXPECTED_PHASES}, got {phases}")
        return 1
    out("demo OK: one cluster Ready, one Hydrating at 40%, one Pending")
    return 0
