"""The management cluster the end-to-end tests drive: the repo's Compositions and XRDs run by
the real function server over gRPC, with simulated clusters behind provider-kubernetes."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import Clock, Cluster, ControlPlane, Provider, RealisticTiming, step

ROOT = Path(__file__).resolve().parents[2]


def control_plane(channel: grpc.Channel, clusters: dict[str, Cluster],
                  timing: RealisticTiming | None = None, clock: Clock | None = None) -> ControlPlane:
    """A control plane whose composites run the repo's pipelines through `channel`; with
    `timing`, provider-kubernetes reconciles its Objects at the real provider's pace, and
    Crossplane stamps conditions on its clock (or on `clock`, which a test may move)."""
    compositions, schemas = rendering.repo_definitions(ROOT)
    stub = grpcv1.FunctionRunnerServiceStub(channel)
    clock = clock or (timing.clock if timing is not None else None)

    def pipeline(composite, composition, observed, required):
        if clock is None:
            return rendering.run_pipeline(stub, composite, composition, observed, required)
        return rendering.run_pipeline(stub, composite, composition, observed, required,
                                      clock=clock.now)

    control = ControlPlane(pipeline, compositions, schemas,
                           Provider(clusters, lambda: control.secrets(), timing))
    return control


class PlayedFleet:
    """The control plane and the clusters, played round by round (a short pause lets the
    agents the round started move)."""

    def __init__(self, control: ControlPlane, clusters: dict[str, Cluster]):
        self.control, self.clusters = control, clusters

    def round(self) -> None:
        step(self.control, self.clusters.values())
        time.sleep(0.05)
