"""The agent's pod and Job on a cluster, and reading how a Job ended.

The Job runs fleetcache-agent under Pod Security `restricted`; its podFailurePolicy
fails at once on the exit-code table's permanent codes. `failure_reason` turns a
failed Job (exit code, the agent's last record, Kubernetes' own verdict) back into a
reason and a message with its remedy."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetcache import __version__, exitcodes, reasons
from fleetcache.functions import naming
from fleetcache.functions.read import condition_of, is_true, mapping_at
from fleetcache.messages import clipped
from fleetcache.reasons import reason_or_empty, remedy, with_remedy

DEFAULT_AGENT_IMAGE = f"ghcr.io/fleetcache/fleetcache-agent:v{__version__}"
CACHE_MOUNT_PATH = "/var/cache/fleetcache"
TOKEN_MOUNT_PATH = "/var/run/secrets/fleetcache/token"
TOKEN_SECRET_KEY = "token"


def progress_access_manifests(
    service_account: str, configmap: str, namespace: str, labels: Mapping[str, str]
) -> list[dict]:
    """ServiceAccount, Role and RoleBinding that may only get and patch one ConfigMap."""
    meta = {"name": service_account, "namespace": namespace, "labels": dict(labels)}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta),
         "automountServiceAccountToken": True},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "resourceNames": [configmap], "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": service_account},
         "subjects": [{"kind": "ServiceAccount", "name": service_account,
                       "namespace": namespace}]},
    ]


def progress_configmap_manifest(name: str, namespace: str, labels: Mapping[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "data": {"phase": "Pending"}}


RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
AGENT_UID = 65532
API_TOKEN_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"  # where the client looks for it


def api_token_volume() -> dict:
    """The API token as a projected volume named `token`, mounted only into the containers
    that call the API: the pod automounts none, so no other container ever sees it."""
    return {"name": "token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


@dataclass(frozen=True)
class JobPolicy:
    backoff_limit: int
    active_deadline_seconds: int
    ttl_seconds_after_finished: int

    @classmethod
    def of(cls, job: Mapping) -> JobPolicy:
        """A spec's `job` read through its model: the XRD's defaults are filled in."""
        return cls(job["backoffLimit"], job["activeDeadlineSeconds"],
                   job["ttlSecondsAfterFinished"])

    def as_spec(self) -> dict:
        """The policy as a spec's `job` again (a ModelCacheHydration's, as its ModelCache writes it)."""
        return {"backoffLimit": self.backoff_limit,
                "activeDeadlineSeconds": self.active_deadline_seconds,
                "ttlSecondsAfterFinished": self.ttl_seconds_after_finished}


def agent_job_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    args: list[str],
    service_account: str,
    labels: Mapping[str, str],
    policy: JobPolicy,
    token_secret: str | None = None,
    cache_claim: str | None = None,
    resources: Mapping | None = None,
) -> dict:
    """A batch/v1 Job running the agent under Pod Security `restricted`.

    Permanent exit codes fail the Job at once (podFailurePolicy); disruptions (node
    drain, preemption) do not count against backoffLimit.
    """
    volumes: list[dict] = [{"name": "tmp", "emptyDir": {}}]
    mounts: list[dict] = [{"name": "tmp", "mountPath": "/tmp"}]
    if cache_claim:
        volumes.append({"name": "cache", "persistentVolumeClaim": {"claimName": cache_claim}})
        mounts.append({"name": "cache", "mountPath": CACHE_MOUNT_PATH})
    if token_secret:
        volumes.append({"name": "token", "secret": {
            "secretName": token_secret, "defaultMode": 0o440,
            "items": [{"key": TOKEN_SECRET_KEY, "path": TOKEN_SECRET_KEY}]}})
        mounts.append({"name": "token", "mountPath": TOKEN_MOUNT_PATH, "readOnly": True})
    container = {
        "name": "agent",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["fleetcache-agent"],
        "args": list(args),
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}],
        "resources": dict(resources) if resources else {
            "requests": {"cpu": "500m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        "securityContext": dict(RESTRICTED_CONTAINER_SECURITY),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    pod_spec = {
        "restartPolicy": "Never",
        "serviceAccountName": service_account,
        "automountServiceAccountToken": True,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": AGENT_UID,
            "runAsGroup": AGENT_UID,
            "fsGroup": AGENT_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": volumes,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "backoffLimit": policy.backoff_limit,
            "activeDeadlineSeconds": policy.active_deadline_seconds,
            "ttlSecondsAfterFinished": policy.ttl_seconds_after_finished,
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {
                    "containerName": "agent", "operator": "In",
                    "values": list(exitcodes.PERMANENT_CODES)}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
            ]},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }



IMMUTABLE_JOB_FIELDS = ("template", "podFailurePolicy", "completions", "completionMode")


def template_digest(job: Mapping) -> str:
    """Six hex digits of what the API server never lets change on a Job (its pod template
    and podFailurePolicy, pkg/apis/batch/validation ValidateJobSpecUpdate): carried in the
    Job's name, a changed template is a new Job rather than an update refused for ever."""
    spec = mapping_at(job, "spec")
    return naming.digest_of({k: spec.get(k) for k in IMMUTABLE_JOB_FIELDS})[:6]


