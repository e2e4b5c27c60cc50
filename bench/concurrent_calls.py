"""Concurrent RunFunction calls against one function process, as Crossplane makes them: how
long a small call waits while big ones are composed.

Crossplane reconciles up to 100 composites at once (`--max-reconcile-rate`, default 100,
cmd/crossplane/core/core.go) and gives each reconcile 2 minutes, function calls included
(internal/controller/apiextensions/composite/reconciler.go). Its client spreads calls over the
function's pods (round_robin over a headless Service, internal/xfn/function_runner.go), so one
pod sees its share of them at once. Two servers, each the real fleetcache-function in its own
process, take the same bursts in turns:

- inline: the server as shipped, each call composed on the event loop, which takes the next
  call when it is done;
- threaded: the same servicer composing each call on a worker thread (asyncio.to_thread) while
  the loop keeps taking calls, started by this script; the GIL still runs one at a time.

A burst is `--calls` calls fired at once, `--big` of them ModelCaches over `--clusters` target
clusters (bench/compose_scale.py's fleet) spread through it, the rest ModelCaches over 3
clusters. Per server: the small calls' median and 99th-percentile latency, the big calls'
median, the burst's wall time; then the ratios threaded/inline, best of `--repeats` bursts,
the servers alternating so load on the shared machine falls on both, after one untimed burst
each (the first call of a kind imports its composer).

    .venv/bin/python bench/concurrent_calls.py [--calls 100] [--big 4] [--clusters 1000] [--repeats 5]
    .venv/bin/python bench/concurrent_calls.py --smoke    # the same code paths, tiny, in seconds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import compose_scale
import grpc
from crossplane.function import runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render
from fleetcache.functions import server

SMALL_CLUSTERS = 3
OPTIONS = [("grpc.max_receive_message_length", server.MAX_REQUEST_MIB * server.MiB),
           ("grpc.max_send_message_length", server.MAX_REQUEST_MIB * server.MiB)]


class ThreadedRunner(server.FunctionRunner):
    """The servicer composing on a worker thread, the event loop free for the next call."""

    async def RunFunction(self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext  # noqa: N802
                          ) -> fnv1.RunFunctionResponse:
        return await asyncio.to_thread(server.run, req, self.now())


def serve_threaded(address: str) -> None:
    runtime.serve(ThreadedRunner(), address, creds=None, insecure=True, options=OPTIONS)


@contextmanager
def threaded_process() -> Iterator[str]:
    address = f"127.0.0.1:{render.free_port()}"
    process = subprocess.Popen([sys.executable, __file__, "--serve-threaded", address],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        render.wait_until_serving(address, process)
        yield address
    finally:
        process.terminate()
        process.wait(10)


def request_over(clusters: int) -> fnv1.RunFunctionRequest:
    """A ModelCache mid-rollout over `clusters` clusters, its requirements answered."""
    fleet = compose_scale.fleet_of(clusters)
    return compose_scale.plane.compose(fleet.fanned.composite, compose_scale.observe(fleet.fanned),
                                       fleet.available).request


@dataclass(frozen=True)
class Burst:
    """One burst's latencies (seconds from its start): the small calls' median and 99th
    percentile, the big calls' median, the last call's."""

    small_p50: float
    small_p99: float
    big_p50: float
    wall: float

    @classmethod
    def of(cls, small: list[float], big: list[float]) -> Burst:
        ranked = sorted(small)
        return cls(statistics.median(small), ranked[max(0, round(len(ranked) * 0.99) - 1)],
                   statistics.median(big) if big else 0.0, max(small + big))

    @classmethod
    def best(cls, bursts: list[Burst]) -> Burst:
        """Each figure's best over the bursts: the least disturbed by other load."""
        return cls(*(min(getattr(b, f) for b in bursts) for f in ("small_p50", "small_p99", "big_p50", "wall")))


async def burst(address: str, requests: list[tuple[bool, fnv1.RunFunctionRequest]]) -> Burst:
    """Every request at once on one channel (as Crossplane's one client per pod); each call's
    latency from the burst's start."""
    async with grpc.aio.insecure_channel(address, options=OPTIONS) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        await channel.channel_ready()
        start = time.perf_counter()

        async def call(req: fnv1.RunFunctionRequest) -> float:
            rsp = await stub.RunFunction(req, timeout=600)
            if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
                raise SystemExit(f"a call failed: {rsp.results[0].message}")
            return time.perf_counter() - start

        latencies = await asyncio.gather(*(call(req) for _, req in requests))
    return Burst.of([t for (big, _), t in zip(requests, latencies, strict=True) if not big],
                    [t for (big, _), t in zip(requests, latencies, strict=True) if big])


def mixed(calls: int, big: int, clusters: int) -> list[tuple[bool, fnv1.RunFunctionRequest]]:
    """`big` big requests spread evenly through `calls`, the rest small; each marked big or not."""
    small_request, big_request = request_over(SMALL_CLUSTERS), request_over(clusters)
    every = max(1, calls // big) if big else calls + 1
    marks = [i % every == 0 and i // every < big for i in range(calls)]
    return [(is_big, big_request if is_big else small_request) for is_big in marks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--big", type=int, default=4)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true",
                        help="10 calls, 1 big over 20 clusters, 1 burst: checks the bench runs")
    parser.add_argument("--serve-threaded", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_threaded:
        serve_threaded(args.serve_threaded)
        return
    if args.smoke:
        args.calls, args.big, args.clusters, args.repeats = 10, 1, 20, 1
    requests = mixed(args.calls, args.big, args.clusters)
    sizes = sorted({req.ByteSize() for _, req in requests})
    print(f"burst: {args.calls} calls, {args.big} over {args.clusters} clusters "
          f"({sizes[-1] / 1e6:.2f} MB), the rest over {SMALL_CLUSTERS} ({sizes[0] / 1e3:.1f} kB)")
    results: dict[str, list[Burst]] = {"inline": [], "threaded": []}
    with render.function_process() as inline, threaded_process() as threaded:
        for address in (inline, threaded):  # untimed: each server imports its composers
            asyncio.run(burst(address, requests))
        for _ in range(args.repeats):
            for name, address in (("inline", inline), ("threaded", threaded)):
                results[name].append(asyncio.run(burst(address, requests)))
    print(f"{'server':>10} {'small p50 ms':>12} {'small p99 ms':>12} {'big p50 ms':>10} {'wall ms':>8}")
    best = {name: Burst.best(bursts) for name, bursts in results.items()}
    for name, b in best.items():
        print(f"{name:>10} {b.small_p50 * 1e3:>12.1f} {b.small_p99 * 1e3:>12.1f} "
              f"{b.big_p50 * 1e3:>10.1f} {b.wall * 1e3:>8.1f}")
    inline, threaded = best["inline"], best["threaded"]
    big = f"big p50 {threaded.big_p50 / inline.big_p50:.2f}, " if args.big else ""
    print(f"ratio threaded/inline: small p50 {threaded.small_p50 / inline.small_p50:.2f}, "
          f"small p99 {threaded.small_p99 / inline.small_p99:.2f}, {big}"
          f"wall {threaded.wall / inline.wall:.2f} (best of {args.repeats})")


if __name__ == "__main__":
    main()
