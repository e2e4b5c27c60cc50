"""Builders for ModelCache-level state: FleetClusters, ModelCaches and what they observe."""

from __future__ import annotations

import copy
from typing import Any

from fleetcache.functions import naming, protocol, read
from fleetcache.functions.composers import model_cache
from fleetcache.functions.decisions import admission

COMMIT = "4f1c2b0d9e8a7c6b5a493827161504f3e2d1c0b9"
DIGEST = "ab" * 32
GIB = 1024**3
GRANT = "team-a"


def fleet_cluster(name: str, *, ready: bool = True, labels: dict | None = None,
                  cache: dict | None = None) -> dict:
    return {
        "apiVersion": naming.API_VERSION, "kind": "FleetCluster",
        "metadata": {"name": name, "labels": {"gpu": "h100"} if labels is None else labels},
        "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                         "name": f"{name}-kubeconfig", "key": "kubeconfig"},
                 **({"cache": cache} if cache else {})},
        "status": {"providerConfigName": name if ready else "",
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "reason": "Available" if ready else "Creating"}]},
    }


def model_cache_xr(**spec_overrides: Any) -> dict:
    spec = {
        "grantRef": {"name": GRANT},
        "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B", "revision": "main"},
                   "allowPatterns": ["*.safetensors", "*.json"]},
        "placement": {"clusterSelector": {"matchLabels": {"gpu": "h100"}}},
        "rollout": {"maxConcurrent": 10},
        "minReady": 0,
    }
    spec.update(spec_overrides)
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "qwen", "namespace": "ml", "uid": "1234"}, "spec": spec}


def grant(*rows: dict, name: str = GRANT, namespace: str = "ml") -> dict:
    """A ModelCacheGrant as compose-model-cache requires it: its published decisions."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusters": {"clusterSelector": {}}, "quota": {"bytes": "10Ti"}},
            "status": {"caches": list(rows)}}


def admitted_digest(xr: dict, manifest: str = DIGEST) -> str:
    """The digest a grant admits `xr` at, once it resolved to the content `manifest`."""
    return admission.admission_digest(
        {**xr, "status": {"resolved": {"manifestDigest": manifest}}})


def grant_row(xr: dict, *, admitted: bool = True, reason: str = "Admitted", message: str = "",
              manifest: str = DIGEST, admitted_digest_of: dict | None = None,
              clusters: int = 3, size: int = 3 * GIB) -> dict:
    """The grant's row for `xr`: admitted at its digest with the content `manifest`, or
    refused (admittedDigest: that of `admitted_digest_of`, an earlier spec, or none)."""
    row = {"name": xr["metadata"]["name"], "commit": COMMIT, "clusters": clusters,
           "bytes": size, "admitted": admitted, "reason": reason, "message": message}
    if admitted:
        row["admittedDigest"] = admitted_digest(xr, manifest)
    elif admitted_digest_of is not None:
        row["admittedDigest"] = admitted_digest(admitted_digest_of, manifest)
    return row


ANY_FLEET = 10_000  # more clusters than any test's fleet


def grant_admitting(xr: dict, manifest: str | None = None, clusters: int = ANY_FLEET) -> dict:
    """A grant that admitted `xr` with the content `manifest` (by default the content its
    status.resolved latched, else DIGEST, what its resolve record says) on `clusters`
    clusters: by default as many as any test's placement matches."""
    if manifest is None:
        latched = read.get_path(xr, "status.resolved")
        manifest = (latched.get("manifestDigest") or "") if isinstance(latched, dict) else DIGEST
    return grant(grant_row(xr, manifest=manifest, clusters=clusters))


def resolved_status(xr: dict, *, commit: str = COMMIT, size: int = 3 * GIB) -> dict:
    """status.resolved as the composer latches it for this XR's current source."""
    return {"repo": xr["spec"]["source"]["huggingFace"]["repo"],
            "revision": xr["spec"]["source"]["huggingFace"].get("revision", "main"),
            "commit": commit, "bytes": size, "files": 5, "manifestDigest": DIGEST,
            "sourceDigest": model_cache.read_spec(xr["spec"]).source_digest,
            "compared": []}


def with_resolved(xr: dict, **kwargs: Any) -> dict:
    out = copy.deepcopy(xr)
    out.setdefault("status", {})["resolved"] = resolved_status(xr, **kwargs)
    return out


def observed_object(desired: dict, *, remote_status: dict | None = None,
                    data: dict | None = None) -> dict:
    """A composed provider-kubernetes Object as observed after it was applied."""
    out = copy.deepcopy(desired)
    remote = copy.deepcopy(read.get_path(desired, "spec.forProvider.manifest") or {})
    if remote_status is not None:
        remote["status"] = remote_status
    if data is not None:
        remote["data"] = data
    out["status"] = {"atProvider": {"manifest": remote},
                     "conditions": [{"type": "Ready", "status": "True"}]}
    return out


def observed_hydration(desired: dict, phase: str, *, done: int = 0, total: int = 3 * GIB,
                       reason: str = "", message: str = "") -> dict:
    out = copy.deepcopy(desired)
    out["status"] = {"phase": phase,
                     "progress": {"bytesDone": done, "bytesTotal": total},
                     "reason": reason, "message": message}
    return out


# --- reading a composed ModelCache --------------------------------------------------------


def condition(outcome: protocol.Outcome, type_: str) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == type_)


def hydrations(outcome: protocol.Outcome) -> dict[str, dict]:
    """The composed ModelCacheHydrations by cluster."""
    return {r["spec"]["clusterName"]: r for r, _ in outcome.desired.values()
            if r["kind"] == "ModelCacheHydration"}
