"""fleetcache-function: one gRPC Function serving every fleetcache Composition.

The server picks the composer by the observed composite's kind, hands it plain dicts,
and turns its Outcome back into a RunFunctionResponse. Nothing a composer raises ever
escapes: it becomes a fatal result naming the composite.
"""

from __future__ import annotations

import datetime
import importlib
import math
import os
from collections.abc import Callable
from typing import Any

import click
import grpc
from crossplane.function import cli as sdkcli
from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2

from fleetcache import messages, shapes
from fleetcache.apis import specs, xrds
from fleetcache.functions import naming, protocol, read

COMPOSER_MODULES = {
    "FleetCluster": "fleetcache.functions.composers.fleet_cluster",
    "ModelCache": "fleetcache.functions.composers.model_cache",
    "ModelCacheGrant": "fleetcache.functions.composers.model_cache_grant",
    "ModelCacheHydration": "fleetcache.functions.composers.model_cache_hydration",
    "ModelDeployment": "fleetcache.functions.composers.model_deployment",
    "ModelReplica": "fleetcache.functions.composers.model_replica",
}

Composer = Callable[[protocol.Request], protocol.Outcome]

MiB = 1024 * 1024
# Crossplane dials every function with grpc.NewClient and no call options
# (internal/xfn/function_runner.go), so grpc-go's defaults hold: it sends requests of any
# size (MaxInt32) and accepts responses of at most 4 MiB. design/composers.md has the sources.
CROSSPLANE_MAX_RESPONSE_MIB = 4
MAX_RESPONSE_BYTES = CROSSPLANE_MAX_RESPONSE_MIB * MiB
# Crossplane requeues a composite after the shortest response TTL of its pipeline (v1.20 on,
# with realtime compositions, on by default in v2: composite/reconciler.go); the SDK's
# response.to sets 60 s. An outcome's requeue_after shortens it, never below a second (a TTL
# of 0 would mean none: no requeue at all).
DEFAULT_TTL_SECONDS = response.DEFAULT_TTL.total_seconds()
MIN_TTL_SECONDS = 1
# A ModelCache request grows by about 1.3 kB per target cluster (13.4 MB at 10,000):
# 64 MiB admits about 48,000, where the SDK's default of 4 MiB stopped at about 3,000.
MAX_REQUEST_MIB = 64


def composer_for(kind: str) -> Composer | None:
    module_name = COMPOSER_MODULES.get(kind)
    if module_name is None:
        return None
    return importlib.import_module(module_name).compose


