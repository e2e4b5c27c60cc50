"""A simulated cluster's Job controller: each attempt a real `fleetcache-agent` process with
its volumes mapped to directories, its progress record copied into its ConfigMap, and the
Job's status derived as the Job controller does (podFailurePolicy, backoffLimit,
activeDeadlineSeconds). With a clock (realistic timing), a Job's first pod starts
`POD_START_SECONDS` after the Job appears (scheduling, image, container start), and the
TTL-after-finished controller runs too: a finished Job is deleted once
ttlSecondsAfterFinished of the clock's seconds passed since it finished
(pkg/controller/ttlafterfinished)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fleetcache.agent.progress import configmap_data
from fleetcache.devtools.simulation.api import Key, Objects
from fleetcache.devtools.simulation.clock import Clock
from fleetcache.devtools.simulation.node_images import pullable
from fleetcache.devtools.simulation.storage import Volumes, translate

POD_START_SECONDS = 5.0


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
    finished_at: float = 0.0  # the clock's seconds when it finished
    created_at: float = 0.0  # the clock's seconds when the controller first saw it


class JobController:
    """The Jobs of one cluster and their attempts. `endpoint_override` points every agent's
    `--endpoint` elsewhere (a broken mirror in front of the cluster, its own test hub)."""

    def __init__(self, root: Path, objects: Objects, volumes: Volumes,
                 endpoint_override: str | None = None, clock: Clock | None = None):
        self.root = root
        self.objects = objects
        self.volumes = volumes
        self.endpoint_override = endpoint_override
        self.clock = clock
        self.jobs: dict[Key, JobRun] = {}

    def run_job(self, key: Key, job: dict, now: float) -> None:
        run = self.jobs.setdefault(key, JobRun(started_at=now, created_at=self.seconds()))
        spec = job["spec"]
        status = job.setdefault("status", {"startTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                     time.gmtime())})
        if run.finished:
            self.collect(key, job, run)
            return
        if run.pod is None:
            if run.attempts == 0 and self.seconds() < run.created_at + POD_START_SECONDS:
                return  # the first pod is still being scheduled and started
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

    def seconds(self) -> float:
        """The clock's seconds; without a clock every pod starts at once and no TTL runs."""
        return self.clock.seconds() if self.clock is not None else float("inf")

    def collect(self, key: Key, job: dict, run: JobRun) -> None:
        """The TTL-after-finished controller: the Job goes (its pods with it, foreground)."""
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if self.clock is not None and ttl is not None and self.seconds() >= run.finished_at + ttl:
            self.objects.pop(key, None)
            self.forget(key)

    def finish(self, job: dict, run: JobRun, condition: str, reason: str, message: str) -> None:
        run.finished = True
        run.finished_at = self.seconds()
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
        args = plain_http_to_loopback(args)
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
        mounts = self.volumes.claim_mounts(namespace, pod_spec, container)
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
            if "configMap" in volume:
                self.write_configmap_files(namespace, volume["configMap"], host)
            host.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(host)
        return mounts

    def write_configmap_files(self, namespace: str, source: Mapping, host: Path) -> None:
        """A Job's configMap volume (the pinned manifest of an S3 or volume source): each data
        key a file, as the kubelet projects it when the pod starts."""
        configmap = self.objects.get(("ConfigMap", namespace, source["name"])) or {}
        host.mkdir(parents=True, exist_ok=True)
        for key, value in (configmap.get("data") or {}).items():
            (host / key).write_text(value)

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
            record.update(self.volumes.claim_usage(pod.claims[0]))
        configmap["data"] = configmap_data(record)

    def forget(self, key: Key) -> None:
        """A deleted Job: its running attempt is killed."""
        run = self.jobs.pop(key, None)
        if run and run.pod and run.pod.process.poll() is None:
            run.pod.process.kill()
            run.pod.process.wait()

    def running_pods(self) -> int:
        return sum(1 for run in self.jobs.values()
                   if run.pod is not None and run.pod.process.poll() is None)


def plain_http_to_loopback(args: list[str]) -> list[str]:
    """resolve-images asks its images' registries over HTTPS; the simulation's registries are
    on loopback and speak plain HTTP, as the nodes' runtimes reach them (node_images.py), so a
    Job whose every image is on loopback gets `--plain-http`."""
    if args[:1] != ["resolve-images"] or "--plain-http" in args:
        return args
    images = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--image"]
    return [*args, "--plain-http"] if images and all(map(pullable, images)) else args


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
