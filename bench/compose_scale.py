"""compose-model-cache at fleet scale, against the floor measured in the same run.

For N target clusters the request carries N FleetClusters and the namespace's
ModelCacheGrant (required resources) and N observed ModelCacheHydrations mid-rollout (a
realistic mix of Ready, Hydrating, Pending and Failed), with `rollout.maxConcurrent: N`, so
the response holds N hydrations. The fleet gets there the way a control plane does
(bench/plane.py: every step runs the real server, every requirement is answered as
Crossplane answers it): the cache composes its resolve step, the agent's record latches
the commit, the grant admits the resolved cache, the cache fans out, the hydrations report
their phases. Timed, per call, best of several repeats:

- floor: decode the request bytes, read every Struct into dicts (what any Python
  function must do to look at its input), build a response holding the same
  resources with the SDK's resource.update, and encode it;
- in process: decode the request bytes, run the real server's `run`, encode the response;
- gRPC: one RunFunction call to the real server on loopback;
- composer: the composer alone (fleetcache.functions.server.composer_for) on the request
  decoded beforehand, the part of "in process" that is not protobuf work.

The four are interleaved in every repeat (floor, in process, gRPC, composer, floor, ...), so
load from other jobs on a shared machine falls on all of them; compare the ratios, not the
times.

Sizes are printed too: the request Crossplane sends, the response it has to accept (at
most 4 MiB, see functions/server.py), and the ModelCache status the response writes (the
object etcd stores). A fleet whose response is over the limit gets a fatal result; its
row says so and is not timed.

    .venv/bin/python bench/compose_scale.py [--sizes 10,100,1000,3000] [--repeats 5]
    .venv/bin/python bench/compose_scale.py --smoke    # the same code paths at 5 and 20 clusters, in seconds
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import plane
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render
from fleetcache.functions import server

SMOKE_SIZES = "5,20"
SMOKE_REPEATS = 2
NAMESPACE = "serving"
CACHE = "llama-70b"
GRANT = "serving-fleet"
REPO = "meta-llama/Llama-3.1-70B"
COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
MANIFEST_DIGEST = "ab" * 32
BYTES = 16_000_000_000
FILES = 40
PHASES = ("Ready", "Ready", "Hydrating", "Pending", "Ready", "Failed", "Hydrating", "Ready")


def cluster_name(i: int) -> str:
    return f"gpu-{('east', 'west', 'north', 'south')[i % 4]}-{i:05d}"


def fleet_cluster(i: int) -> dict:
    name = cluster_name(i)
    return {
        "apiVersion": plane.API_VERSION, "kind": "FleetCluster",
        "metadata": {"name": name, "labels": {"gpu": "h100", "region": name.split("-")[1],
                                              "tier": "serving"}},
        "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                         "name": f"{name}-kubeconfig", "key": "kubeconfig"},
                 "cache": {"storageClassName": "fast-rwx", "accessMode": "ReadWriteMany",
                           "capacity": "4Ti"}},
        "status": {"providerConfigName": name, "conditions": plane.READY_CONDITIONS},
    }


def model_cache_xr(n: int) -> dict:
    return {
        "apiVersion": plane.API_VERSION, "kind": "ModelCache",
        "metadata": {"name": CACHE, "namespace": NAMESPACE, "uid": "0000",
                     "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"grantRef": {"name": GRANT},
                 "source": {"huggingFace": {"repo": REPO, "revision": "main"},
                            "allowPatterns": ["*.safetensors", "*.json"]},
                 "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                 "rollout": {"maxConcurrent": n}},
    }


def grant_xr() -> dict:
    return {
        "apiVersion": plane.API_VERSION, "kind": "ModelCacheGrant",
        "metadata": {"name": GRANT, "namespace": NAMESPACE, "uid": "0001"},
        "spec": {"clusters": {"clusterSelector": {"matchLabels": {"tier": "serving"}}},
                 "quota": {"bytes": "1Pi"}},
    }


def resolve_record() -> dict:
    """The resolve Job's record, as the agent writes it into the resolve ConfigMap."""
    return {"phase": "Resolved", "repo": REPO, "revision": "main", "commit": COMMIT,
            "files": str(FILES), "bytes": str(BYTES), "manifestDigest": MANIFEST_DIGEST,
            "reason": "", "message": ""}


