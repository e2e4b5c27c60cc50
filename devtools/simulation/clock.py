"""Time in a simulation: the composers' `now`, which the story can advance, and the real
function server, run in this process so that it reads that clock."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
from collections.abc import Iterator

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render as rendering
from fleetcache.functions.server import FunctionRunner


class Clock:
    """The composers' `now` in a simulation: wall-clock time plus whatever the story skips
    (a TTL of hours passes in one call of `advance`). With `seconds_per_round` it is a
    compressed clock instead, the one realistic timing runs on (timing.RealisticTiming):
    every round (`tick`) is that many seconds however long the machine took, so
    provider-kubernetes' 10-minute poll is a number of rounds, the same on any machine."""

    def __init__(self, seconds_per_round: float | None = None) -> None:
        self.skipped = datetime.timedelta()
        self.seconds_per_round = seconds_per_round
        self.started = datetime.datetime.now(datetime.UTC)
        self.rounds = 0

    def now(self) -> datetime.datetime:
        if self.seconds_per_round is None:
            return datetime.datetime.now(datetime.UTC) + self.skipped
        return self.started + self.skipped + datetime.timedelta(
            seconds=self.rounds * self.seconds_per_round)

    def advance(self, by: datetime.timedelta) -> None:
        self.skipped += by

    def tick(self) -> None:
        """A round passed (the compressed clock's only way forward, besides `advance`)."""
        self.rounds += 1

    def seconds(self) -> float:
        """Seconds since the clock started, skips included: what the controllers time by."""
        return (self.now() - self.started).total_seconds()


@contextlib.contextmanager
def function_server(clock: Clock) -> Iterator[str]:
    """The real FunctionRunner over real gRPC on loopback, in this process so that its
    clock is the simulation's; yields its address. `rendering.function_process` is the
    same server as its own process, for stories that need no clock."""
    address = f"127.0.0.1:{rendering.free_port()}"
    loop = asyncio.new_event_loop()
    servers: list[grpc.aio.Server] = []

    async def start() -> None:
        server = grpc.aio.server(options=rendering.GRPC_OPTIONS)
        grpcv1.add_FunctionRunnerServiceServicer_to_server(FunctionRunner(clock.now), server)
        server.add_insecure_port(address)
        await server.start()
        servers.append(server)

    thread = threading.Thread(target=loop.run_forever, name="function-server", daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    try:
        yield address
    finally:
        asyncio.run_coroutine_threadsafe(servers[0].stop(grace=None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
