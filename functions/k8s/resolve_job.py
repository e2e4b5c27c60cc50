"""A ModelCache's resolve step on one cluster, as provider-kubernetes Objects: the agent's
`resolve` Job, the ConfigMap it writes its record to (Observe/Create/Delete), the
ServiceAccount/Role/RoleBinding that may patch only that ConfigMap, and the namespace
(create only). The Job and ConfigMap are named for the source, so a changed spec.source
resolves again in a new Job; the Job also for its template (agent_job.template_digest), which
the API server never lets change. Both are re-read by provider-kubernetes every 30 s until
they are final (objects.JOB_FINISHED_QUERY, objects.record_final_query) and watched.

Each Object's key and name carry the remote object's identity: the cluster it is on, and
its own name. provider-kubernetes only reads, writes and deletes the object its manifest
names now, through the providerConfigRef it names now (internal/controller/namespaced/object/
object.go): an Object re-pointed at another name or cluster would leave the old remote object
there for ever. A new identity is a new key, so Crossplane deletes the old Object, and its
provider the old remote object (design/model-cache.md, "Moving the resolve step")."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fleetcache import shapes
from fleetcache.functions import naming, protocol, read
from fleetcache.functions.k8s import agent_job, objects

RESOLVE_PREFIX = "resolve-"  # the keys of the resolve step's Objects
JOB = "job"
RECORD = "configmap"
RECORD_FINAL = ("Resolved", "Failed")


@dataclass(frozen=True)
class ResolveNames:
    cache: str
    source_digest: str
    cluster: str  # the FleetCluster the step runs on
    template: str = ""  # agent_job.template_digest of the Job
    step: str = "resolve"  # the step's keys and remote names start with it ("image-resolve": spec.images)
    account: str = "resolver"  # its ServiceAccount, Role and RoleBinding

    @property
    def where(self) -> str:
        """The cluster, in every key and Object name of the step."""
        return naming.short_digest(self.cluster, length=8)

    def key(self, what: str) -> str:
        """`what` names the remote object on its cluster: its kind, and for the record and
        the Job the source (and template) their remote names carry."""
        return f"{self.step}-{what}-{self.where}"

    @property
    def record_what(self) -> str:
        """What the record ConfigMap is keyed under (less "resolve-"): its remote name's."""
        return f"{RECORD}-{self.source_digest[:10]}"

    @property
    def job_prefix(self) -> str:
        """What the Job of this source starts its key with (less "resolve-"), whatever its
        template and cluster."""
        return f"{JOB}-{self.source_digest[:10]}-"

    @property
    def job_what(self) -> str:
        return f"{self.job_prefix}{self.template}"

    @property
    def remote(self) -> str:
        """The record ConfigMap's name; it changes with the source."""
        return naming.child_name(self.cache, self.step, self.source_digest[:10])

    @property
    def job(self) -> str:
        """The Job's name: the source's, and its template's."""
        return naming.child_name(self.cache, self.step, self.source_digest[:10], self.template)

    @property
    def service_account(self) -> str:
        return naming.child_name(self.cache, self.account)

    def object_name(self, what: str) -> str:
        return naming.child_name(self.cache, self.step, what, self.where)


def labels_for(cache: str) -> dict[str, str]:
    return {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_COMPONENT: "resolve",
            naming.LABEL_MODEL_CACHE: naming.label_value(cache)}


def observed_job(observed: dict[str, dict], names: ResolveNames) -> dict | None:
    """The Object of this source's resolve Job on this cluster as observed, whatever its
    template (another source's, or another cluster's, is no longer composed, and tells
    nothing about this one)."""
    prefix, suffix = f"{names.step}-{names.job_prefix}", f"-{names.where}"
    return next((observed[k] for k in sorted(observed)
                 if k.startswith(prefix) and k.endswith(suffix)), None)


def record_of(observed: dict[str, dict], names: ResolveNames) -> dict:
    """This source's resolve record on this cluster as provider-kubernetes last saw it ({}
    until it observed one)."""
    configmap = objects.remote_manifest(observed.get(names.key(names.record_what)))
    return read.mapping_at(configmap, "data")


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
    compose_remote(outcome, names, namespace, provider_config, names.record_what,
                   agent_job.progress_configmap_manifest(names.remote, namespace, labels),
                   management_policies=objects.OBSERVE_CREATE_DELETE,
                   readiness_query=objects.record_final_query(RECORD_FINAL), watch=True)


def job_manifest(names: ResolveNames, namespace: str, image: str, args: list[str], labels: dict[str, str],
                 policy: agent_job.JobPolicy) -> dict:
    """The resolve Job, without the volumes its source needs mounted."""
    return agent_job.agent_job_manifest(
        name=names.job, namespace=namespace, image=image, args=args,
        service_account=names.service_account, labels=labels, policy=policy)


def compose_job(outcome: protocol.Outcome, names: ResolveNames, namespace: str, provider_config: str,
                job: dict, resolved: bool) -> None:
    """The Job under its template's name. Once it resolved (Complete, or its record says
    Resolved) it is only observed: when ttlSecondsAfterFinished collects it,
    provider-kubernetes would otherwise create it again and the source would resolve anew."""
    names = replace(names, template=agent_job.template_digest(job))
    job["metadata"]["name"] = names.job
    compose_remote(outcome, names, namespace, provider_config, names.job_what, job,
                   management_policies=objects.OBSERVE_DELETE if resolved else None,
                   readiness_query=objects.JOB_FINISHED_QUERY, watch=True)


def compose_remote(outcome: protocol.Outcome, names: ResolveNames, namespace: str, provider_config: str,
                   what: str, manifest: dict, **kwargs: Any) -> None:
    outcome.compose(names.key(what), objects.remote_object(
        names.object_name(what), namespace, manifest, provider_config, **kwargs))
