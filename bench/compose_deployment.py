"""compose-model-deployment at 1,000 replicas over 500 clusters, against a floor measured
in the same run, and the message sizes against Crossplane's 4 MiB gRPC limit.

The request carries, as required resources, 500 FleetClusters, one ModelCache targeting
all of them and its 500 ModelCacheHydrations (a mix of Ready, Hydrating, Pending and
Failed), each as the real composers left it (bench/compose_scale.py brings the cache to
its rollout call by call, bench/plane.py answers every requirement as Crossplane does). The
engine has a realistic spec plus one argument of --arg-bytes (a chat template, say: 4 KiB
by default). Two scenarios: the first compose (nothing observed yet) and the steady state
(all 1,000 ModelReplicas observed, Ready). Timed per call, best of several repeats:

- floor: decode the request bytes, read every Struct into dicts, build a response of the
  same resources with the SDK's resource.update, and encode it (bench/compose_scale.py's
  floor: what any Python function must do to look at its input and answer);
- in process: decode, run the real server's `run` (compose-model-deployment), encode;
- gRPC: one RunFunction call to the real server on loopback.

- composer: compose-model-deployment alone on the request decoded beforehand.

The four are interleaved in every repeat, as in bench/compose_scale.py.

Sizes: the request and response of compose-model-deployment, and the request Crossplane
sends compose-model-replica for one of the replicas (the replica, what it composed as
observed, its FleetCluster and its ModelDeployment, status included).

    .venv/bin/python bench/compose_deployment.py [--replicas 1000] [--clusters 500]
        [--arg-bytes 4096] [--repeats 5]
    .venv/bin/python bench/compose_deployment.py --smoke    # 20 replicas over 10 clusters, in seconds
"""

from __future__ import annotations

import argparse

import plane
from compose_scale import CACHE, NAMESPACE, best, fleet_of, in_process_call, observe, timed_calls
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render

SMOKE = {"replicas": 20, "clusters": 10, "repeats": 2}
GRPC_LIMIT = 4 * 1024 * 1024  # Crossplane's function client and the SDK server: gRPC's default


def deployment_xr(replicas: int, arg_bytes: int) -> dict:
    template = "--chat-template="
    return {
        "apiVersion": plane.API_VERSION, "kind": "ModelDeployment",
        "metadata": {"name": "llama-70b-chat", "namespace": NAMESPACE, "uid": "0002"},
        "spec": {"modelCacheRef": {"name": CACHE}, "replicas": replicas,
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


def cache_fleet(clusters: int) -> list[dict]:
    """Everything a ModelDeployment's requirements are answered from: the FleetClusters,
    the grant, the ModelCache mid-rollout and its ModelCacheHydrations, as they exist once
    compose-model-cache fanned out and the hydrations reported their phases."""
    fleet = fleet_of(clusters)
    if fleet.fanned.fatal:
        raise plane.ComposeError(f"ModelCache over {clusters} clusters: {fleet.fanned.fatal[0]}")
    observed = observe(fleet.fanned)
    cache = plane.compose(fleet.fanned.composite, observed, fleet.available).composite
    hydrations = [d for d in observed.values() if d["kind"] == "ModelCacheHydration"]
    return [*fleet.available, cache, *hydrations]


def replicas_of(call: plane.Call) -> dict[str, dict]:
    return {key: doc for key, doc in call.desired.items() if doc["kind"] == "ModelReplica"}


def replica_request(deployment: plane.Call, available: list[dict]) -> fnv1.RunFunctionRequest:
    """What compose-model-replica gets for the deployment's first Cache replica once what it
    composed exists: the replica, its composed resources as observed, its FleetCluster and
    the ModelDeployment with the status `deployment` wrote."""
    replicas = list(replicas_of(deployment).values())
    replica = next((r for r in replicas if r["spec"].get("delivery") == "Cache"), replicas[0])
    owners = [deployment.composite, *(d for d in available if d["kind"] == "FleetCluster")]
    first = plane.compose(replica, available=owners)
    observed = {key: plane.observed_ready(doc) for key, doc in first.desired.items()}
    return plane.compose(replica, observed, owners).request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--arg-bytes", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help=f"the same code paths at tiny sizes ({SMOKE['replicas']} replicas over "
                             f"{SMOKE['clusters']} clusters, best of {SMOKE['repeats']}), in seconds: "
                             "checks the bench runs, measures nothing")
    args = parser.parse_args()
    if args.smoke:
        args.replicas, args.clusters, args.repeats = SMOKE["replicas"], SMOKE["clusters"], SMOKE["repeats"]
    available = cache_fleet(args.clusters)
    xr = deployment_xr(args.replicas, args.arg_bytes)
    first = plane.compose(xr, available=available)
    observed = {key: plane.observed_ready(doc) for key, doc in replicas_of(first).items()}
    steady = plane.compose(first.composite, observed, available)
    rows = []
    with render.InProcessServer() as srv, render.channel_to(srv.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        for label, call in (("first compose", first), ("steady state", steady)):
            req = call.request
            payload = req.SerializeToString()
            shape = in_process_call(payload)
            fatal = [r.message for r in shape.results if r.severity == fnv1.SEVERITY_FATAL]
            assert not fatal, fatal
            placed = len(replicas_of(plane.Call(req, shape, call.composite)))
            assert placed == args.replicas, f"{placed} of {args.replicas} replicas composed"
            replica = replica_request(call, available).ByteSize()
            floor, inproc, grpc_time, alone = best(timed_calls(payload, shape, stub, req), args.repeats)
            rows.append((label, len(payload), shape.ByteSize(), replica, floor, inproc,
                         grpc_time, alone))
    print(f"compose-model-deployment: {args.replicas} replicas over {args.clusters} clusters, "
          f"a {args.arg_bytes}-byte engine argument, best of {args.repeats}; sizes in MB "
          f"(limit {GRPC_LIMIT / 1e6:.2f})")
    print(f"{'scenario':>14} {'request':>8} {'response':>9} {'replica req':>11} {'floor ms':>9} "
          f"{'in-proc ms':>10} {'ratio':>6} {'gRPC ms':>9} {'ratio':>6} {'composer ms':>11} {'us/replica':>10}")
    for label, size, out, replica, floor, inproc, grpc_time, alone in rows:
        print(f"{label:>14} {size / 1e6:>7.2f}M {out / 1e6:>8.2f}M {replica / 1e6:>10.3f}M "
              f"{floor * 1e3:>9.1f} {inproc * 1e3:>10.1f} {inproc / floor:>6.2f} "
              f"{grpc_time * 1e3:>9.1f} {grpc_time / floor:>6.2f} {alone * 1e3:>11.1f} "
              f"{inproc / args.replicas * 1e6:>10.1f}")
    print()
    for label, _, _, _, floor, inproc, grpc_time, _ in rows:
        print(f"ratio {label}: in-process/floor {inproc / floor:.2f}, gRPC/floor {grpc_time / floor:.2f}")


if __name__ == "__main__":
    main()
