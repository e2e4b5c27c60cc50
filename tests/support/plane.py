"""The management cluster the end-to-end tests drive: the repo's Compositions and XRDs run by
the real function server over gRPC, with simulated clusters behind provider-kubernetes."""

from __future__ import annotations

from pathlib import Path

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import Cluster, ControlPlane, Provider, RealisticTiming

ROOT = Path(__file__).resolve().parents[2]


def control_plane(channel: grpc.Channel, clusters: dict[str, Cluster],
                  timing: RealisticTiming | None = None) -> ControlPlane:
    """A control plane whose composites run the repo's pipelines through `channel`; with
    `timing`, provider-kubernetes reconciles its Objects at the real provider's pace, and
    Crossplane stamps conditions on its clock."""
    compositions, schemas = rendering.repo_definitions(ROOT)
    stub = grpcv1.FunctionRunnerServiceStub(channel)

    def pipeline(composite, composition, observed, required):
        if timing is None:
            return rendering.run_pipeline(stub, composite, composition, observed, required)
        return rendering.run_pipeline(stub, composite, composition, observed, required,
                                      clock=timing.clock.now)

    control = ControlPlane(pipeline, compositions, schemas,
                           Provider(clusters, lambda: control.secrets(), timing))
    return control