# At most 3 digits (exit codes are 0-255): a 5,000-digit "exit code" in a hostile message
# is no exit code, and never becomes an int of 5,000 digits.
JOB_EXIT_CODE = re.compile(r"exit code (\d{1,3})(?!\d)")


@dataclass(frozen=True)
class JobState:
    """A remote Job's state as Kubernetes reports it."""

    started: bool
    complete: bool
    failed: bool
    failure_reason: str
    failure_message: str
    exit_code: int | None

    @classmethod
    def of(cls, job: dict) -> JobState:
        failed = is_true(job, "Failed")
        failure = condition_of(job, "Failed")
        message = clipped(failure.get("message", ""))
        match = JOB_EXIT_CODE.search(message)
        status = mapping_at(job, "status")
        return cls(
            started=bool(status.get("startTime") or status.get("active")),
            complete=is_true(job, reasons.Complete),
            failed=failed,
            failure_reason=reason_or_empty(failure.get("reason")),
            failure_message=message,
            exit_code=int(match.group(1)) if match else None,
        )


def failure_reason(job: JobState, record: Mapping[str, Any]) -> tuple[str, str]:
    """(reason, message with remedy) for a failed agent Job: exit code first, else the
    agent's last record, else what Kubernetes said (deadline, backoff)."""
    row = exitcodes.for_code(job.exit_code) if job.exit_code is not None else None
    record = record if isinstance(record, Mapping) else {}
    recorded_reason = reason_or_empty(record.get("reason"))
    recorded_message = clipped(agents_own_words(record.get("message"), recorded_reason))
    if row is not None:
        detail = recorded_message if recorded_reason == row.reason else ""
        return row.reason, with_remedy(detail or f"agent exited {row.code} ({row.reason})",
                                       row.reason)
    if job.failure_reason == reasons.DeadlineExceeded:
        # Kubernetes' verdict wins over a record the killed agent could not finish.
        last = f" (the agent last reported {recorded_reason}: {recorded_message})" \
            if recorded_reason else ""
        return reasons.DeadlineExceeded, with_remedy(
            (job.failure_message or "the agent Job hit its deadline").rstrip(".") + last,
            reasons.DeadlineExceeded)
    if recorded_reason:
        return recorded_reason, with_remedy(recorded_message, recorded_reason)
    return reasons.BackoffLimitExceeded, with_remedy(
        job.failure_message or "the agent Job failed", reasons.BackoffLimitExceeded)



def agents_own_words(message: Any, reason: str) -> str:
    """The agent's record message without the table's remedy it ends with: clipping the
    whole would cut the remedy mid-sentence, and `with_remedy` adds it back whole."""
    text = str(message or "")
    fix = remedy(reason)
    return text.replace(fix, "").strip().rstrip(".") if fix else text
