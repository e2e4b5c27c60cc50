"""A control plane and a fleet of clusters on one machine, for the demo.

`ControlPlane` stands in for the API server and Crossplane: it stores composites,
defaults them from their XRDs, runs each one's Composition pipeline against the real
function server, applies what comes back and deletes what no longer does.
`Provider` stands in for provider-kubernetes: it applies Objects' manifests to a
`Cluster` under their management policies, patches references in from control-plane
Secrets, and reports the remote object and its readiness (the Object's CEL query,
evaluated with cel-python) the way the real provider does. `Cluster` stands in for a
cluster's controllers: PVCs bind to directories, Jobs run the real `fleetcache-agent`
as processes with their volumes mapped to directories, and derive their status as the
Job controller does (podFailurePolicy, backoffLimit, activeDeadlineSeconds).
design/simulation.md says exactly where this differs from the real thing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache import render as rendering
from fleetcache.agent.progress import configmap_data
from fleetcache.functions import kit
from fleetcache.functions.server import FunctionRunner

# Reconciled in this order in each pass: a grant decides before the caches that obey it.
XR_KINDS = ("FleetCluster", "ModelCacheGrant", "ModelCache", "ModelCacheHydration",
            "ModelDeployment", "ModelReplica")
READY = {"type": "Ready", "status": "True", "reason": "Available"}
NOT_READY = {"type": "Ready", "status": "False", "reason": "Creating"}
SYNCED = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}

Key = tuple[str, str, str]  # kind, namespace, name


def key_of(resource: dict) -> Key:
    meta = resource.get("metadata", {})
    return resource.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


# --- a cluster ------------------------------------------------------------------------------


@dataclass
class Pod:
    """One attempt of a Job: a real agent process with its volumes mapped to directories."""

    name: str
    process: subprocess.Popen
    started: float
    termination_log: Path
    progress_file: Path | None
    configmap: Key | None
    claims: tuple[Key, ...] = ()  # the PVCs it mounts


@dataclass
class JobRun:
    attempts: int = 0
    failed: int = 0
    pod: Pod | None = None
    started_at: float = 0.0
    finished: bool = False


class Cluster:
    """A cluster's API objects plus the controllers fleetcache relies on, in a directory."""

    def __init__(self, name: str, root: Path, endpoint_override: str | None = None):
        self.name = name
        self.root = root
        self.endpoint_override = endpoint_override
        self.objects: dict[Key, dict] = {}
        self.jobs: dict[Key, JobRun] = {}
        root.mkdir(parents=True, exist_ok=True)

    def volume_dir(self, namespace: str, claim: str) -> Path:
        return self.root / "volumes" / namespace / claim

    def get(self, key: Key) -> dict | None:
        return self.objects.get(key)

    def apply(self, manifest: dict) -> None:
        key = key_of(manifest)
        current = self.objects.get(key)
        applied = copy.deepcopy(manifest)
        if current is not None and "status" in current:
            applied["status"] = current["status"]
        self.objects[key] = applied

    def delete(self, key: Key) -> None:
        self.objects.pop(key, None)
        if key[0] == "PersistentVolumeClaim":  # dynamically provisioned: reclaimPolicy Delete
            shutil.rmtree(self.volume_dir(key[1], key[2]), ignore_errors=True)
        run = self.jobs.pop(key, None)
        if run and run.pod and run.pod.process.poll() is None:
            run.pod.process.kill()
            run.pod.process.wait()

    # -- controllers --------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        for key, obj in list(self.objects.items()):
            kind = key[0]
            if kind == "PersistentVolumeClaim":
                self.volume_dir(key[1], key[2]).mkdir(parents=True, exist_ok=True)
                obj["status"] = {"phase": "Bound"}
            elif kind == "Job":
                self.run_job(key, obj, now)
            elif kind == "Deployment":
                obj["status"] = self.deployment_status(obj)

    def run_job(self, key: Key, job: dict, now: float) -> None:
        run = self.jobs.setdefault(key, JobRun(started_at=now))
        spec = job["spec"]
        status = job.setdefault("status", {"startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                     time.gmtime())})
        if run.finished:
            return
        if run.pod is None:
            self.start_pod(key, job, run)
        pod = run.pod
        assert pod is not None
        self.copy_progress(pod)
        if now - run.started_at > spec.get("activeDeadlineSeconds", 1e9):
            pod.process.kill()
            pod.process.wait()
            self.finish(job, run, "Failed", "DeadlineExceeded",
                        "Job was active longer than specified deadline")
            return
        code = pod.process.poll()
        if code is None:
            status["active"] = 1
            return
        self.copy_progress(pod)
        status.pop("active", None)
        if code == 0:
            status["succeeded"] = 1
            self.finish(job, run, "Complete", "", "")
            return
        run.failed += 1
        status["failed"] = run.failed
        rule = fail_job_rule(spec, code)
        if rule is not None:
            self.finish(job, run, "Failed", "PodFailurePolicy",
                        f"Container agent for pod {key[1]}/{pod.name} failed with exit code "
                        f"{code} matching FailJob rule at index {rule}")
        elif run.failed > spec.get("backoffLimit", 6):
            self.finish(job, run, "Failed", "BackoffLimitExceeded",
                        "Job has reached the specified backoff limit")
        else:
            run.pod = None  # the Job controller starts a replacement pod on the next tick

    def finish(self, job: dict, run: JobRun, condition: str, reason: str, message: str) -> None:
        run.finished = True
        cond = {"type": condition, "status": "True"}
        if reason:
            cond.update(reason=reason, message=message)
        job["status"]["conditions"] = [cond]

    def start_pod(self, key: Key, job: dict, run: JobRun) -> None:
        run.attempts += 1
        pod_name = f"{key[2]}-{run.attempts}"
        pod_dir = self.root / "pods" / pod_name
        shutil.rmtree(pod_dir, ignore_errors=True)
        pod_dir.mkdir(parents=True)
        pod_spec = job["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        mounts = self.mount_volumes(key[1], pod_spec, container, pod_dir)
        args = [translate(arg, mounts) for arg in container.get("args", [])]
        args, progress_file, configmap = self.progress_to_file(args, key[1], pod_dir)
        if self.endpoint_override and "--endpoint" in args:
            args[args.index("--endpoint") + 1] = self.endpoint_override
        termination_log = pod_dir / "termination-log"
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(pod_dir / "home"),
               "TMPDIR": str(mounts.get("/tmp", pod_dir))}
        for item in container.get("env", []):
            env[item["name"]] = translate(item.get("value", ""), mounts)
        (pod_dir / "home").mkdir(exist_ok=True)
        command = [sys.executable, "-c", "from fleetcache.agent.cli import main; main()", *args,
                   "--termination-log", str(termination_log)]
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                   stderr=(pod_dir / "log").open("wb"))
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        claims = tuple(("PersistentVolumeClaim", key[1], volumes[m["name"]][
            "persistentVolumeClaim"]["claimName"]) for m in container.get("volumeMounts", [])
            if "persistentVolumeClaim" in volumes.get(m["name"], {}))
        run.pod = Pod(pod_name, process, time.monotonic(), termination_log, progress_file,
                      configmap, claims)

    def mount_volumes(self, namespace: str, pod_spec: dict, container: dict, pod_dir: Path
                      ) -> dict[str, str]:
        """mountPath -> host directory: emptyDirs per pod, PVCs per cluster, Secrets as files."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        mounts = self.claim_mounts(namespace, pod_spec, container)
        for host in mounts.values():
            Path(host).mkdir(parents=True, exist_ok=True)
        for mount in container.get("volumeMounts", []):
            if mount["mountPath"] in mounts:
                continue
            volume = volumes[mount["name"]]
            host = pod_dir / "volumes" / mount["name"]
            if "secret" in volume:
                secret = self.objects.get(("Secret", namespace, volume["secret"]["secretName"]))
                host.mkdir(parents=True, exist_ok=True)
                for item in volume["secret"].get("items", []):
                    data = (secret or {}).get("data", {}).get(item["key"], "")
                    (host / item["path"]).write_bytes(base64.b64decode(data))
            host.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(host)
        return mounts

    def claim_mounts(self, namespace: str, pod_spec: dict, container: dict) -> dict[str, str]:
        """mountPath -> the directory standing in for each mounted PVC."""
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        return {mount["mountPath"]: str(self.volume_dir(
                    namespace, volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]))
                for mount in container.get("volumeMounts", [])
                if "persistentVolumeClaim" in volumes[mount["name"]]}

    def progress_to_file(self, args: list[str], namespace: str, pod_dir: Path
                         ) -> tuple[list[str], Path | None, Key | None]:
        """The agent patches its ConfigMap through the in-cluster API, which this cluster
        does not serve: it writes the same record to a file that is copied into the
        ConfigMap's data instead."""
        if "--progress-configmap" not in args:
            return args, None, None
        at = args.index("--progress-configmap")
        ns, _, name = args[at + 1].partition("/")
        progress_file = pod_dir / "progress.json"
        args = args[:at] + ["--progress-file", str(progress_file)] + args[at + 2:]
        return args, progress_file, ("ConfigMap", ns or namespace, name)

    def copy_progress(self, pod: Pod) -> None:
        if pod.progress_file is None or pod.configmap is None or not pod.progress_file.exists():
            return
        configmap = self.objects.get(pod.configmap)
        if configmap is None:
            return
        try:
            record = json.loads(pod.progress_file.read_text())
        except (OSError, json.JSONDecodeError):
            return  # replaced atomically by the agent; the next tick reads it
        if record.get("usedBytes") is not None and pod.claims:
            record.update(self.claim_usage(pod.claims[0]))
        configmap["data"] = configmap_data(record)

    def claim_usage(self, claim: Key) -> dict[str, int]:
        """What statvfs would say if the PVC were its own filesystem of its requested size:
        every claim here is a directory on one shared filesystem, whose statvfs says
        nothing about one volume."""
        used = files_bytes(self.volume_dir(claim[1], claim[2]))
        requested = kit.get_path(self.objects.get(claim, {}), "spec.resources.requests.storage")
        try:
            capacity = kit.quantity_bytes(requested, "spec.resources.requests.storage")
        except kit.InputError:
            capacity = used
        return {"usedBytes": used, "capacityBytes": max(capacity, used)}

    def deployment_status(self, deployment: dict) -> dict:
        """Available when the engine could start: on Cache delivery the model directory the
        environment names must exist on the mounted volume (a real engine would fail)."""
        pod_spec = deployment["spec"]["template"]["spec"]
        container = pod_spec["containers"][0]
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        replicas = deployment["spec"].get("replicas", 1)
        if env.get("FLEETCACHE_DELIVERY") == "cache":
            mounts = self.claim_mounts(deployment["metadata"]["namespace"], pod_spec, container)
            model_dir = Path(translate(env.get("FLEETCACHE_MODEL", ""), mounts))
            if not (model_dir / "config.json").is_file():
                return {"replicas": replicas, "unavailableReplicas": replicas, "conditions": [
                    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                     "message": f"the engine cannot find {env.get('FLEETCACHE_MODEL')}"}]}
        return {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                "updatedReplicas": replicas, "observedGeneration": 1,
                "conditions": [{"type": "Available", "status": "True",
                                "reason": "MinimumReplicasAvailable"}]}

    def running_pods(self) -> int:
        return sum(1 for run in self.jobs.values()
                   if run.pod is not None and run.pod.process.poll() is None)

    def stop(self) -> None:
        for key in list(self.jobs):
            self.delete(key)


