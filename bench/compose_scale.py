"""compose-model-cache at fleet scale, against the floor measured in the same run.

For N target clusters the request carries N FleetClusters (required resources) and N
observed ModelCacheHydrations mid-rollout (a realistic mix of Ready, Hydrating, Pending
and Failed). Timed, per call, best of several repeats:

- floor: decode the request bytes, read every Struct into dicts (what any Python
  function must do to look at its input), build a response holding the same number of
  resources of the same size, and encode it;
- in process: decode the request bytes, run the real server's `run`, encode the response;
- gRPC: one RunFunction call to the real server on loopback.

Sizes are printed too: the request Crossplane sends, the response it has to accept (at
most 4 MiB, see functions/server.py), and the ModelCache status the response writes (the
object etcd stores). A fleet whose response is over the limit gets a fatal result; its
row says so and is not timed.

    .venv/bin/python bench/compose_scale.py [--sizes 10,100,1000,4000,10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.functions import naming
from fleetcache.devtools import render
from fleetcache.functions import server
from fleetcache.functions.composers import model_cache as composer

NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)
COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
BYTES = 16_000_000_000
PHASES = ("Ready", "Ready", "Hydrating", "Pending", "Ready", "Failed", "Hydrating", "Ready")


def cluster_name(i: int) -> str:
    return f"gpu-{('east', 'west', 'north', 'south')[i % 4]}-{i:05d}"


def fleet_cluster(i: int) -> dict:
    name = cluster_name(i)
    return {
        "apiVersion": naming.API_VERSION, "kind": "FleetCluster",
        "metadata": {"name": name, "labels": {"gpu": "h100", "region": name.split("-")[1],
                                              "tier": "serving"}},
        "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                         "name": f"{name}-kubeconfig", "key": "kubeconfig"},
                 "cache": {"storageClassName": "fast-rwx", "accessMode": "ReadWriteMany",
                           "capacity": "4Ti"}},
        "status": {"providerConfigName": name,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Available"},
                                  {"type": "Synced", "status": "True",
                                   "reason": "ReconcileSuccess"}]},
    }


def model_cache_xr(n: int) -> dict:
    return {
        "apiVersion": naming.API_VERSION, "kind": "ModelCache",
        "metadata": {"name": "llama-70b", "namespace": "serving", "uid": "0000"},
        "spec": {"source": {"huggingFace": {"repo": "meta-llama/Llama-3.1-70B",
                                            "revision": "main"},
                            "allowPatterns": ["*.safetensors", "*.json"]},
                 "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                 "rollout": {"maxConcurrent": n}},
        "status": {"resolved": {"repo": "meta-llama/Llama-3.1-70B", "revision": "main",
                                "commit": COMMIT, "bytes": BYTES, "files": 40,
                                "manifestDigest": "ab" * 32, "sourceDigest": ""}},
    }


def observed_hydration(cache: dict, i: int) -> dict:
    phase = PHASES[i % len(PHASES)]
    done = {"Ready": BYTES, "Hydrating": BYTES // 3, "Pending": 0, "Failed": BYTES // 5}[phase]
    return {
        "apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
        "metadata": {"name": naming.child_name("llama-70b", cluster_name(i)),
                     "namespace": "serving"},
        "spec": {"clusterName": cluster_name(i), "modelCacheName": "llama-70b",
                 "commit": COMMIT, "bytes": BYTES,
                 "source": cache["spec"]["source"], "storage": {"size": "17Gi"}},
        "status": {"phase": phase,
                   "progress": {"bytesDone": done, "bytesTotal": BYTES, "filesDone": 10,
                                "filesTotal": 40, "percent": done * 100 // BYTES},
                   "reason": "DigestMismatch" if phase == "Failed" else "",
                   "message": "the bytes served did not match" if phase == "Failed" else ""},
    }


def request_for(n: int) -> fnv1.RunFunctionRequest:
    cache = model_cache_xr(n)
    cache["status"]["resolved"]["sourceDigest"] = composer.read_spec(cache["spec"]).source_digest
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, cache)
    for i in range(n):
        resource.update(req.observed.resources[f"hydration-{cluster_name(i)}"],
                        observed_hydration(cache, i))
        req.required_resources["fleet-clusters"].items.add().resource.CopyFrom(
            resource.dict_to_struct(fleet_cluster(i)))
    return req


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


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
    rsp = server.run(fnv1.RunFunctionRequest.FromString(payload), NOW)
    rsp.SerializeToString()
    return rsp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,4000,10000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    print(f"{'clusters':>8} {'request':>9} {'response':>9} {'status':>8}")
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for n in sizes:
            req = request_for(n)
            payload = req.SerializeToString()
            shape = in_process_call(payload)
            fatal = [r.message for r in shape.results if r.severity == fnv1.SEVERITY_FATAL]
            status = resource.struct_to_dict(shape.desired.composite.resource).get("status")
            print(f"{n:>8} {len(payload) / 1e6:>8.2f}M "
                  f"{shape.ByteSize() / 1e6:>8.2f}M {len(json.dumps(status or {})) / 1e3:>7.1f}k"
                  + (f"  fatal: {fatal[0][:110]}..." if fatal else ""))
            if fatal:
                continue
            assert len(shape.desired.resources) == n, len(shape.desired.resources)
            repeats = max(2, args.repeats if n <= 1000 else args.repeats // 2)
            floor = best(lambda: floor_call(payload, shape), repeats)
            inproc = best(lambda: in_process_call(payload), repeats)
            grpc_time = best(lambda: stub.RunFunction(req, timeout=600), repeats)
            rows.append((n, len(payload), floor, inproc, grpc_time))
    print()
    print(f"{'clusters':>8} {'request':>9} {'floor ms':>9} {'in-proc ms':>10} {'ratio':>6} "
          f"{'gRPC ms':>9} {'ratio':>6} {'us/cluster':>10}")
    for n, size, floor, inproc, grpc_time in rows:
        print(f"{n:>8} {size / 1e6:>8.2f}M {floor * 1e3:>9.1f} {inproc * 1e3:>10.1f} "
              f"{inproc / floor:>6.2f} {grpc_time * 1e3:>9.1f} {grpc_time / floor:>6.2f} "
              f"{inproc / n * 1e6:>10.1f}")
    per_cluster = [inproc / n for n, _, _, inproc, _ in rows]
    print(f"growth: time per cluster from {rows[0][0]} to {rows[-1][0]} clusters changes "
          f"{per_cluster[-1] / per_cluster[0]:.2f}x (1.0 = linear); "
          f"median ratio to floor {statistics.median(r[3] / r[2] for r in rows):.2f}")


if __name__ == "__main__":
    main()
