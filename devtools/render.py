"""Run a Composition's pipeline against the real function server, like
`crossplane composition render`.

The function server is reached over gRPC on loopback: either a `fleetcache-function`
process started here (the default), an in-process server (tests, the demo), or the
`--address` of one already running. Requirement rounds are answered from a set of
"required" resources the way Crossplane answers them (internal/xfn/required_resources.go,
FetchingFunctionRunner): call, fetch what was asked for, call again until the requirements
stop changing, at most MAX_REQUIREMENT_ROUNDS calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format

from fleetcache import messages
from fleetcache.apis.documents import load_documents
from fleetcache.apis.xrds import Violation, Xrd, xrd_for_kind, xrd_schemas
from fleetcache.devtools import manifests
from fleetcache.functions import read, times
from fleetcache.functions import server as function_server
from fleetcache.functions.k8s import objects

RESOURCE_NAME_ANNOTATION = "crossplane.io/composition-resource-name"
COMPOSITE_LABEL = "crossplane.io/composite"  # Crossplane's label naming a composed resource's XR
# internal/xfn/required_resources.go, MaxRequirementsIterations: the calls after the first
# one a step may take to settle its requirements; one more and the step fails.
MAX_REQUIREMENTS_ITERATIONS = 5
MAX_REQUIREMENT_ROUNDS = MAX_REQUIREMENTS_ITERATIONS + 1  # a step's calls, at most
# Crossplane's own condition types, which it never takes from a function (apis/core/v2 and
# apis/apiextensions/v1 conditions.go, IsSystemConditionType).
SYSTEM_CONDITION_TYPES = frozenset({"Ready", "Synced", "Healthy", "UpToDate", "Responsive"})
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # 5,000 clusters make a request of about 10 MB
GRPC_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
Clock = Callable[[], datetime.datetime]  # the control plane's: what stamps a condition


class RenderError(ValueError):
    """Render could not run (a Composition for another kind, an observed resource without
    its resource name, a function server that does not answer); one line."""


class PipelineError(RenderError):
    """A step Crossplane would give up on (its requirements did not settle), in Crossplane's
    words: the composite reconcile fails with it, as with a fatal result."""


# --- function server on loopback -------------------------------------------------------


@dataclass(frozen=True)
class TLSFiles:
    """Client side of mTLS: the CA that signed the server, and our own cert and key."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def from_dir(cls, directory: str | Path) -> TLSFiles:
        """The files as Crossplane mounts a function's client certificates: ca.crt, tls.crt, tls.key."""
        folder = Path(directory)
        missing = [name for name in ("ca.crt", "tls.crt", "tls.key") if not (folder / name).is_file()]
        if missing:
            raise RenderError(f"--tls-certs-dir {messages.shown(str(directory))} lacks {', '.join(missing)}")
        return cls((folder / "ca.crt").read_bytes(), (folder / "tls.crt").read_bytes(),
                   (folder / "tls.key").read_bytes())


