"""compose-model-deployment at 1,000 replicas over 500 clusters, against a floor measured
in the same run.

The request carries 500 FleetClusters and one ModelCache whose status lists 500 target
clusters (a mix of Ready, Hydrating, Pending and Failed), as required resources. Two
scenarios: the first compose (nothing observed yet) and the steady state (all 1,000
ModelReplicas observed, Ready). Timed per call, best of several repeats:

- floor: decode the request bytes, read every Struct into dicts, build a response of the
  same resources with the SDK's resource.update, and encode it (bench/compose_scale.py's
  floor: what any Python function must do to look at its input and answer);
- in process: decode, run the real server's `run` (compose-model-deployment), encode;
- gRPC: one RunFunction call to the real server on loopback.

    .venv/bin/python bench/compose_deployment.py [--replicas 1000] [--clusters 500] [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy

from compose_scale import best, cluster_name, fleet_cluster, floor_call, in_process_call
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache import render
from fleetcache.functions import kit
from fleetcache.functions import model_deployment as composer

COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
BYTES = 16_000_000_000
PHASES = ("Ready", "Ready", "Hydrating", "Pending", "Ready", "Failed", "Hydrating", "Ready")


def deployment_xr(replicas: int) -> dict:
    return {
        "apiVersion": kit.API_VERSION, "kind": "ModelDeployment",
        "metadata": {"name": "llama-70b-chat", "namespace": "serving", "uid": "0000"},
        "spec": {"modelCacheRef": {"name": "llama-70b"}, "replicas": replicas,
                 "maxReplicasPerCluster": 4,
                 "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                 "delivery": {"whileHydrating": "Source", "onHydrationFailure": "Source",
                              "switchToCache": "OnReady"},
                 "engine": {"image": "vllm/vllm-openai:v0.11.0",
                            "args": ["--model=$(FLEETCACHE_MODEL)",
                                     "--revision=$(FLEETCACHE_MODEL_REVISION)",
                                     "--served-model-name=llama-70b", "--tensor-parallel-size=8"],
                            "env": [{"name": "VLLM_NO_USAGE_STATS", "value": "1"}],
                            "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "640Gi"}},
                            "port": 8000, "readinessPath": "/health",
                            "sharedMemorySize": "16Gi"}},
    }


def model_cache(clusters: int) -> dict:
    rows = []
    for i in range(clusters):
        phase = PHASES[i % len(PHASES)]
        done = {"Ready": BYTES, "Hydrating": BYTES // 3, "Pending": 0, "Failed": BYTES // 5}[phase]
        rows.append({"name": cluster_name(i), "phase": phase, "bytesDone": done,
                     "bytesTotal": BYTES, "reason": "DigestMismatch" if phase == "Failed" else "",
                     "message": "the bytes served did not match" if phase == "Failed" else ""})
    return {"apiVersion": kit.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "llama-70b", "namespace": "serving"},
            "spec": {"source": {"huggingFace": {"repo": "meta-llama/Llama-3.1-70B"}}},
            "status": {"resolved": {"repo": "meta-llama/Llama-3.1-70B", "revision": "main",
                                    "commit": COMMIT, "bytes": BYTES, "files": 40},
                       "clusters": rows}}


def request_for(replicas: int, clusters: int, steady: bool) -> fnv1.RunFunctionRequest:
    xr = deployment_xr(replicas)
    cache = model_cache(clusters)
    fleet = [fleet_cluster(i) for i in range(clusters)]
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, xr)
    for item in fleet:
        req.required_resources[composer.FLEET_CLUSTERS_KEY].items.add().resource.CopyFrom(
            resource.dict_to_struct(item))
    req.required_resources[composer.MODEL_CACHE_KEY].items.add().resource.CopyFrom(
        resource.dict_to_struct(cache))
    if steady:
        first = composer.compose(kit.Request(
            composite=xr, required={composer.FLEET_CLUSTERS_KEY: fleet,
                                    composer.MODEL_CACHE_KEY: [cache]}))
        for key, (desired, _) in first.desired.items():
            observed = copy.deepcopy(desired)
            observed["status"] = {"phase": "Ready", "conditions": [
                {"type": "Ready", "status": "True", "reason": "Available"},
                {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}]}
            resource.update(req.observed.resources[key], observed)
    return req


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for label, steady in (("first compose", False), ("steady state", True)):
            req = request_for(args.replicas, args.clusters, steady)
            payload = req.SerializeToString()
            shape = in_process_call(payload)
            fatal = [r.message for r in shape.results if r.severity == fnv1.SEVERITY_FATAL]
            assert not fatal, fatal
            assert len(shape.desired.resources) == args.replicas, len(shape.desired.resources)
            floor = best(lambda: floor_call(payload, shape), args.repeats)
            inproc = best(lambda: in_process_call(payload), args.repeats)
            grpc_time = best(lambda: stub.RunFunction(req, timeout=600), args.repeats)
            rows.append((label, len(payload), shape.ByteSize(), floor, inproc, grpc_time))
    print(f"compose-model-deployment: {args.replicas} replicas over {args.clusters} clusters, "
          f"best of {args.repeats}")
    print(f"{'scenario':>14} {'request':>8} {'response':>9} {'floor ms':>9} {'in-proc ms':>10} "
          f"{'ratio':>6} {'gRPC ms':>9} {'ratio':>6} {'us/replica':>10}")
    for label, size, out, floor, inproc, grpc_time in rows:
        print(f"{label:>14} {size / 1e6:>7.2f}M {out / 1e6:>8.2f}M {floor * 1e3:>9.1f} "
              f"{inproc * 1e3:>10.1f} {inproc / floor:>6.2f} {grpc_time * 1e3:>9.1f} "
              f"{grpc_time / floor:>6.2f} {inproc / args.replicas * 1e6:>10.1f}")


if __name__ == "__main__":
    main()