def plain(value: Any) -> Any:
    """Struct numbers arrive as floats; give whole numbers back as ints."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def from_struct(struct: struct_pb2.Struct) -> dict:
    """A Struct as plain dicts, as `plain` gives them. A number that is NaN or infinite
    (binary protobuf can carry one; JSON cannot, and json_format refuses to convert it)
    reads as None: absent."""
    return {key: from_value(value) for key, value in struct.fields.items()}


def from_value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return from_struct(value.struct_value)
    if kind == "list_value":
        return [from_value(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            return None
        return int(number) if number.is_integer() else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def to_request(req: fnv1.RunFunctionRequest, now: datetime.datetime) -> protocol.Request:
    observed = {key: from_struct(item.resource) for key, item in req.observed.resources.items()}
    required = {
        key: [from_struct(item.resource) for item in items.items]
        for key, items in req.required_resources.items()
    }
    return protocol.Request(
        composite=from_struct(req.observed.composite.resource),
        observed=observed,
        required=required,
        now=now,
    )


def apply_outcome(rsp: fnv1.RunFunctionResponse, outcome: protocol.Outcome) -> None:
    for key in sorted(outcome.desired):
        manifest, ready = outcome.desired[key]
        target = rsp.desired.resources[key]
        target.resource.Clear()
        resource.update(target, naming.canonical(manifest))
        if ready is not None:
            target.ready = fnv1.READY_TRUE if ready else fnv1.READY_FALSE
    if outcome.status:
        resource.update(rsp.desired.composite, {"status": naming.canonical(outcome.status)})
    if outcome.composite_ready is not None:
        rsp.desired.composite.ready = fnv1.READY_TRUE if outcome.composite_ready else fnv1.READY_FALSE
    response.set_conditions(rsp, *(
        resource.Condition(typ=c.type, status=c.status, reason=c.reason,
                           message=messages.clipped(c.message, messages.MESSAGE_LIMIT) or None)
        for c in sorted(outcome.conditions, key=lambda c: c.type)
    ))
    for message in outcome.warnings:
        response.warning(rsp, messages.clipped(message, messages.MESSAGE_LIMIT))
    for message in outcome.notices:
        response.normal(rsp, messages.clipped(message, messages.MESSAGE_LIMIT))
    if outcome.requeue_after is not None and outcome.requeue_after < DEFAULT_TTL_SECONDS:
        rsp.meta.ttl.FromSeconds(max(MIN_TTL_SECONDS, math.ceil(outcome.requeue_after)))
    for key in sorted(outcome.requirements):
        requirement = outcome.requirements[key]
        selector = fnv1.ResourceSelector(api_version=requirement.api_version, kind=requirement.kind)
        if requirement.match_name is not None:
            selector.match_name = requirement.match_name
        else:
            selector.match_labels.SetInParent()
            selector.match_labels.labels.update(dict(requirement.match_labels or ()))
        if requirement.namespace:
            selector.namespace = requirement.namespace
        rsp.requirements.resources[key].CopyFrom(selector)


def identity(composite: dict) -> tuple[str, str]:
    """(kind, name) of the observed composite; a kind or name that is not a string, or a
    metadata that is not an object, reads as ""."""
    kind = composite.get("kind")
    name = read.get_path(composite, "metadata.name")
    return (kind if isinstance(kind, str) else "", name if isinstance(name, str) else "")


def require_identity(request: protocol.Request, kind: str) -> None:
    """The composite's name (and namespace, for a namespaced kind, as its XRD says), or
    InputError: Crossplane always sends both, a hand-made request may not, and every
    composed name and label derives from them."""
    naming.object_name(request.name, "metadata.name")
    xrd = xrds.xrd_for_kind(kind)
    if xrd is not None and xrd.scope == "Namespaced" and not shapes.is_dns_label(request.namespace):
        raise specs.InputError(f"metadata.namespace: {messages.shown(request.namespace)} is not a "
                             f"namespace name; a {kind} is namespaced")


def run(req: fnv1.RunFunctionRequest, now: datetime.datetime) -> fnv1.RunFunctionResponse:
    """Compose one request; every failure becomes a fatal result, never an exception."""
    rsp = response.to(req)
    kind, name = "", ""
    try:
        request = to_request(req, now)
        kind, name = identity(request.composite)
        composer = composer_for(kind)
        if composer is None:
            known = ", ".join(sorted(COMPOSER_MODULES))
            return fatal(rsp, f"fleetcache-function has no composer for kind {messages.shown(kind)} "
                              f"(composite {messages.shown(name)}); it composes {known}")
        require_identity(request, kind)
        outcome = composer(request)
    except specs.InputError as err:
        return fatal(rsp, f"{kind} {name}: {err}")
    except Exception as err:  # noqa: BLE001 - a composer bug must not crash the server
        return fatal(rsp, f"{kind} {name}: internal error while composing "
                          f"({type(err).__name__}: {messages.clipped(err)}); please report it")
    if outcome.fatal:
        return fatal(rsp, f"{kind} {name}: {outcome.fatal}")
    apply_outcome(rsp, outcome)
    size = rsp.ByteSize()
    if size > MAX_RESPONSE_BYTES:
        return fatal(response.to(req), (
            f"{kind} {name}: the response would be {size / MiB:.1f} MiB "
            f"({len(outcome.desired)} composed resources), over the "
            f"{CROSSPLANE_MAX_RESPONSE_MIB} MiB Crossplane accepts from a function; split "
            "it into several composites (a ModelCache: one per region, each with a narrower "
            "spec.placement; about 4,000 target clusters fit one ModelCache)"))
    return rsp


def fatal(rsp: fnv1.RunFunctionResponse, message: str) -> fnv1.RunFunctionResponse:
    """The response as one fatal result (nothing desired), its message bounded."""
    response.fatal(rsp, messages.clipped(message, messages.MESSAGE_LIMIT))
    return rsp


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """The gRPC servicer: the clock is injected so tests can fix it."""

    def __init__(self, now: Callable[[], datetime.datetime] = utc_now):
        self.now = now
        self.log = logging.get_logger()

    async def RunFunction(  # noqa: N802 - gRPC names it
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        rsp = run(req, self.now())
        for result in rsp.results:
            if result.severity == fnv1.SEVERITY_FATAL:
                self.log.warning("fatal result", tag=req.meta.tag, message=result.message)
        return rsp


@click.command(context_settings={"default_map": {
    "max_recv_message_size": MAX_REQUEST_MIB,
    "max_send_message_size": CROSSPLANE_MAX_RESPONSE_MIB}})
@sdkcli.standard_options
def main(**kwargs: Any) -> None:
    """Serve every fleetcache composer over gRPC (Crossplane's function protocol).

    Message limits default to what Crossplane sends and accepts (MiB): requests up to
    64, responses up to 4.
    """
    if not kwargs["insecure"]:
        check_tls_dir(kwargs["tls_certs_dir"])
    sdkcli.run(FunctionRunner(), **kwargs)


TLS_FILES = ("tls.crt", "tls.key", "ca.crt")


def check_tls_dir(directory: str | None) -> None:
    """A usage error, not a traceback, when neither mTLS files nor --insecure are given."""
    if not directory:
        raise click.UsageError(
            "serve with mTLS: --tls-certs-dir DIR (or TLS_SERVER_CERTS_DIR) holding "
            f"{', '.join(TLS_FILES)}, as Crossplane's function runtime mounts them; or "
            "pass --insecure to serve without TLS (local testing only)")
    missing = [f for f in TLS_FILES if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise click.UsageError(f"--tls-certs-dir {messages.shown(directory)} lacks "
                               f"{', '.join(missing)} (it needs {', '.join(TLS_FILES)})")
