"""compose-model-deployment at 1,000 replicas over 500 clusters, against a floor measured
in the same run, and the message sizes against Crossplane's 4 MiB gRPC limit.

The request carries, as required resources, 500 FleetClusters, one ModelCache targeting
all of them and its 500 ModelCacheHydrations (a mix of Ready, Hydrating, Pending and
Failed). The engine has a realistic spec plus one argument of --arg-bytes (a chat
template, say: 4 KiB by default). Two scenarios: the first compose (nothing observed yet)
and the steady state (all 1,000 ModelReplicas observed, Ready). Timed per call, best of
several repeats:

- floor: decode the request bytes, read every Struct into dicts, build a response of the
  same resources with the SDK's resource.update, and encode it (bench/compose_scale.py's
  floor: what any Python function must do to look at its input and answer);
- in process: decode, run the real server's `run` (compose-model-deployment), encode;
- gRPC: one RunFunction call to the real server on loopback.

Sizes: the request and response of compose-model-deployment, and the request Crossplane
sends compose-model-replica for one of the replicas (the replica, its three Objects as
observed, its FleetCluster and its ModelDeployment, status included).

    .venv/bin/python bench/compose_deployment.py [--replicas 1000] [--clusters 500]
        [--arg-bytes 4096] [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy

from compose_scale import best, cluster_name, fleet_cluster, floor_call, in_process_call
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.functions import naming
from fleetcache.functions import protocol
from fleetcache.devtools import render
from fleetcache.functions.composers import model_replica
from fleetcache.functions import server
from fleetcache.functions.composers import model_deployment as composer

COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
DIGEST = "sha256:" + "ab" * 32
GRPC_LIMIT = 4 * 1024 * 1024  # Crossplane's function client and the SDK server: gRPC's default
BYTES = 16_000_000_000
PHASES = ("Ready", "Ready", "Hydrating", "Pending", "Ready", "Failed", "Hydrating", "Ready")


def deployment_xr(replicas: int, arg_bytes: int) -> dict:
    template = "--chat-template="
    return {
        "apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
        "metadata": {"name": "llama-70b-chat", "namespace": "serving", "uid": "0000"},
        "spec": {"modelCacheRef": {"name": "llama-70b"}, "replicas": replicas,
                 "maxReplicasPerCluster": 4,
                 "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
                 "delivery": {"whileHydrating": "Source", "onHydrationFailure": "Source",
                              "switchToCache": "OnReady"},
                 "engine": {"image": "vllm/vllm-openai:v0.11.0",
                            "args": ["--model=$(FLEETCACHE_MODEL)",
                                     "--revision=$(FLEETCACHE_MODEL_REVISION)",
                                     "--served-model-name=llama-70b", "--tensor-parallel-size=8",
                                     template + "x" * max(0, arg_bytes - len(template))],
                            "env": [{"name": "VLLM_NO_USAGE_STATS", "value": "1"}],
                            "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "640Gi"}},
                            "port": 8000, "readinessPath": "/health",
                            "sharedMemorySize": "16Gi"}},
    }


def phase_of(i: int) -> str:
    return PHASES[i % len(PHASES)]


def model_cache(clusters: int) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "llama-70b", "namespace": "serving"},
            "spec": {"source": {"huggingFace": {"repo": "meta-llama/Llama-3.1-70B"}},
                     "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}}},
            "status": {"resolved": {"repo": "meta-llama/Llama-3.1-70B", "revision": "main",
                                    "commit": COMMIT, "bytes": BYTES, "files": 40,
                                    "manifestDigest": DIGEST}}}


def hydration(i: int) -> dict:
    """Cluster i's ModelCacheHydration as compose-model-cache writes it and its composer
    reports it."""
    name, phase = cluster_name(i), phase_of(i)
    done = {"Ready": BYTES, "Hydrating": BYTES // 3, "Pending": 0, "Failed": BYTES // 5}[phase]
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheHydration",
            "metadata": {"name": naming.child_name("llama-70b", name), "namespace": "serving",
                         "labels": {naming.LABEL_MODEL_CACHE: "llama-70b",
                                    naming.LABEL_CLUSTER: name}},
            "spec": {"clusterName": name, "modelCacheName": "llama-70b", "commit": COMMIT,
                     "manifestDigest": DIGEST, "bytes": BYTES,
                     "source": {"huggingFace": {"repo": "meta-llama/Llama-3.1-70B"}},
                     "storage": {"size": "17Gi"}},
            "status": {"phase": phase, "progress": {"bytesDone": done, "bytesTotal": BYTES},
                       "reason": "DigestMismatch" if phase == "Failed" else "",
                       "message": "the bytes served did not match" if phase == "Failed"
                       else ""}}


def required_of(clusters: int) -> dict[str, list[dict]]:
    return {composer.FLEET_CLUSTERS_KEY: [fleet_cluster(i) for i in range(clusters)],
            composer.MODEL_CACHE_KEY: [model_cache(clusters)],
            composer.HYDRATIONS_KEY: [hydration(i) for i in range(clusters)]}


def observed_ready(desired: dict) -> dict:
    observed = copy.deepcopy(desired)
    observed["status"] = {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Available"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}]}
    return observed


def request_of(xr: dict, observed: dict[str, dict], required: dict[str, list[dict]]
               ) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, xr)
    for key, item in observed.items():
        resource.update(req.observed.resources[key], item)
    for key, items in required.items():
        for item in items:
            req.required_resources[key].items.add().resource.CopyFrom(
                resource.dict_to_struct(item))
    return req


def request_for(replicas: int, clusters: int, arg_bytes: int, steady: bool
                ) -> fnv1.RunFunctionRequest:
    xr = deployment_xr(replicas, arg_bytes)
    required = required_of(clusters)
    observed = {}
    if steady:
        first = composer.compose(protocol.Request(composite=xr, required=required))
        observed = {key: observed_ready(desired) for key, (desired, _) in first.desired.items()}
    return request_of(xr, observed, required)


def replica_request(deployment_req: fnv1.RunFunctionRequest,
                    rsp: fnv1.RunFunctionResponse) -> fnv1.RunFunctionRequest:
    """What compose-model-replica gets for the deployment's first Cache replica once it
    runs: the ModelDeployment (with the status `rsp` gives it) is required, like its
    FleetCluster."""
    def plain(struct) -> dict:
        return server.plain(resource.struct_to_dict(struct))

    xr = plain(deployment_req.observed.composite.resource)
    xr["status"] = plain(rsp.desired.composite.resource)["status"]
    replica = next(d for d in (plain(r.resource) for r in rsp.desired.resources.values())
                   if d["spec"]["delivery"] == "Cache")
    cluster = next(c for c in (plain(item.resource) for item in deployment_req.required_resources[
                                   composer.FLEET_CLUSTERS_KEY].items)
                   if c["metadata"]["name"] == replica["spec"]["clusterName"])
    required = {model_replica.FLEET_CLUSTER_KEY: [cluster], model_replica.DEPLOYMENT_KEY: [xr]}
    first = model_replica.compose(protocol.Request(composite=replica, required=required))
    observed = {}
    for key, (desired, _) in first.desired.items():
        observed[key] = observed_ready(desired)
        manifest = copy.deepcopy(desired["spec"]["forProvider"]["manifest"])
        observed[key]["status"]["atProvider"] = {"manifest": manifest}
    return request_of(replica, observed, required)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--arg-bytes", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for label, steady in (("first compose", False), ("steady state", True)):
            req = request_for(args.replicas, args.clusters, args.arg_bytes, steady)
            payload = req.SerializeToString()
            shape = in_process_call(payload)
            fatal = [r.message for r in shape.results if r.severity == fnv1.SEVERITY_FATAL]
            assert not fatal, fatal
            assert len(shape.desired.resources) == args.replicas, len(shape.desired.resources)
            replica = replica_request(req, shape).ByteSize()
            floor = best(lambda: floor_call(payload, shape), args.repeats)
            inproc = best(lambda: in_process_call(payload), args.repeats)
            grpc_time = best(lambda: stub.RunFunction(req, timeout=600), args.repeats)
            rows.append((label, len(payload), shape.ByteSize(), replica, floor, inproc,
                         grpc_time))
    print(f"compose-model-deployment: {args.replicas} replicas over {args.clusters} clusters, "
          f"a {args.arg_bytes}-byte engine argument, best of {args.repeats}; sizes in MB "
          f"(limit {GRPC_LIMIT / 1e6:.2f})")
    print(f"{'scenario':>14} {'request':>8} {'response':>9} {'replica req':>11} {'floor ms':>9} "
          f"{'in-proc ms':>10} {'ratio':>6} {'gRPC ms':>9} {'ratio':>6} {'us/replica':>10}")
    for label, size, out, replica, floor, inproc, grpc_time in rows:
        print(f"{label:>14} {size / 1e6:>7.2f}M {out / 1e6:>8.2f}M {replica / 1e6:>10.3f}M "
              f"{floor * 1e3:>9.1f} {inproc * 1e3:>10.1f} {inproc / floor:>6.2f} "
              f"{grpc_time * 1e3:>9.1f} {grpc_time / floor:>6.2f} "
              f"{inproc / args.replicas * 1e6:>10.1f}")


if __name__ == "__main__":
    main()
