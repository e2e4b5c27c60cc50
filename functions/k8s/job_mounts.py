"""What an agent Job mounts besides its cache volume: a copy on the cluster of a Secret of the
XR's namespace (each key patched in by provider-kubernetes, never read here), mounted as
files; the pinned manifest's ConfigMap; the user's existing volume, read-only. `with_mounts`
adds them to a Job made by agent_job.agent_job_manifest. Which Secret a source needs, and the
arguments that point the agent at these paths, are decisions/sources.py's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from fleetcache.functions.k8s import agent_job, objects

MANIFEST_MOUNT_PATH = "/etc/fleetcache/manifest"
MANIFEST_FILE = f"{MANIFEST_MOUNT_PATH}/manifest.json"
SOURCE_MOUNT_PATH = "/var/run/fleetcache/source"  # an existing volume, read-only
DOCKER_CONFIG_KEY = ".dockerconfigjson"  # a kubernetes.io/dockerconfigjson Secret's key
DOCKER_CONFIG_TYPE = "kubernetes.io/dockerconfigjson"  # the type the kubelet reads imagePullSecrets of


@dataclass(frozen=True)
class SecretRef:
    """A Secret of the XR's namespace a Job needs, and the keys copied from it: (key in the
    user's Secret, key in the copy), mounted as files under mount_path."""

    name: str
    keys: tuple[tuple[str, str], ...]
    mount_path: str
    field: str  # the spec field that names it, for messages
    type: str = "Opaque"  # of the copy: DOCKER_CONFIG_TYPE for a pod's imagePullSecrets


def secret_object(name: str, remote_name: str, namespace: str, provider_config: str,
                  ref: SecretRef, labels: Mapping[str, str]) -> dict:
    """The Secret on a remote cluster, each key patched in by provider-kubernetes from the
    XR namespace's Secret, so no credential appears in any spec, status or response."""
    if ref.keys == ((ref.keys[0][0], agent_job.TOKEN_SECRET_KEY),):
        return objects.token_secret_object(name, remote_name, namespace, provider_config,
                                       {"name": ref.name, "key": ref.keys[0][0]}, labels)
    manifest = {"apiVersion": "v1", "kind": "Secret", "type": ref.type,
                "metadata": {"name": remote_name, "namespace": namespace, "labels": dict(labels)}}
    references = [{"patchesFrom": {"apiVersion": "v1", "kind": "Secret", "name": ref.name,
                                   "namespace": namespace,
                                   "fieldPath": objects.secret_data_path(theirs)},
                   "toFieldPath": objects.secret_data_path(ours)} for theirs, ours in ref.keys]
    return objects.remote_object(name, namespace, manifest, provider_config, references=references,
                             labels=labels)


@dataclass(frozen=True)
class Mount:
    name: str
    volume: dict  # the pod volume without its name
    path: str
    read_only: bool = True


def secret_mount(name: str, remote_name: str, ref: SecretRef) -> Mount:
    items = [{"key": ours, "path": ours} for _, ours in ref.keys]
    return Mount(name, {"secret": {"secretName": remote_name, "defaultMode": 0o440,
                                   "items": items}}, ref.mount_path)


def with_mounts(job: dict, mounts: list[Mount]) -> dict:
    """The agent Job (agent_job.agent_job_manifest) with more volumes mounted into its container."""
    pod = job["spec"]["template"]["spec"]
    for mount in mounts:
        pod["volumes"].append({"name": mount.name, **mount.volume})
        pod["containers"][0]["volumeMounts"].append(
            {"name": mount.name, "mountPath": mount.path, "readOnly": mount.read_only})
    return job


def claim_mount(claim: str) -> Mount:
    """The user's existing volume, read-only: fleetcache never writes, resizes or prunes it."""
    return Mount("source", {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
                 SOURCE_MOUNT_PATH)


def manifest_mount(configmap: str) -> Mount:
    return Mount("manifest", {"configMap": {"name": configmap}}, MANIFEST_MOUNT_PATH)


def manifest_configmap(name: str, namespace: str, manifest: list[dict],
                       labels: Mapping[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "data": {"manifest.json": json.dumps(manifest, sort_keys=True,
                                                 separators=(",", ":"))}}
