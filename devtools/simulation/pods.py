"""The pods that run on a simulated cluster's nodes (DaemonSet and Deployment pods) and their
containers: real agent processes, or an engine that only counts as started."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from fleetcache.devtools.simulation.api import Key


class Unmountable(Exception):
    """A volume the kubelet cannot set up yet (FailedMount): the pod waits and retries."""


@dataclass
class Container:
    """One container of a pod: a real agent process when its command is fleetcache-agent
    (anything else, the engine, only counts as started)."""

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

    @property
    def name(self) -> str:
        return self.spec["name"]

    def start(self) -> None:
        if self.argv is not None:
            self.termination_log.write_text("")
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(self.argv, env=self.env,
                                                stdout=subprocess.DEVNULL, stderr=log)

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


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

    @property
    def ready(self) -> bool:
        return self.phase == "Running" and all(c.ready for c in self.containers)

    def stop(self) -> None:
        for container in self.init + self.containers:
            container.stop()

    def manifest(self) -> dict:
        """The Pod object as `kubectl get pod -o yaml` would show its status."""
        def terminated(c: Container) -> dict:
            code = c.exited()
            if code is None:
                return {"name": c.name, "state": {"running": {}} if c.process else {"waiting": {}}}
            return {"name": c.name, "state": {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "message": c.termination_log.read_text() if c.termination_log.exists() else ""}}}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": dict(self.labels)},
                "spec": {**self.spec, "nodeName": self.node},
                "status": {"phase": self.phase, "message": self.message,
                           "conditions": [{"type": "Ready",
                                           "status": "True" if self.ready else "False"}],
                           "initContainerStatuses": [terminated(c) for c in self.init],
                           "containerStatuses": [{**terminated(c), "ready": c.ready,
                                                  "restartCount": c.restarts}
                                                 for c in self.containers]}}