class InProcessServer:
    """The real gRPC server and servicer on 127.0.0.1, served from one background event loop.

    grpc.aio binds to the first event loop that uses it, so every in-process server in a
    process shares one loop thread.
    """

    _loop: asyncio.AbstractEventLoop | None = None
    _loop_lock = threading.Lock()

    def __init__(self, credentials: grpc.ServerCredentials | None = None,
                 runner: function_server.FunctionRunner | None = None):
        self.credentials = credentials
        self.runner = runner or function_server.FunctionRunner()
        self.address = ""
        self._server: grpc.aio.Server | None = None

    @classmethod
    def shared_loop(cls) -> asyncio.AbstractEventLoop:
        with cls._loop_lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, daemon=True,
                                 name="fleetcache-grpc").start()
                cls._loop = loop
            return cls._loop

    async def _start(self) -> str:
        self._server = grpc.aio.server(options=GRPC_OPTIONS)
        grpcv1.add_FunctionRunnerServiceServicer_to_server(self.runner, self._server)
        if self.credentials is None:
            port = self._server.add_insecure_port("127.0.0.1:0")
        else:
            port = self._server.add_secure_port("127.0.0.1:0", self.credentials)
        await self._server.start()
        return f"127.0.0.1:{port}"

    def __enter__(self) -> InProcessServer:
        self.address = asyncio.run_coroutine_threadsafe(self._start(),
                                                        self.shared_loop()).result(10)
        return self

    def __exit__(self, *_: Any) -> None:
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self._server.stop(0), self.shared_loop()).result(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def repo_definitions(repo_root: Path) -> tuple[dict[str, dict], dict[tuple[str, str], dict]]:
    """A checkout's Compositions by composite kind and its XRDs' schemas, as the control
    plane of the demo and of the end-to-end tests loads them."""
    compositions = {d["spec"]["compositeTypeRef"]["kind"]: d
                    for d in load_documents(repo_root / "compositions")
                    if d.get("kind") == "Composition"}
    return compositions, xrd_schemas(load_documents(repo_root / "apis"))


@contextlib.contextmanager
def function_process() -> Iterator[str]:
    """Start `fleetcache-function --insecure` on a free loopback port; yield its address."""
    address = f"127.0.0.1:{free_port()}"
    command = [sys.executable, "-c", "from fleetcache.functions.server import main; main()",
               "--insecure", "--address", address,
               "--max-recv-message-size", str(MAX_MESSAGE_BYTES // 2**20)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until_serving(address, process)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_until_serving(address: str, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode() if process.stderr else ""
            raise RuntimeError(f"fleetcache-function exited early: {err.strip()[-2000:]}")
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                continue
    raise RuntimeError(f"fleetcache-function did not listen on {address} within {timeout}s")


def channel_to(address: str, tls: TLSFiles | None = None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address, options=GRPC_OPTIONS)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca, private_key=tls.key,
                                               certificate_chain=tls.cert)
    return grpc.secure_channel(address, credentials, options=GRPC_OPTIONS)


# --- the pipeline ---------------------------------------------------------------------------


@dataclass
class Rendered:
    """What a pipeline run leaves: the composite (its status merged on success, as it was
    on a fatal result), what it composes, the results, and what Crossplane keeps of the run:
    the conditions the steps reported (system types dropped), each step's last requirements
    (`step/name` -> ResourceSelector as JSON, what v2.4 watches) and the response TTL in
    seconds (the shortest a step gave; 0: none)."""

    composite: dict
    resources: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    context: dict = field(default_factory=dict)
    conditions: list[dict] = field(default_factory=list)
    requirements: dict[str, dict] = field(default_factory=dict)
    ttl: float = 0.0

    @property
    def fatal(self) -> list[str]:
        return [r["message"] for r in self.results if r.get("severity") == "SEVERITY_FATAL"]

    @property
    def failure(self) -> str:
        """The first fatal result as Crossplane's PipelineFatalError words it, or ""."""
        first = next((r for r in self.results if r.get("severity") == "SEVERITY_FATAL"), None)
        return "" if first is None else \
            f"pipeline step {go_quoted(first['step'])} returned a fatal result: {first['message']}"

    def by_kind(self, kind: str) -> list[dict]:
        return [r for r in self.resources if r.get("kind") == kind]

    def documents(self, include_context: bool = False) -> list[dict]:
        docs = [self.composite, *self.resources]
        docs += [{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Result", **r}
                 for r in self.results]
        if include_context:
            docs.append({"apiVersion": "render.crossplane.io/v1beta1", "kind": "Context",
                         "fields": self.context})
        return docs


def go_quoted(text: str) -> str:
    """`text` as Go's %q prints it (Crossplane's messages quote step names so)."""
    return json.dumps(text, ensure_ascii=False)


def matches(selector: fnv1.ResourceSelector, candidate: dict) -> bool:
    if candidate.get("apiVersion") != selector.api_version or candidate.get("kind") != selector.kind:
        return False
    meta = candidate.get("metadata", {})
    if selector.namespace and meta.get("namespace") != selector.namespace:
        return False
    if selector.WhichOneof("match") == "match_name":
        return meta.get("name") == selector.match_name
    labels = meta.get("labels", {}) or {}
    return all(labels.get(k) == v for k, v in selector.match_labels.labels.items())


def answer_requirements(requirements: fnv1.Requirements, available: list[dict]
                        ) -> dict[str, list[dict]]:
    return {key: answer(selector, available) for key, selector in requirements.resources.items()}


def answer(selector: fnv1.ResourceSelector, available: list[dict]) -> list[dict]:
    """What Crossplane fetches for one selector, sorted by namespace and name as it sorts."""
    return sorted((r for r in available if matches(selector, r)),
                  key=lambda r: (r.get("metadata", {}).get("namespace", ""),
                                 r.get("metadata", {}).get("name", "")))


def answer_selectors(selectors: dict[str, dict], available: list[dict]) -> dict[str, list[dict]]:
    """`Rendered.requirements` answered from `available` (what a watch on them would see)."""
    return {key: answer(json_format.ParseDict(selector, fnv1.ResourceSelector()), available)
            for key, selector in selectors.items()}


def build_request(composite: dict, observed: dict[str, dict], desired: fnv1.State,
                  context: Any, step_input: dict | None, required: dict[str, list[dict]],
                  tag: str) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest(meta=fnv1.RequestMeta(tag=tag))
    resource.update(req.observed.composite, composite)
    for key, res in observed.items():
        resource.update(req.observed.resources[key], res)
    req.desired.CopyFrom(desired)
    if context is not None:
        req.context.CopyFrom(context)
    if step_input:
        req.input.CopyFrom(resource.dict_to_struct(step_input))
    for key, items in required.items():
        target = req.required_resources[key]
        for item in items:
            target.items.add().resource.CopyFrom(resource.dict_to_struct(item))
    return req


class FunctionRunner(Protocol):
    """What a pipeline calls: the generated gRPC stub, or a wrapper of it (the demo's Recorder)."""

    def RunFunction(self, request: fnv1.RunFunctionRequest, timeout: float  # noqa: N802 - the gRPC stub's name
                    ) -> fnv1.RunFunctionResponse: ...


def run_pipeline(stub: FunctionRunner, composite: dict, composition: dict,
                 observed: list[dict] | None = None, required: list[dict] | None = None,
                 clock: Clock = function_server.utc_now) -> Rendered:
    """Run every step as Crossplane's FunctionComposer does (composition_functions.go): each
    step observes the composite as it is and gets the desired state and context the last one
    returned; a fatal result stops the pipeline with the composite unchanged (the conditions
    reported so far are kept); a step whose requirements do not settle raises PipelineError.
    `clock` is the control plane's: it stamps the conditions (a simulation passes its own)."""
    observed_by_key = {}
    for res in observed or []:
        key = (res.get("metadata", {}).get("annotations", {}) or {}).get(RESOURCE_NAME_ANNOTATION)
        if not key:
            raise RenderError(f"observed {messages.shown(res.get('kind'))} "
                              f"{messages.shown(res.get('metadata', {}).get('name'))} "
                              f"has no {RESOURCE_NAME_ANNOTATION} annotation")
        observed_by_key[key] = res
    desired = fnv1.State()
    context = None
    results: list[dict] = []
    conditions: list[dict] = []
    requirements: dict[str, dict] = {}
    ttl = 0.0
    for step in composition.get("spec", {}).get("pipeline", []):
        name = str(step.get("step"))
        rsp = run_step(stub, name, step.get("input"), composite, observed_by_key, desired,
                       context, required or [])
        results += [{"severity": fnv1.Severity.Name(r.severity), "message": r.message,
                     "step": name} for r in rsp.results]
        conditions += reported_conditions(rsp)
        requirements.update({f"{name}/{key}": json_format.MessageToDict(selector)
                             for key, selector in rsp.requirements.resources.items()})
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return Rendered(composite=copy.deepcopy(composite), results=results,
                            conditions=conditions, requirements=requirements)
        step_ttl = rsp.meta.ttl.ToTimedelta().total_seconds()
        if step_ttl > 0 and (ttl == 0 or step_ttl < ttl):
            ttl = step_ttl
        desired, context = rsp.desired, rsp.context
    return Rendered(
        composite=status_after(composite, desired, conditions, clock()),
        resources=[composed(composite, key, desired.resources[key])
                   for key in sorted(desired.resources)],
        results=results,
        context=resource.struct_to_dict(context) if context is not None else {},
        conditions=conditions,
        requirements=requirements,
        ttl=ttl,
    )


def run_step(stub: FunctionRunner, name: str, step_input: dict | None, composite: dict,
             observed: dict[str, dict], desired: fnv1.State, context: Any,
             available: list[dict]) -> fnv1.RunFunctionResponse:
    """One step, as FetchingFunctionRunner runs it: call, fetch what the requirements select,
    call again, until a call returns the requirements the one before it did (a response
    without requirements equals none at all) or a fatal result; the context carries from call
    to call. After MAX_REQUIREMENT_ROUNDS calls Crossplane gives up."""
    previous: fnv1.Requirements | None = None
    answered: dict[str, list[dict]] = {}
    for iteration in range(MAX_REQUIREMENT_ROUNDS):
        req = build_request(composite, observed, desired, context, step_input, answered,
                            tag=f"{name}-{iteration}")
        rsp = stub.RunFunction(req, timeout=60)
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return rsp
        current = rsp.requirements if rsp.HasField("requirements") else None
        if current == previous:
            return rsp
        previous = current
        answered = answer_requirements(current, available) if current is not None else {}
        context = rsp.context
    raise PipelineError(f"cannot run Composition pipeline step {go_quoted(name)}: requirements "
                        f"didn't stabilize after the maximum number of iterations "
                        f"({MAX_REQUIREMENTS_ITERATIONS})")


def reported_conditions(rsp: fnv1.RunFunctionResponse) -> list[dict]:
    """The conditions a response reports, as Crossplane sets them on the XR: an unspecified
    status is Unknown, and Crossplane's own types are never taken from a function."""
    out = []
    for cond in rsp.conditions:
        if cond.type in SYSTEM_CONDITION_TYPES:
            continue
        status = {fnv1.STATUS_CONDITION_TRUE: "True",
                  fnv1.STATUS_CONDITION_FALSE: "False"}.get(cond.status, "Unknown")
        out.append({"type": cond.type, "status": status, "reason": cond.reason,
                    **({"message": cond.message} if cond.message else {})})
    return out


def merge_status(composite: dict, rsp: fnv1.RunFunctionResponse,
                 now: datetime.datetime | None = None) -> dict:
    """The XR's status after one response (`status_after` with its conditions, stamped
    `now`, else the wall clock's)."""
    return status_after(composite, rsp.desired, reported_conditions(rsp),
                        now or function_server.utc_now())


def status_after(composite: dict, desired: fnv1.State, conditions: list[dict],
                 now: datetime.datetime) -> dict:
    """The XR's status after a pipeline, as Crossplane's server-side apply leaves it: the
    fields the pipeline wrote, replacing the ones it wrote before (a field it no longer
    writes is removed), and the conditions, which are merged by type (`stamped`); Ready as
    the last desired composite says."""
    out = copy.deepcopy(composite)
    written = function_server.plain(resource.struct_to_dict(desired.composite.resource))
    previous = out.get("status", {}).get("conditions", [])
    out["status"] = {**written.get("status", {}), "conditions": previous}
    merged = {c["type"]: c for c in previous}
    told = list(conditions)
    if desired.composite.ready != fnv1.READY_UNSPECIFIED:
        ready = desired.composite.ready == fnv1.READY_TRUE
        told.append({"type": "Ready", "status": "True" if ready else "False",
                     "reason": "Available" if ready else "Creating"})
    merged.update({c["type"]: stamped(c, merged.get(c["type"]), now) for c in told})
    out["status"]["conditions"] = [merged[k] for k in sorted(merged)]
    if not out["status"]["conditions"]:
        del out["status"]["conditions"]
    return out


def stamped(condition: dict, before: dict | None, now: datetime.datetime) -> dict:
    """A condition as Crossplane sets it: stamped `now` (composition_functions.go gives every
    returned condition metav1.Now()), unless the one it replaces has the same type, status,
    reason and message, which is kept, its time with it (apis/core/v2/condition.go
    Condition.Equal, ConditionedStatus.SetConditions)."""
    if before is not None and all(before.get(k, "") == condition.get(k, "")
                                  for k in ("type", "status", "reason", "message")):
        return before
    return {**condition, "lastTransitionTime": times.format_time(now)}


def composed(composite: dict, key: str, desired: fnv1.Resource) -> dict:
    """A desired resource as Crossplane would apply it: owned and labelled by the XR."""
    res = function_server.plain(resource.struct_to_dict(desired.resource))
    meta = res.setdefault("metadata", {})
    xr_meta = composite.get("metadata", {})
    meta.setdefault("annotations", {})[RESOURCE_NAME_ANNOTATION] = key
    meta.setdefault("labels", {})[COMPOSITE_LABEL] = xr_meta.get("name", "")
    if xr_meta.get("namespace") and "namespace" not in meta:
        meta["namespace"] = xr_meta["namespace"]
    meta["ownerReferences"] = [{
        "apiVersion": composite.get("apiVersion", ""), "kind": composite.get("kind", ""),
        "name": xr_meta.get("name", ""), "uid": xr_meta.get("uid", ""),
        "controller": True, "blockOwnerDeletion": True}]
    return res


# --- files -----------------------------------------------------------------------------------


def dump(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=True, explicit_start=True, width=100)


@dataclass(frozen=True)
class Pipeline:
    """One composite resource to render: the Composition that composes it and its observed
    composed resources."""

    composite: dict
    composition: dict
    observed: list[dict]


def render(pipelines: list[Pipeline], required: list[dict], address: str | None = None,
           tls: TLSFiles | None = None) -> list[Rendered]:
    """Render each pipeline in turn against `address`, or against one fleetcache-function
    process started here for all of them (starting one takes about 2 s). A server that
    cannot be started, reached or run raises RenderError."""
    if not pipelines:
        return []
    try:
        with contextlib.ExitStack() as stack:
            if address:
                channel = stack.enter_context(channel_to(address, tls))
                wait_until_ready(channel, address)
            else:
                channel = stack.enter_context(channel_to(stack.enter_context(function_process())))
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            return [run_pipeline(stub, p.composite, p.composition, p.observed, required)
                    for p in pipelines]
    except grpc.RpcError as err:
        raise RenderError(f"the function server at {address or 'a local process'} failed: "
                          f"{err.code().name}: {messages.clipped(err.details())}") from None
    except RuntimeError as err:  # fleetcache-function did not start
        raise RenderError(messages.clipped(err, messages.MESSAGE_LIMIT)) from None


CONNECT_TIMEOUT_SECONDS = 10


def wait_until_ready(channel: grpc.Channel, address: str) -> None:
    """Fail fast, in one line, when nothing answers at `address`."""
    try:
        grpc.channel_ready_future(channel).result(timeout=CONNECT_TIMEOUT_SECONDS)
    except grpc.FutureTimeoutError:
        raise RenderError(f"no function server answered at {messages.clipped(address)} within "
                          f"{CONNECT_TIMEOUT_SECONDS}s; check --address (host:port) and that "
                          f"fleetcache-function runs there") from None


# --- what the API server would refuse --------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A violation in one object, printed as `<kind>/<name>: <field path>: <message>`."""

    kind: str
    name: str
    violation: Violation

    def __str__(self) -> str:
        return (f"{messages.clipped(self.kind)}/{messages.clipped(self.name)}: "
                f"{messages.clipped(self.violation.path or '<root>')}: {self.violation.message}")


def composite_type(composition: Mapping) -> tuple[Any, Any]:
    """(apiVersion, kind) of the composites a Composition composes."""
    ref = read.mapping_at(composition, "spec.compositeTypeRef")
    return ref.get("apiVersion"), ref.get("kind")


def composition_name(composition: Mapping) -> str:
    return str(read.mapping_at(composition, "metadata").get("name"))


def composition_for(composite: Mapping, compositions: list[dict]) -> dict:
    """The Composition Crossplane would run for `composite`: the one whose compositeTypeRef
    names its apiVersion and kind. Several such are refused rather than guessed between."""
    wanted = (composite.get("apiVersion"), composite.get("kind"))
    matching = [c for c in compositions if composite_type(c) == wanted]
    if len(matching) == 1:
        return matching[0]
    kind = f"{messages.shown(wanted[1])} ({messages.shown(wanted[0])})"
    if matching:
        raise RenderError(f"Compositions {messages.named([composition_name(c) for c in matching])} all compose "
                          f"{kind}; pass only the one to render with")
    if len(compositions) == 1:
        ref_api, ref_kind = composite_type(compositions[0])
        raise RenderError(
            f"Composition {messages.shown(composition_name(compositions[0]))} composes "
            f"{messages.shown(ref_kind)} ({messages.shown(ref_api)}), not {kind}; pass the Composition whose "
            f"spec.compositeTypeRef names the XR's apiVersion and kind")
    given = messages.named([f"{composition_name(c)} ({composite_type(c)[1]})" for c in compositions])
    raise RenderError(f"no Composition given composes {kind} (given: {given}); add the one whose "
                      f"spec.compositeTypeRef names the XR's apiVersion and kind with --composition")


def refusals(obj: Mapping, xrds: Mapping[str, Xrd], old: Mapping | None = None
             ) -> list[Refusal]:
    """What the API server would refuse in `obj`: its XRD when one defines its kind, else
    the Kubernetes schema (names and labels only, for kinds it does not define); the
    manifest a provider-kubernetes Object carries is checked as what it is."""
    meta = metadata if isinstance(metadata := obj.get("metadata"), Mapping) else {}
    kind, name = str(obj.get("kind")), str(meta.get("name"))
    xrd = xrd_for_kind(obj.get("kind"), xrds)
    found = xrd.violations(obj, old) if xrd is not None else manifests.manifest_violations(obj)
    out = [Refusal(kind, name, v) for v in found]
    manifest = read.get_path(obj, "spec.forProvider.manifest")
    if (obj.get("apiVersion"), obj.get("kind")) == (objects.OBJECT_API_VERSION, "Object") \
            and isinstance(manifest, Mapping):
        out += [Refusal(kind, name, Violation(
                    f"spec.forProvider.manifest.{v.path}".rstrip("."), v.message))
                for v in manifests.manifest_violations(manifest)]
    return out


def composed_refusals(resources: list[dict], xrds: Mapping[str, Xrd]
                      ) -> list[Refusal]:
    """What the API server would refuse when Crossplane applies each composed resource; a
    desired status is left out, as the status subresource ignores it."""
    return [refusal for res in resources
            for refusal in refusals({k: v for k, v in res.items() if k != "status"}, xrds)]
