"""A ModelCache's resolve step on one cluster, as provider-kubernetes Objects: the agent's
`resolve` Job, the ConfigMap it writes its record to (Observe/Create/Delete), the
ServiceAccount/Role/RoleBinding that may patch only that ConfigMap, and the namespace
(create only). The Job and ConfigMap are named for the source, so a changed spec.source
resolves again in a new Job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetcache import shapes
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.k8s import agent_job, objects

RESOLVE_PREFIX = "resolve-"  # the keys of the resolve step's Objects


@dataclass(frozen=True)
class ResolveNames:
    cache: str
    source_digest: str

    def key(self, what: str) -> str:
        return f"{RESOLVE_PREFIX}{what}"

    @property
    def remote(self) -> str:
        """Job and ConfigMap share this name; it changes with the source."""
        return naming.child_name(self.cache, "resolve", self.source_digest[:10])

    @property
    def service_account(self) -> str:
        return naming.child_name(self.cache, "resolver")

    def object_name(self, what: str) -> str:
        return naming.child_name(self.cache, "resolve", what)


def labels_for(cache: str) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_COMPONENT: "resolve",
            naming.LABEL_MODEL_CACHE: naming.label_value(cache)}


def composed_compares(observed_job: dict | None) -> list[str] | None:
    """The --compare commits of the resolve Job as it was composed; None when no Job was."""
    composed = read.get_path(observed_job, "spec.forProvider.manifest.spec.template.spec.containers")
    if isinstance(composed, list) and composed and isinstance(composed[0], dict):
        args = composed[0].get("args")
        args = args if isinstance(args, list) else []
        return [b for a, b in zip(args, args[1:], strict=False)
                if a == "--compare" and shapes.is_resolved_commit(b)]
    return None


def compose_record(outcome: protocol.Outcome, names: ResolveNames, namespace: str, provider_config: str,
                   labels: dict[str, str]) -> None:
    """The namespace, the agent's access and the record ConfigMap on the resolving cluster."""
    compose_remote(outcome, names, namespace, provider_config, "namespace",
                   objects.namespace_manifest(namespace), management_policies=objects.CREATE_ONLY)
    for manifest in agent_job.progress_access_manifests(names.service_account, names.remote,
                                                        namespace, labels):
        compose_remote(outcome, names, namespace, provider_config, manifest["kind"].lower(), manifest)
    compose_remote(outcome, names, namespace, provider_config, "configmap",
                   agent_job.progress_configmap_manifest(names.remote, namespace, labels),
                   management_policies=objects.OBSERVE_CREATE_DELETE)


def job_manifest(names: ResolveNames, namespace: str, image: str, args: list[str], labels: dict[str, str],
                 policy: agent_job.JobPolicy) -> dict:
    """The resolve Job, without the volumes its source needs mounted."""
    return agent_job.agent_job_manifest(
        name=names.remote, namespace=namespace, image=image, args=args,
        service_account=names.service_account, labels=labels, policy=policy)


def compose_remote(outcome: protocol.Outcome, names: ResolveNames, namespace: str, provider_config: str,
                   what: str, manifest: dict, **kwargs: Any) -> None:
    outcome.compose(names.key(what), objects.remote_object(
        names.object_name(what), namespace, manifest, provider_config, **kwargs))