def hydration_status(i: int) -> dict:
    """Cluster i's ModelCacheHydration status, mid-rollout."""
    phase = PHASES[i % len(PHASES)]
    done = {"Ready": BYTES, "Hydrating": BYTES // 3, "Pending": 0, "Failed": BYTES // 5}[phase]
    status = {"phase": phase,
              "progress": {"bytesDone": done, "bytesTotal": BYTES, "filesDone": 10,
                           "filesTotal": FILES, "percent": done * 100 // BYTES},
              "reason": "DigestMismatch" if phase == "Failed" else "",
              "message": "the bytes served did not match" if phase == "Failed" else ""}
    if phase == "Ready":
        status |= {"servingCommit": COMMIT, "servingRepo": REPO}
    return status


def cluster_index(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def observe(call: plane.Call) -> dict[str, dict]:
    """What the call composed, as observed afterwards: every Object exists and is Ready
    (the resolve ConfigMap holding the agent's record), every hydration reports its phase."""
    observed = {}
    for key, doc in call.desired.items():
        if doc["kind"] == "ModelCacheHydration":
            status = hydration_status(cluster_index(doc["spec"]["clusterName"]))
            ready = status["phase"] == "Ready"
            status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False",
                                     "reason": "Available" if ready else "Creating"}]
            observed[key] = {**doc, "status": status}
            continue
        observed[key] = plane.observed_ready(doc)
        manifest = observed[key]["status"].get("atProvider", {}).get("manifest", {})
        if manifest.get("kind") == "ConfigMap":
            manifest["data"] = resolve_record()
    return observed


@dataclass
class Fleet:
    """A ModelCache fanned out over n clusters: its state after the fan-out, and the
    requirements its calls are answered from."""

    clusters: list[dict]
    grant: dict
    fanned: plane.Call  # the fan-out; fatal when the response is over the limit

    @property
    def available(self) -> list[dict]:
        return [*self.clusters, self.grant]


def fleet_of(n: int) -> Fleet:
    """Bring a ModelCache over n clusters to its rollout, call by call as a control plane
    would: resolve, latch, admit, fan out."""
    clusters = [fleet_cluster(i) for i in range(n)]
    grant = grant_xr()
    first = plane.compose(model_cache_xr(n), available=[*clusters, grant])
    observed = observe(first)
    if not any((plane.manifest_of(o) or {}).get("kind") == "ConfigMap" for o in observed.values()):
        raise plane.ComposeError("compose-model-cache composed no resolve ConfigMap to hold the "
                                 f"agent's record; it composed {sorted(observed)}")
    latched = plane.compose(first.composite, observed, [*clusters, grant])
    if latched.composite.get("status", {}).get("resolved", {}).get("commit") != COMMIT:
        raise plane.ComposeError("compose-model-cache did not latch the resolve record into "
                                 f"status.resolved: {latched.composite.get('status')}")
    grant = plane.compose(grant, available=[*clusters, latched.composite]).composite
    fanned = plane.compose(latched.composite, observe(latched), [*clusters, grant],
                           allow_fatal=True)
    return Fleet(clusters, grant, fanned)


def best(calls: list[Callable[[], object]], repeats: int) -> list[float]:
    """The best time of each call over `repeats` rounds, the calls interleaved within a round
    (floor, in process, gRPC, composer, floor, ...), so a burst of load on the shared machine
    hits them all rather than whichever ran during it. A call that returns a float times
    itself (the part it measures); any other call is timed whole."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(repeats):
        for fn, spent in zip(calls, times, strict=True):
            start = time.perf_counter()
            measured = fn()
            spent.append(measured if isinstance(measured, float) else time.perf_counter() - start)
    return [min(spent) for spent in times]


def timed_calls(payload: bytes, shape: fnv1.RunFunctionResponse, stub: grpcv1.FunctionRunnerServiceStub,
                req: fnv1.RunFunctionRequest) -> list[Callable[[], object]]:
    """floor, in process, gRPC and the composer alone, on one request."""
    return [functools.partial(floor_call, payload, shape), functools.partial(in_process_call, payload),
            functools.partial(grpc_call, stub, req), functools.partial(plane.composer_seconds, req)]


def floor_call(payload: bytes, shape: fnv1.RunFunctionResponse) -> None:
    """Decode, read every Struct, and build + encode a response of the same size."""
    req = fnv1.RunFunctionRequest.FromString(payload)
    resource.struct_to_dict(req.observed.composite.resource)
    for item in req.observed.resources.values():
        resource.struct_to_dict(item.resource)
    for items in req.required_resources.values():
        for item in items.items:
            resource.struct_to_dict(item.resource)
    rsp = fnv1.RunFunctionResponse()
    for key, desired in shape.desired.resources.items():
        resource.update(rsp.desired.resources[key], resource.struct_to_dict(desired.resource))
    resource.update(rsp.desired.composite, resource.struct_to_dict(shape.desired.composite.resource))
    rsp.SerializeToString()


def in_process_call(payload: bytes) -> fnv1.RunFunctionResponse:
    rsp = server.run(fnv1.RunFunctionRequest.FromString(payload), plane.NOW)
    rsp.SerializeToString()
    return rsp


def grpc_call(stub: grpcv1.FunctionRunnerServiceStub, req: fnv1.RunFunctionRequest) -> None:
    stub.RunFunction(req, timeout=600)


def fatal_of(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,3000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help=f"the same code paths at tiny sizes (--sizes {SMOKE_SIZES} --repeats "
                             f"{SMOKE_REPEATS}), in seconds: checks the bench runs, measures nothing")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.repeats = SMOKE_SIZES, SMOKE_REPEATS
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    print(f"{'clusters':>8} {'request':>9} {'response':>9} {'status':>8}")
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for n in sizes:
            fleet = fleet_of(n)
            if fleet.fanned.fatal:
                print(f"{n:>8} {fleet.fanned.request.ByteSize() / 1e6:>8.2f}M  "
                      f"fatal: {fleet.fanned.fatal[0][:110]}...")
                continue
            req = plane.compose(fleet.fanned.composite, observe(fleet.fanned), fleet.available,
                                allow_fatal=True).request
            payload = req.SerializeToString()
            shape = in_process_call(payload)
            fatal = fatal_of(shape)
            if fatal:
                print(f"{n:>8} {len(payload) / 1e6:>8.2f}M  fatal: {fatal[0][:110]}...")
                continue
            status = server.from_struct(shape.desired.composite.resource).get("status")
            print(f"{n:>8} {len(payload) / 1e6:>8.2f}M "
                  f"{shape.ByteSize() / 1e6:>8.2f}M {len(json.dumps(status or {})) / 1e3:>7.1f}k")
            hydrations = sum(1 for d in shape.desired.resources.values()
                             if server.from_struct(d.resource).get("kind") == "ModelCacheHydration")
            assert hydrations == n, f"{hydrations} hydrations composed for {n} clusters"
            repeats = max(2, args.repeats if n <= 1000 else args.repeats // 2)
            floor, inproc, grpc_time, alone = best(timed_calls(payload, shape, stub, req), repeats)
            rows.append((n, len(payload), floor, inproc, grpc_time, alone))
    if not rows:
        raise SystemExit("no size could be timed (every response was over the limit)")
    print()
    print(f"{'clusters':>8} {'request':>9} {'floor ms':>9} {'in-proc ms':>10} {'ratio':>6} "
          f"{'gRPC ms':>9} {'ratio':>6} {'composer ms':>11} {'us/cluster':>10}")
    for n, size, floor, inproc, grpc_time, alone in rows:
        print(f"{n:>8} {size / 1e6:>8.2f}M {floor * 1e3:>9.1f} {inproc * 1e3:>10.1f} "
              f"{inproc / floor:>6.2f} {grpc_time * 1e3:>9.1f} {grpc_time / floor:>6.2f} "
              f"{alone * 1e3:>11.1f} {inproc / n * 1e6:>10.1f}")
    print()
    for n, _, floor, inproc, grpc_time, _ in rows:
        print(f"ratio at {n} clusters: in-process/floor {inproc / floor:.2f}, "
              f"gRPC/floor {grpc_time / floor:.2f}")
    per_cluster = [inproc / n for n, _, _, inproc, _, _ in rows]
    print(f"growth: time per cluster from {rows[0][0]} to {rows[-1][0]} clusters changes "
          f"{per_cluster[-1] / per_cluster[0]:.2f}x (1.0 = linear); "
          f"median ratio to floor {statistics.median(r[3] / r[2] for r in rows):.2f}")


if __name__ == "__main__":
    main()