def translate(value: str, mounts: dict[str, str]) -> str:
    """A path inside the container, as the host directory it is mounted from."""
    for mount_path in sorted(mounts, key=len, reverse=True):
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return mounts[mount_path] + value[len(mount_path):]
    return value


def fail_job_rule(job_spec: dict, code: int) -> int | None:
    """Index of the podFailurePolicy FailJob rule matching `code`, as the Job controller
    evaluates it (rules in order, first match wins)."""
    for index, rule in enumerate((job_spec.get("podFailurePolicy") or {}).get("rules", [])):
        on_codes = rule.get("onExitCodes")
        if not on_codes:
            continue
        values = on_codes.get("values", [])
        hit = code in values if on_codes.get("operator") == "In" else code not in values
        if hit:
            return index if rule.get("action") == "FailJob" else None
    return None


# --- provider-kubernetes ------------------------------------------------------------------


class Provider:
    """Objects to clusters and back, honouring management policies and references."""

    def __init__(self, clusters: dict[str, Cluster], control_plane_secrets: Callable[[], list]):
        self.clusters = clusters
        self.secrets = control_plane_secrets
        self._cel: dict[str, Any] = {}

    def cluster_of(self, obj: dict) -> Cluster | None:
        return self.clusters.get(kit.get_path(obj, "spec.providerConfigRef.name", ""))

    def apply(self, obj: dict) -> None:
        cluster = self.cluster_of(obj)
        if cluster is None:
            return
        manifest = copy.deepcopy(obj["spec"]["forProvider"]["manifest"])
        for ref in obj["spec"].get("references", []) or []:
            self.patch_from(ref, manifest)
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        exists = cluster.get(key_of(manifest)) is not None
        if not exists and ({"*", "Create"} & policies):
            cluster.apply(manifest)
        elif exists and ({"*", "Update"} & policies):
            cluster.apply(manifest)

    def patch_from(self, ref: dict, manifest: dict) -> None:
        source = ref.get("patchesFrom") or {}
        for secret in self.secrets():
            meta = secret.get("metadata", {})
            if (secret.get("kind") == source.get("kind") and meta.get("name") == source.get("name")
                    and meta.get("namespace") == source.get("namespace")):
                value = kit.get_path(secret, source.get("fieldPath", ""))
                if value is not None:
                    target = manifest
                    *parents, last = ref.get("toFieldPath", source["fieldPath"]).split(".")
                    for part in parents:
                        target = target.setdefault(part, {})
                    target[last] = value

    def delete(self, obj: dict) -> None:
        cluster = self.cluster_of(obj)
        policies = set(obj["spec"].get("managementPolicies") or ["*"])
        if cluster is not None and ({"*", "Delete"} & policies):
            cluster.delete(key_of(obj["spec"]["forProvider"]["manifest"]))

    def observe(self, obj: dict) -> dict:
        observed = copy.deepcopy(obj)
        cluster = self.cluster_of(obj)
        remote = cluster.get(key_of(obj["spec"]["forProvider"]["manifest"])) if cluster else None
        if remote is None:
            observed["status"] = {"conditions": [SYNCED, NOT_READY]}
            return observed
        remote = copy.deepcopy(remote)
        if remote.get("kind") == "Secret":
            remote.pop("data", None)  # provider-kubernetes --sanitize-secrets
        readiness = obj["spec"].get("readiness") or {}
        ready = True
        if readiness.get("policy") == "DeriveFromCelQuery":
            ready = self.cel(readiness["celQuery"], remote)
        observed["status"] = {"atProvider": {"manifest": remote},
                              "conditions": [SYNCED, READY if ready else NOT_READY]}
        return observed

    def cel(self, query: str, remote: dict) -> bool:
        import celpy

        program = self._cel.get(query)
        if program is None:
            env = celpy.Environment()
            program = self._cel[query] = env.program(env.compile(query))
        try:
            return bool(program.evaluate({"object": celpy.json_to_cel(remote)}))
        except Exception:  # noqa: BLE001 - CEL errors (missing fields) mean not ready, as in the provider
            return False


