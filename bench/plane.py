"""Crossplane's side of the function protocol, as much of it as the composer benches need.

The benches build their requests the way Crossplane would reach them, through the function's
stable edges only: a request is built by fleetcache.devtools.render (`build_request`), the
requirements a response names are answered from a pool of existing objects as Crossplane
answers them (`render.answer_requirements`: call, fetch what was asked for, call again until
the requirements stop changing), and every call runs the real server's `run`
(fleetcache.functions.server). A composite's status after a call is what Crossplane's apply
leaves (`render.merge_status`), a composed resource is what Crossplane creates
(`render.composed`). Nothing here names a composer's module, helper, constant or resource
key, so the benches survive code moving inside functions/; the fixtures name only the API
(kinds, fields, the XRDs' group and version).
"""

from __future__ import annotations

import copy
import datetime
import time
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache.devtools import render
from fleetcache.functions import protocol, server

API_VERSION = "fleetcache.dev/v1alpha1"  # the XRDs' group and version (apis/*/definition.yaml)
NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.UTC)
READY_CONDITIONS = [{"type": "Ready", "status": "True", "reason": "Available"},
                    {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}]


class ComposeError(RuntimeError):
    """A call the bench set up returned a fatal result, or its requirements never settled:
    the fixtures no longer describe a valid fleet (the message says why)."""


@dataclass
class Call:
    """One settled call: the request that was answered in full, its response, and the
    composite with the status the response writes."""

    request: fnv1.RunFunctionRequest
    response: fnv1.RunFunctionResponse
    composite: dict

    @property
    def fatal(self) -> list[str]:
        return [r.message for r in self.response.results if r.severity == fnv1.SEVERITY_FATAL]

    @property
    def desired(self) -> dict[str, dict]:
        """Every composed resource by its resource name, as Crossplane creates it (owned and
        labelled by the composite)."""
        return {key: render.composed(self.composite, key, desired)
                for key, desired in sorted(self.response.desired.resources.items())}


def compose(composite: dict, observed: dict[str, dict] | None = None,
            available: list[dict] | tuple[dict, ...] = (), *, allow_fatal: bool = False,
            now: datetime.datetime = NOW) -> Call:
    """Run the real server on `composite` with its `observed` composed resources, answering
    its requirements from `available` until they stop changing; a fatal result raises
    ComposeError unless `allow_fatal`."""
    observed = observed or {}
    answered: dict[str, list[dict]] = {}
    for _ in range(render.MAX_REQUIREMENT_ROUNDS):
        req = render.build_request(composite, observed, fnv1.State(), None, None, answered,
                                   tag="bench")
        rsp = server.run(req, now)
        call = Call(req, rsp, render.merge_status(composite, rsp))
        if call.fatal:
            if allow_fatal:
                return call
            raise ComposeError(f"{composite.get('kind')} {composite['metadata'].get('name')}: "
                               f"{call.fatal[0]}")
        wanted = render.answer_requirements(rsp.requirements, list(available))
        if wanted == answered:
            return call
        answered = wanted
    raise ComposeError(f"{composite.get('kind')} {composite['metadata'].get('name')}: the "
                       f"requirements did not settle in {render.MAX_REQUIREMENT_ROUNDS} rounds")


def manifest_of(composed: dict) -> dict | None:
    """The remote manifest of a provider-kubernetes Object (spec.forProvider.manifest)."""
    manifest = composed.get("spec", {}).get("forProvider", {}).get("manifest")
    return manifest if isinstance(manifest, dict) else None


def observed_ready(composed: dict, **status: Any) -> dict:
    """A composed resource as Crossplane observes it once it exists and is Ready; an Object
    reports its remote manifest under status.atProvider.manifest, as provider-kubernetes
    does. `status` adds fields (a composite resource's own status, say)."""
    out = copy.deepcopy(composed)
    out["status"] = {**out.get("status", {}), **copy.deepcopy(status),
                     "conditions": copy.deepcopy(READY_CONDITIONS)}
    manifest = manifest_of(composed)
    if manifest is not None:
        out["status"]["atProvider"] = {"manifest": copy.deepcopy(manifest)}
    return out


def request_of(req: fnv1.RunFunctionRequest, now: datetime.datetime = NOW) -> protocol.Request:
    """What the composer sees of `req`, decoded as the server decodes it."""
    return server.to_request(req, now)


def composer_seconds(req: fnv1.RunFunctionRequest) -> float:
    """How long the composer of the request's kind (fleetcache.functions.server.composer_for)
    takes on it alone, decoded beforehand: what a call spends beyond the protobuf work."""
    request = request_of(req)
    composer = server.composer_for(request.composite.get("kind", ""))
    if composer is None:
        raise ComposeError(f"the server has no composer for {request.composite.get('kind')!r}; "
                           f"it composes {sorted(server.COMPOSER_MODULES)}")
    start = time.perf_counter()
    outcome = composer(request)
    spent = time.perf_counter() - start
    if outcome.fatal:
        raise ComposeError(f"{request.composite.get('kind')} {request.name}: {outcome.fatal}")
    return spent
