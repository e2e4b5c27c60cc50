"""The pods that run on a simulated cluster's nodes (DaemonSet and Deployment pods) and their
containers: real agent processes, or a command the runtime runs from its image's declared
executables (design/simulation.md, "Engine images")."""

from __future__ import annotations

import posixpath
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleetcache.devtools.simulation.api import Key

RUN_SECONDS = 1.0  # how long a command an image can run takes before it exits 0
START_ERROR = 128  # containerd's exit code for a container that could not start


class Unmountable(Exception):
    """A volume the kubelet cannot set up yet (FailedMount): the pod waits and retries."""


def start_error(executable: str) -> str:
    """The message containerd gives a container runc could not exec (internal/cri/server/
    container_start.go: reason StartError, exit code 128)."""
    return ("failed to create containerd task: failed to create shim task: OCI runtime create "
            "failed: runc create failed: unable to start container process: exec: "
            f'"{executable}": executable file not found in $PATH: unknown')


@dataclass
class Program:
    """A container that is not the agent, as the runtime runs it: its command from the spec
    or the image, runnable when its first word is among the image's executables (None: an
    image the simulation does not pull, which runs anything)."""

    argv: list[str]
    executables: frozenset[str] | None
    completes: bool  # an init container's command exits; a sidecar's or a main one's keeps running


@dataclass
class Container:
    """One container of a pod: a real agent process when its command is fleetcache-agent,
    else a `Program` the runtime runs from its image once the kubelet has the image."""

    spec: dict
    argv: list[str] | None  # the process to run, None for an image this machine cannot run
    env: dict[str, str]
    mounts: dict[str, str]  # mountPath -> host directory
    termination_log: Path
    log: Path
    process: subprocess.Popen | None = None
    probed_at: float = float("-inf")
    ready: bool = False
    restarts: int = 0
    not_before: float = 0.0  # CrashLoopBackOff: no restart before this time
    spec_env: dict[str, str] = field(default_factory=dict)  # the env as the pod spec gives it
    clock: Callable[[], float] = time.monotonic  # the kubelet's seconds
    init: bool = False  # an init container
    sidecar: bool = False  # an init container with restartPolicy Always (KEP-753)
    program: Program | None = None  # set once the image is on the node (not the agent)
    image_id: str = ""  # the image it was created from: present in the runtime from then on
    ran_at: float | None = None  # when the program last started
    exit_reason: str = ""  # StartError when the runtime could not start it
    waiting: tuple[str, str] | None = None  # (reason, message) while the kubelet cannot start it
    started_up: bool = False  # a sidecar's startupProbe passed
    pull_failures: int = 0  # the kubelet's image pull backoff for this container
    pull_not_before: float = float("-inf")
    pulling: str = ""  # the reference whose Pulling event was written

    @property
    def name(self) -> str:
        return self.spec["name"]

    @property
    def started(self) -> bool:
        return self.process is not None or self.ran_at is not None

    def start(self) -> None:
        self.waiting = None
        if self.argv is not None:
            self.termination_log.write_text("")
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(self.argv, env=self.env,
                                                stdout=subprocess.DEVNULL, stderr=log)
        elif self.program is not None:
            self.ran_at = self.clock()
            executable = posixpath.basename(self.program.argv[0]) if self.program.argv else ""
            runnable = self.program.executables is None or executable in self.program.executables
            self.exit_reason = "" if runnable else "StartError"
            self.termination_log.write_text("" if runnable else start_error(
                self.program.argv[0] if self.program.argv else ""))

    def exited(self) -> int | None:
        if self.process is not None:
            return self.process.poll()
        if self.ran_at is None or self.program is None:
            return None
        if self.exit_reason:
            return START_ERROR
        if self.program.completes and self.clock() >= self.ran_at + RUN_SECONDS:
            return 0
        return None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@dataclass(frozen=True)
class PodsFile:
    """The file image-status reads in place of listing Pods and Events: the namespace's, the
    Pods its label selector (`k=v,k2=v2`) matches."""

    path: Path
    namespace: str
    selector: dict[str, str]


@dataclass
class NodePod:
    """A pod bound to a node: init containers run to completion in order, then the
    containers run (restartPolicy Always), probed for readiness."""

    name: str
    namespace: str
    node: str
    owner: Key  # its DaemonSet or Deployment
    template_hash: str
    spec: dict  # the pod template's spec
    labels: dict
    directory: Path
    phase: str = "Pending"  # Pending | Running
    message: str = ""  # why it is Pending
    init: list[Container] = field(default_factory=list)
    containers: list[Container] = field(default_factory=list)
    status_files: dict[Path, tuple[Key, bool]] = field(default_factory=dict)  # file -> (ConfigMap, prune)
    labels_file: Path | None = None
    summary_files: dict[Path, Key] = field(default_factory=dict)  # file -> the ConfigMap it replaces keys of
    pods_file: PodsFile | None = None  # image-status's view of the API
    volume_images: set[str] = field(default_factory=set)  # image IDs its image volumes mount

    @property
    def ready(self) -> bool:
        """Running, and every container ready, sidecars included (KEP-753)."""
        return self.phase == "Running" and all(
            c.ready for c in [*self.containers, *(c for c in self.init if c.sidecar)])

    def stop(self) -> None:
        for container in self.init + self.containers:
            container.stop()

    def manifest(self) -> dict:
        """The Pod object as `kubectl get pod -o yaml` would show its status."""
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": dict(self.labels)},
                "spec": {**self.spec, "nodeName": self.node},
                "status": {"phase": self.phase, "message": self.message,
                           "conditions": [{"type": "Ready",
                                           "status": "True" if self.ready else "False"}],
                           "initContainerStatuses": [container_status(c) for c in self.init],
                           "containerStatuses": [container_status(c) for c in self.containers]}}


def container_status(c: Container) -> dict:
    """A container's status as the kubelet reports it: waiting (with the kubelet's reason),
    running or terminated; exited and waiting to restart: CrashLoopBackOff, the exit as
    lastState."""
    status: dict = {"name": c.name, "image": c.spec.get("image", ""), "imageID": c.image_id,
                    "ready": c.ready, "restartCount": c.restarts}
    code = c.exited()
    if c.waiting is not None:
        status["state"] = {"waiting": {"reason": c.waiting[0], "message": c.waiting[1]}}
    elif code is None:
        status["state"] = {"running": {}} if c.started else {"waiting": {}}
    else:
        terminated = {"exitCode": code, "reason": c.exit_reason or ("Completed" if code == 0 else "Error"),
                      "message": c.termination_log.read_text() if c.termination_log.exists() else ""}
        status["state"] = {"terminated": terminated}
        if code != 0 and time.monotonic() < c.not_before:
            status["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                f"back-off restarting failed container={c.name}")}}
            status["lastState"] = {"terminated": terminated}
    return status