# --- the control plane --------------------------------------------------------------------


@dataclass
class Event:
    kind: str
    name: str
    message: str


@dataclass
class ControlPlane:
    """The API server and Crossplane: XRs, their composed resources, and reconciles."""

    pipeline: Callable[..., rendering.Rendered]
    compositions: dict[str, dict]
    schemas: dict
    provider: Provider
    xrs: dict[Key, dict] = field(default_factory=dict)
    composed: dict[Key, dict[str, dict]] = field(default_factory=dict)
    others: dict[Key, dict] = field(default_factory=dict)  # Secrets, ProviderConfigs
    events: list[Event] = field(default_factory=list)
    deleting: set[Key] = field(default_factory=set)  # refused by a Usage, replayed later

    def apply(self, resource: dict) -> None:
        key = key_of(resource)
        if resource["kind"] in XR_KINDS:
            current = self.xrs.get(key)
            admitted = rendering.admit(copy.deepcopy(resource), self.schemas)
            if current is not None:
                admitted["status"] = current.get("status", {})
            self.xrs[key] = admitted
        else:
            self.others[key] = copy.deepcopy(resource)

    def secrets(self) -> list[dict]:
        return [r for r in self.others.values() if r.get("kind") == "Secret"]

    def required_pool(self) -> list[dict]:
        return list(self.xrs.values()) + self.secrets()

    def delete(self, key: Key) -> str:
        """`kubectl delete` of a composite. As Crossplane's Usage webhook does, it is
        refused while a Usage is `of` it (the refusal is returned, "" when deleted); with
        replayDeletion the refused deletion is retried at every reconcile until it goes."""
        holders = sorted(k[2] for k, usage in self.others.items() if k[0] == "Usage"
                         and kit.get_path(usage, "spec.of.kind") == key[0]
                         and kit.get_path(usage, "spec.of.resourceRef.name") == key[2]
                         and k[1] == key[1])
        if holders:
            self.deleting.add(key)
            return (f"This resource is in-use by {len(holders)} usage(s), including the Usage "
                    f"{holders[0]!r}")
        self.deleting.discard(key)
        self.xrs.pop(key, None)
        for child in self.composed.pop(key, {}).values():
            self.delete_composed(child)
        return ""

    def reconcile_all(self) -> None:
        """One pass, parents before children, so a composite created in this pass (a
        hydration, a replica) is reconciled in it too, as Crossplane's watch would."""
        for key in sorted(self.deleting):
            self.delete(key)
        for kind in XR_KINDS:
            for key in sorted(k for k in self.xrs if k[0] == kind):
                if key in self.xrs:
                    self.reconcile(key)

    def observed_for(self, key: Key) -> list[dict]:
        observed = []
        for resource_name, resource in self.composed.get(key, {}).items():
            if resource["kind"] in XR_KINDS:
                current = self.xrs.get(key_of(resource), resource)
            elif resource["kind"] == "Object":
                current = self.provider.observe(resource)
            else:
                current = self.others.get(key_of(resource), resource)
            current = copy.deepcopy(current)
            current.setdefault("metadata", {}).setdefault("annotations", {})[
                rendering.RESOURCE_NAME_ANNOTATION] = resource_name
            observed.append(current)
        return observed

    def reconcile(self, key: Key) -> None:
        xr = self.xrs[key]
        rendered = self.pipeline(xr, self.compositions[key[0]], self.observed_for(key),
                                 self.required_pool())
        if rendered.fatal:
            self.events.append(Event(key[0], key[2], rendered.fatal[0]))
            return
        xr["status"] = rendered.composite.get("status", {})
        desired = {}
        for resource in rendered.resources:
            name = resource["metadata"]["annotations"][rendering.RESOURCE_NAME_ANNOTATION]
            desired[name] = resource
            self.apply_composed(resource)
        for name, gone in self.composed.get(key, {}).items():
            if name not in desired or key_of(desired[name]) != key_of(gone):
                self.delete_composed(gone)
        self.composed[key] = desired

    def apply_composed(self, resource: dict) -> None:
        if resource["kind"] == "Object":
            self.provider.apply(resource)
        else:
            self.apply(resource)

    def delete_composed(self, resource: dict) -> None:
        key = key_of(resource)
        if resource["kind"] == "Object":
            self.provider.delete(resource)
        elif resource["kind"] in XR_KINDS:
            self.xrs.pop(key, None)  # a composed composite: deleted with its parent
            for child in self.composed.pop(key, {}).values():
                self.delete_composed(child)
        else:
            self.others.pop(key, None)

    def of_kind(self, kind: str) -> list[dict]:
        return [xr for (k, _, _), xr in sorted(self.xrs.items()) if k == kind]


def step(control: ControlPlane, clusters: Iterable[Cluster]) -> float:
    """One round: every composite reconciles, then every cluster's controllers act.
    Returns the monotonic time the clusters acted at."""
    control.reconcile_all()
    now = time.monotonic()
    for cluster in clusters:
        cluster.tick(now)
    return now


def files_bytes(directory: Path) -> int:
    """Bytes in the files under a directory; symlinks (hf-cache snapshots) are not counted,
    so a blob two snapshots share counts once."""
    return sum(p.stat().st_size for p in directory.rglob("*")
               if p.is_file() and not p.is_symlink())


def kubectl_table(rows: list[list[str]]) -> list[str]:
    """Rows aligned in columns, as `kubectl get` prints them (indented for the demo)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in rows]


def all_text(resources: Iterable[dict]) -> str:
    return json.dumps(list(resources), sort_keys=True)


# --- time -----------------------------------------------------------------------------------


class Clock:
    """The composers' `now` in a simulation: wall-clock time plus whatever the story skips
    (a TTL of hours passes in one call of `advance`)."""

    def __init__(self) -> None:
        self.skipped = datetime.timedelta()

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc) + self.skipped

    def advance(self, by: datetime.timedelta) -> None:
        self.skipped += by


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
