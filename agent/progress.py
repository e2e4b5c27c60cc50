"""Progress records: to a JSON file (replaced atomically) and to a ConfigMap's `data`.

A record is emitted at every phase change, and otherwise when 2 s have passed or the
bytes moved by 5 % since the last one, so a fast fetch never floods the API server and
a slow one still reports every 2 s. A ConfigMap patch that fails is logged (status only,
no bodies) and never fails the fetch; the patching runs on its own thread so a slow API
server never slows the download.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetcache import reasons
from fleetcache.agent.disk import write_atomic
from fleetcache.agent.errors import AgentError

log = logging.getLogger("fleetcache.agent")

FETCH_FIELDS = ("phase", "bytesDone", "bytesTotal", "filesDone", "filesTotal", "commit", "manifestDigest",
                "bytesPerSecond", "usedBytes", "capacityBytes", "reason", "message")
RESOLVE_FIELDS = ("phase", "repo", "revision", "commit", "files", "bytes", "manifestDigest", "compared", "reason",
                 "message")
RESOLVE_IMAGES_FIELDS = ("phase", "images", "reason", "message")
PRUNE_FIELDS = ("phase", "repo", "prunedCommits", "freedBytes", "usedBytes", "capacityBytes", "reason", "message")
VERIFY_FIELDS = ("phase", "usedBytes", "capacityBytes", "reason", "message")  # verify's failure record
MIN_INTERVAL = 2.0
MIN_STEP = 0.05
FLUSH_TIMEOUT = 10.0


def configmap_data(record: dict) -> dict[str, str]:
    """ConfigMap data wants strings: numbers as decimal strings, empty string for unset."""
    return {k: "" if v is None else json.dumps(v, separators=(",", ":"), sort_keys=True)
            if isinstance(v, (list, dict)) else str(v) for k, v in record.items()}


def emit_to(sinks: list, record: dict, what: str) -> None:
    """The record to every sink; a sink that fails to write is logged and the work goes on."""
    for sink in sinks:
        try:
            sink.emit(record)
        except OSError as err:
            log.warning("could not write %s (%s); continuing", what, type(err).__name__)


class FileSink:
    def __init__(self, path: Path):
        self.path = path

    def emit(self, record: dict) -> None:
        write_atomic(self.path, (json.dumps(record, sort_keys=True) + "\n").encode(), durable=False)

    def close(self) -> None:
        pass


def parse_configmap_ref(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise AgentError(reasons.InvalidConfiguration, f"--progress-configmap {value!r} is not NAMESPACE/NAME")
    return namespace, name


def incluster_core_api():
    from kubernetes import client, config

    config.load_incluster_config()
    return client.CoreV1Api()


class ConfigMapSink:
    """Patches the latest record into the ConfigMap from a background thread; `api` is injectable."""

    def __init__(self, namespace: str, name: str, api_factory=incluster_core_api):
        self.namespace, self.name = namespace, name
        self._api_factory = api_factory
        self._api: Any = None  # a kubernetes CoreV1Api once made (the library is untyped)
        self._pending: dict | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="progress-configmap", daemon=True)
        self._thread.start()

    def emit(self, record: dict) -> None:
        with self._cond:
            self._pending = record
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(FLUSH_TIMEOUT)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                record, self._pending = self._pending, None
                if record is None:
                    return
            self._patch(record)

    def _patch(self, record: dict) -> None:
        try:
            if self._api is None:
                self._api = self._api_factory()
            body = {"data": configmap_data(record)}
            self._api.patch_namespaced_config_map(self.name, self.namespace, body)
        except Exception as err:  # noqa: BLE001 - progress must never fail the fetch
            status = getattr(err, "status", None)
            log.warning("could not patch ConfigMap %s/%s (%s%s); continuing", self.namespace, self.name,
                        type(err).__name__, f" {status}" if status else "")


class Progress:
    """The current record plus throttled emission to every sink; safe to call from worker threads."""

    def __init__(self, sinks: list, fields: tuple[str, ...] = FETCH_FIELDS, clock=time.monotonic):
        self.sinks = sinks
        self.clock = clock
        self.record: dict = {f: None for f in fields}
        self._lock = threading.Lock()
        self._started = clock()
        self._last_emit = float("-inf")
        self._last_bytes = 0
        self._transferred = 0
        # the volume's usage, merged into every phase change (set once --dest is known)
        self.measure: Callable[[], dict] = dict

    def _emit_locked(self) -> None:
        if "bytesPerSecond" in self.record:
            elapsed = max(self.clock() - self._started, 1e-6)
            self.record["bytesPerSecond"] = int(self._transferred / elapsed)
        self._last_emit = self.clock()
        self._last_bytes = self.record.get("bytesDone") or 0
        emit_to(self.sinks, dict(self.record), "progress")

    def phase(self, phase: str, **fields) -> None:
        """A phase change is always emitted, with the volume's usage measured anew; it clears a
        note left by the phase before."""
        with self._lock:
            self.record.update({"message": None, **self.measure()}, **fields, phase=phase)
            self._emit_locked()

    def note(self, message: str | None) -> None:
        """Say what the agent is waiting on (a retried endpoint) without changing phase; None clears it."""
        with self._lock:
            if self.record["message"] != message:
                self.record["message"] = message
                self._emit_locked()

    def update(self, bytes_delta: int = 0, files_delta: int = 0, transferred: int = 0) -> None:
        with self._lock:
            self.record["bytesDone"] = (self.record["bytesDone"] or 0) + bytes_delta
            self.record["filesDone"] = (self.record["filesDone"] or 0) + files_delta
            self._transferred += transferred
            total = self.record["bytesTotal"] or 0
            stepped = total and abs(self.record["bytesDone"] - self._last_bytes) >= MIN_STEP * total
            if stepped or self.clock() - self._last_emit >= MIN_INTERVAL:
                self._emit_locked()

    def fail(self, reason: str, message: str) -> dict:
        self.phase("Failed", reason=reason, message=message)
        return dict(self.record)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def write_termination(path: Path, record: dict) -> None:
    """The pod's termination message: only where Kubernetes provides a writable file.

    AgentError caps what-happened text, so the record stays under Kubernetes' 4096-byte limit.
    """
    if path.exists() and os.access(path, os.W_OK):
        try:
            with open(path, "w") as f:
                f.write(json.dumps(record, sort_keys=True))
        except OSError as err:
            log.warning("could not write the termination message (%s)", type(err).__name__)
