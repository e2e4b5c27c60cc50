"""compose-model-cache-hydration: one model cache on one cluster, through provider-kubernetes.

Lifecycle, top to bottom:
1. resolve the inputs: the spec (validated, every error naming the field and the fix), the
   FleetCluster named by spec.clusterName, fetched through a requirement every call
   (functions/decisions/hydration_gate.py look_up_cluster), and for an S3 prefix or a
   volume's manifest file the manifest its ModelCache latched (functions/decisions/resolution.py);
2. decide the phase from what is observed: the latched status, the agent Job, the PVC and
   the agent's progress record; a PVC that is not the one the status speaks of (its uid,
   latched in status.volumeUID, changed, or it is gone: deleted and created again empty)
   takes with it what the status and the Objects said of its content (Ready, the serving
   commit, the progress record, the Jobs), and the copy is fetched again;
3. compose the Objects that phase needs on the cluster (functions/k8s/hydration_objects.py):
   namespace (create only), PVC, progress ConfigMap (Observe/Create/Delete), and until Ready
   the agent's ServiceAccount/Role/RoleBinding, the token Secret and the agent Job;
4. once Ready, prune (functions/decisions/pruning.py): the commits the volume still holds
   that neither this hydration nor any ModelReplica of this cache on this cluster mounts (the
   replicas are required by label every call) nor spec.keepCommits names go with one prune
   Job per set of kept commits;
5. report phase, progress, reason and remedy, the Hydrated condition and readiness, the
   serving commit (the last commit that reached Ready on the volume, kept while a newer one
   hydrates or fails, so replicas can keep mounting it), the commits on the volume, the
   volume's measured usage and its use (mountedBy, placedReplicas, lastUsedTime, readyTime,
   pinned, lapsed), which the FleetCluster weighs (functions/views/hydration.py writes them).

On a FleetCluster that mounts image volumes, a hydration of a commit its cache has as an OCI
artifact (functions/decisions/image_delivery.py) warms nothing while no replica there needs the
volume: it composes nothing on the cluster, is Ready with reason ImageVolume, and takes no room
(the FleetCluster and the grant leave it out); a replica that could not mount the artifact, or
mounts the volume, makes it warm the volume as any other.

Capacity is the FleetCluster's decision (functions/decisions/capacity.py), obeyed here between
2 and 3 (functions/decisions/hydration_gate.py): a copy that has not started and is not
admitted in the FleetCluster's status.cache waits (Pending/CapacityLow) composing nothing new;
a copy it lists as evicted composes nothing, so Crossplane deletes its volume (phase Evicted),
until a replica is placed on the cluster again. A hydration whose cluster left the placement
(spec.removal), or whose copy lapsed, never starts a new fetch.

The token itself is never read here: provider-kubernetes patches it into the remote
Secret from the XR namespace's Secret (functions/k8s/job_mounts.py secret_object).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace
from typing import Any

from fleetcache import messages, reasons, shapes
from fleetcache.apis import specs
from fleetcache.apis.models import model_cache_hydration as api
from fleetcache.functions import naming, protocol, quantities, read, times
from fleetcache.functions.decisions import image_delivery, mirror, sources
from fleetcache.functions.decisions.hydration_gate import (
    ClusterLookup,
    Gate,
    gate_of,
    look_up_cluster,
    ready_time_of,
    use_of,
)
from fleetcache.functions.decisions.pruning import Pruning, mounted_commits, plan_pruning, prune_in_flight, pruning_note
from fleetcache.functions.decisions.resolution import pinned_manifest
from fleetcache.functions.k8s import agent_job, job_mounts, objects
from fleetcache.functions.k8s.hydration_objects import (
    ACCESS_KEYS,
    FINAL_PHASES,
    MIRROR_SECRET_KEY,
    NAMESPACE_KEY,
    PROGRESS_KEY,
    PVC_BOUND_QUERY,
    TOKEN_KEY,
    VOLUME_KEY,
    Names,
    job_prefix,
    labels_for,
    of_the_volume,
    prune_args,
    resize_refusal,
    volume_manifest,
    volume_uid,
)
from fleetcache.functions.node_tier import image_keepers, warmers
from fleetcache.functions.node_tier.image_keeper_manifests import PinnedImage
from fleetcache.functions.node_tier.warmer_inputs import Hydration, VolumeTier
from fleetcache.functions.views.fleet_cluster import ACCESS_MODES, FleetClusterView, fleet_cluster_requirement
from fleetcache.functions.views.hydration import (
    Phase,
    Serving,
    Use,
    artifact_of,
    bytes_from,
    progress_of,
    serving_of,
    usage_of,
    without_the_volume,
)
from fleetcache.functions.views.served_model import Artifact

FLEET_CLUSTER_KEY = "fleet-cluster"
REPLICAS_KEY = "model-replicas"
MODEL_CACHE_KEY = "model-cache"
COMMITS_LISTED = 16  # status.storedCommits and status.prunedCommits

# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HydrationSpec:
    cluster: str
    cache: str
    source: dict
    origin: sources.Source  # spec.source, by kind (functions/decisions/sources.py)
    commit: str
    keep_commits: frozenset[str]  # spec.keepCommits: never pruned (a rollback's previous commit)
    manifest_digest: str
    bytes: int
    size: str
    storage_class: str | None  # None: the FleetCluster's default
    access_mode: str | None  # None: the FleetCluster's default
    policy: agent_job.JobPolicy
    concurrency: int
    bandwidth: str
    pinned: bool  # spec.retention.pinned: kept against eviction until it lapses
    ttl: datetime.timedelta | None  # spec.retention.ttlAfterLastUse; None: never lapses
    removal: dict | None  # spec.removal {since, until}: the cluster left the placement
    tier: str = "Volume"  # spec.tier: Node also warms the pool nodes (functions/node_tier/)
    node_pool: str = "default"  # spec.nodePool: which of its FleetCluster's pools
    mirror: dict | None = None  # spec.mirror {s3 | oci, onMissing, role}
    images: tuple[PinnedImage, ...] = ()  # spec.images: kept on the pool's nodes (node_tier/image_keepers.py)

    @property
    def secret(self) -> job_mounts.SecretRef | None:
        """The origin's Secret the Job needs (Hub token, S3 keys)."""
        return self.origin.secret

    @property
    def repo(self) -> str:
        return self.origin.repo

    @property
    def existing_volume(self) -> bool:
        """spec.source.volume: the user's claim is verified in place, never composed."""
        return self.origin.kind == sources.VOLUME


def read_spec(request: protocol.Request) -> HydrationSpec:
    """The spec read through the ModelCacheHydration model; ModelCache writes it, but a
    hand-made one must fail clearly."""
    naming.object_name(request.name, "metadata.name")
    namespace = request.namespace
    if not shapes.is_dns_label(namespace):
        raise specs.InputError(f"metadata.namespace: {messages.shown(namespace)} is not a namespace "
                             "name; a ModelCacheHydration is namespaced like its ModelCache")
    spec = specs.read_spec(api.ModelCacheHydration, request.composite.get("spec"))
    storage = spec["storage"]
    quantities.quantity_bytes(storage["size"], "spec.storage.size")
    agent = spec.get("agent", {})
    bandwidth = agent.get("bandwidth", "")
    if bandwidth:
        quantities.quantity_bytes(bandwidth, "spec.agent.bandwidth")
    retention = spec.get("retention", {})
    ttl = retention.get("ttlAfterLastUse")
    removal = spec.get("removal")
    return HydrationSpec(
        cluster=spec["clusterName"],
        cache=spec["modelCacheName"],
        source=sources.normalized(spec["source"]),
        origin=sources.Source.of(sources.normalized(spec["source"])),
        mirror=spec.get("mirror"),
        commit=spec["commit"],
        keep_commits=frozenset(spec.get("keepCommits", ())),
        manifest_digest=spec.get("manifestDigest", ""),
        bytes=spec.get("bytes", 0),
        size=storage["size"],
        storage_class=storage.get("storageClassName"),
        access_mode=storage.get("accessMode"),
        policy=agent_job.JobPolicy.of(spec["job"]),
        concurrency=agent.get("concurrency", api.Agent().concurrency),
        bandwidth=bandwidth,
        pinned=retention.get("pinned", False),
        ttl=times.duration(ttl) if ttl else None,
        removal={k: v.isoformat() for k, v in removal.items()} if removal else None,
        tier=spec["tier"],
        node_pool=spec["nodePool"],
        images=image_keepers.pinned_images(spec.get("images")),
    )


def replicas_requirement(request: protocol.Request, spec: HydrationSpec) -> protocol.Requirement:
    """The ModelReplicas of this cache on this cluster (compose-model-deployment labels them)."""
    return protocol.Requirement(naming.API_VERSION, "ModelReplica", namespace=request.namespace,
                           match_labels=((naming.LABEL_MODEL_CACHE, naming.label_value(spec.cache)),
                                         (naming.LABEL_CLUSTER, naming.label_value(spec.cluster))))


# --- 2. phase -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What provider-kubernetes last saw on the cluster."""

    latched: bool  # status.phase Ready already, for this commit
    volume_phase: str
    job_exists: bool
    job: agent_job.JobState
    record: dict  # the agent's fetch record for this commit ({} if none yet)
    missing: tuple[str, ...]  # prerequisites of the Job not on the cluster yet
    measured: dict  # the agent's last record of any kind: usedBytes, capacityBytes
    resize_refused: str  # the API server's refusal to grow the PVC ("" if none)
    volume_uid: str = ""  # the PVC's uid as observed, else as latched ("" if not known)
    replaced: str = ""  # how the PVC the status spoke of went ("" if it did not)

    @property
    def volume_bound(self) -> bool:
        return self.volume_phase == "Bound"


def exists(request: protocol.Request, key: str) -> bool:
    return bool(objects.remote_manifest(request.observed.get(key)))


def observed_job(request: protocol.Request, names: Names) -> dict | None:
    """The fetch Job of this content: the one of this template, else one of an earlier
    template (another agent image, say), which goes once the new one is composed."""
    if names.job_key in request.observed:
        return request.observed[names.job_key]
    prefix = job_prefix(names.commit, names.manifest_digest)
    return next((request.observed[k] for k in sorted(request.observed) if k.startswith(prefix)), None)


def replaced_volume(request: protocol.Request, spec: HydrationSpec, names: Names) -> str:
    """How the cache PVC the status speaks of (status.volumeUID) went: deleted, or deleted and
    created again empty by provider-kubernetes (another uid); "" if it stands, or if no uid
    was latched (a status written before volumeUID: it is latched now, never read as a loss).

    A PVC deleted on the cluster shows once provider-kubernetes reconciles its Object: its
    Observe finds it missing, the managed reconciler creates it, and status.atProvider holds
    the new PVC (internal/controller/namespaced/object/object.go); until then the old one
    still shows. An Object deleted on the control plane (its PVC with it) is absent here
    until this call composes it again."""
    latched = request.status.get("volumeUID")
    if spec.existing_volume or not isinstance(latched, str) or not latched:
        return ""
    latched = messages.clipped(latched, 128)
    volume = request.observed.get(VOLUME_KEY)
    where = f"PVC {names.volume} on cluster {spec.cluster}"
    if not objects.remote_manifest(volume):
        return f"{where} (uid {latched}) was deleted"
    uid = volume_uid(volume)
    if uid and uid != latched:
        return f"{where} was deleted and created again (uid {latched}, now {uid})"
    return ""


def without_the_volume_of(request: protocol.Request) -> protocol.Request:
    """The request as it reads once its PVC is gone: the status without what it said of the
    volume's content, the observed Objects without those that ran on it (functions/k8s/
    hydration_objects.py of_the_volume), so they are not composed again and Crossplane
    deletes them: a Job complete on the old PVC never makes the new one Ready."""
    composite = {**request.composite, "status": without_the_volume(request.status)}
    observed = {k: v for k, v in request.observed.items() if not of_the_volume(k)}
    return replace(request, composite=composite, observed=observed)


def observe(request: protocol.Request, spec: HydrationSpec, names: Names, replaced: str) -> Seen:
    """replaced: replaced_volume's word, `request` then read without the volume."""
    status = request.status
    latched_uid = status.get("volumeUID")
    latched = not replaced and status.get("phase") == "Ready" and \
        read.get_path(status, "resolved.commit") == spec.commit and \
        read.get_path(status, "resolved.manifestDigest") in (None, spec.manifest_digest)
    job = objects.remote_manifest(observed_job(request, names))
    measured = objects.remote_manifest(request.observed.get(PROGRESS_KEY)).get("data")
    measured = measured if isinstance(measured, dict) else {}
    record = measured
    if record.get("commit") not in (None, "", spec.commit) or record.get("phase") == "Pruned":
        record = {}  # an earlier commit's or a prune's record: no fetch of this commit yet
    prerequisites = {"ServiceAccount": "service-account", "Role": "role",
                     "RoleBinding": "role-binding", "progress ConfigMap": PROGRESS_KEY}
    if spec.secret:
        prerequisites["token Secret"] = TOKEN_KEY
    if mirror.secret(spec.mirror):
        prerequisites["mirror Secret"] = MIRROR_SECRET_KEY
    if spec.origin.pinned_manifest:
        prerequisites["manifest ConfigMap"] = names.manifest_key
    return Seen(
        latched=latched,
        volume_phase="Bound" if spec.existing_volume else reasons.reason_or_empty(read.get_path(
            objects.remote_manifest(request.observed.get(VOLUME_KEY)), "status.phase")),
        job_exists=bool(job),
        job=agent_job.JobState.of(job),
        record=record,
        missing=tuple(what for what, key in prerequisites.items() if not exists(request, key)),
        measured=measured,
        resize_refused=resize_refusal(request.observed.get(VOLUME_KEY), spec.size),
        volume_uid="" if spec.existing_volume else volume_uid(request.observed.get(VOLUME_KEY)) or (
            messages.clipped(latched_uid, 128) if isinstance(latched_uid, str) else ""),
        replaced=replaced,
    )


def decide(spec: HydrationSpec, names: Names, seen: Seen, cluster: ClusterLookup) -> Phase:
    where = f"on cluster {spec.cluster}"
    if seen.latched or seen.job.complete:
        if spec.existing_volume:
            message = f"{quantities.human_bytes(spec.bytes)} verified in {spec.origin.described} {where}"
        else:
            message = f"{quantities.human_bytes(spec.bytes)} of {spec.repo}@" \
                      f"{spec.commit[:10]} {where} in PVC {names.volume}"
        if cluster.reason:
            message += f" ({cluster.message})"
        return Phase("Ready", reasons.Hydrated, message)
    if seen.replaced:
        return Phase("Pending", reasons.VolumeReplaced, reasons.with_remedy(
            f"{seen.replaced}, so it holds nothing this copy verified: {spec.commit[:10]} is "
            "fetched again", reasons.VolumeReplaced))
    if cluster.reason:
        return Phase("Pending", cluster.reason, reasons.with_remedy(cluster.message, cluster.reason))
    if seen.resize_refused and (not seen.job_exists or seen.job.failed):
        return Phase("Pending", reasons.VolumeNotExpandable, reasons.with_remedy(
            f"PVC {names.volume} {where} cannot grow to {spec.size} to hold "
            f"{spec.commit[:10]} beside the commit it serves, so the agent Job is not "
            f"started; the API server says: {seen.resize_refused}", reasons.VolumeNotExpandable))
    if seen.job.failed:
        reason, message = agent_job.failure_reason(seen.job, seen.record)
        return Phase("Failed", reason, f"hydrating {where} failed: {message}")
    if not seen.job_exists:
        if seen.missing:
            return Phase("Pending", reasons.AwaitingPrerequisites, reasons.with_remedy(
                f"waiting for {', '.join(seen.missing)} {where} before starting the agent Job",
                reasons.AwaitingPrerequisites))
        return Phase("Pending", reasons.JobNotStarted, f"creating the agent Job {names.job} {where}")
    if not seen.job.started:
        return Phase("Pending", reasons.JobNotStarted, reasons.with_remedy(
            f"the agent Job {names.job} {where} has not started", reasons.JobNotStarted))
    if not seen.volume_bound:
        state = seen.volume_phase or "not created yet"
        return Phase("Pending", reasons.VolumeNotBound, reasons.with_remedy(
            f"PVC {names.volume} {where} is {state}", reasons.VolumeNotBound))
    message = f"agent Job {names.job} is fetching {spec.commit[:10]} {where}"
    retried = reasons.reason_or_empty(seen.record.get("reason"))
    note = messages.clipped(agent_job.agents_own_words(seen.record.get("message"), retried))
    if retried:
        message += f"; its last attempt ended with {retried}: {note}"
    elif note:
        message += f"; {note}"  # the agent is retrying a hung or failing endpoint
    return Phase("Hydrating", reasons.Hydrating, message)


def volume_serves(request: protocol.Request, spec: HydrationSpec, phase: Phase) -> Serving:
    """What the volume serves now (functions/views/hydration.py serving_of)."""
    return serving_of(request.status, phase, spec.repo, spec.commit, spec.manifest_digest)


# --- 3. compose, and 4. the prune Job (planned by functions/decisions/pruning.py) ----------


def fetch_args(spec: HydrationSpec, names: Names, namespace: str) -> list[str]:
    """The pinned commit is fetched; `--ref` names it as the revision the ModelCache asked
    for, so engines given the repo id (and that revision) find it offline. An S3 prefix or an
    OCI artifact is fetched from its pinned manifest, an existing volume only verified
    (decisions/sources.py);
    with a fleet mirror the fetch publishes to it or reads from it (decisions/mirror.py)."""
    progress = f"{namespace}/{names.progress}"
    if spec.existing_volume:
        return spec.origin.hydrate_args(spec.commit, spec.manifest_digest, progress)
    if spec.origin.pinned_manifest:  # an S3 prefix or an OCI artifact: its pinned manifest
        args = spec.origin.hydrate_args(spec.commit, spec.manifest_digest, progress)
    else:
        revision = spec.origin.revision
        ref = ["--ref", str(revision)] if revision and revision != spec.commit else []
        # Through a mirror, the digest lets a reader plan from the publisher's manifest, without the Hub.
        pinned = ["--manifest-digest", spec.manifest_digest] if spec.mirror and spec.manifest_digest else []
        args = ["fetch", "--dest", agent_job.CACHE_MOUNT_PATH, "--revision", spec.commit,
                "--progress-configmap", progress, *ref, *pinned, *spec.origin.origin_args()]
    args += ["--concurrency", str(spec.concurrency)]
    if spec.bandwidth:
        args += ["--bandwidth", spec.bandwidth]
    if spec.mirror:
        args += mirror.args(spec.mirror)
    return args


def job_secrets(spec: HydrationSpec, names: Names) -> list[tuple[str, str, str, job_mounts.SecretRef]]:
    """The Secrets the fetch Job mounts: key, volume name, remote name, the XR namespace's
    Secret it is copied from."""
    return [(key, what, remote_name, ref) for key, what, remote_name, ref in (
        (TOKEN_KEY, "token", names.token, spec.secret),
        (MIRROR_SECRET_KEY, "mirror-secret", names.mirror_secret, mirror.secret(spec.mirror)))
        if ref is not None]


def fetch_job(spec: HydrationSpec, names: Names, namespace: str, image: str,
              pinned: list[dict] | None) -> dict:
    """The agent's fetch (or verify) Job with everything it mounts."""
    mounts = [job_mounts.secret_mount(what, remote_name, ref)
              for _, what, remote_name, ref in job_secrets(spec, names)]
    if spec.origin.pinned_manifest and pinned is not None:
        mounts.append(job_mounts.manifest_mount(names.manifest))
    if spec.existing_volume:
        mounts.append(job_mounts.claim_mount(spec.origin.fields["claimName"]))
    return job_mounts.with_mounts(agent_job.agent_job_manifest(
        name=names.job, namespace=namespace, image=image,
        args=fetch_args(spec, names, namespace), service_account=names.agent,
        labels=labels_for(spec.cache, spec.cluster), policy=spec.policy,
        cache_claim=None if spec.existing_volume else names.volume), mounts)


def compose_remote(request: protocol.Request, spec: HydrationSpec, cluster: FleetClusterView,
                   names: Names, seen: Seen, phase: Phase, pruning: Pruning,
                   outcome: protocol.Outcome, pinned: list[dict] | None = None) -> None:
    namespace = request.namespace
    labels = labels_for(spec.cache, spec.cluster)

    def remote(key: str, what: str, manifest: dict, ready: bool, **kwargs: Any) -> None:
        outcome.compose(key, objects.remote_object(names.object(what), namespace, manifest,
                                               cluster.provider_config, labels=labels,
                                               **kwargs), ready)

    # Lives on: the namespace (never deleted), the volume and the progress record.
    remote(NAMESPACE_KEY, "namespace", objects.namespace_manifest(namespace),
           exists(request, NAMESPACE_KEY), management_policies=objects.CREATE_ONLY)
    if not spec.existing_volume:  # the user's claim is theirs: never composed or resized
        existing_volume = objects.remote_manifest(request.observed.get(VOLUME_KEY))
        remote(VOLUME_KEY, "volume", volume_manifest(
            names, namespace, labels, spec.size, spec.access_mode or cluster.access_mode,
            spec.storage_class or cluster.storage_class, existing_volume, ACCESS_MODES),
               seen.volume_bound, readiness_query=PVC_BOUND_QUERY, watch=True)
    if not seen.replaced:  # the old PVC's record goes first: the next call creates it afresh
        remote(PROGRESS_KEY, "progress",
               agent_job.progress_configmap_manifest(names.progress, namespace, labels),
               exists(request, PROGRESS_KEY), management_policies=objects.OBSERVE_CREATE_DELETE,
               readiness_query=objects.record_final_query(FINAL_PHASES, spec.commit), watch=True)
    if phase.ready and not pruning.needed:
        return  # the Jobs, the token and the access are done with
    for key, manifest in zip(ACCESS_KEYS, agent_job.progress_access_manifests(
            names.agent, names.progress, namespace, labels), strict=True):
        remote(key, key, manifest, exists(request, key))
    if phase.ready:
        access_missing = [k for k in (*ACCESS_KEYS, PROGRESS_KEY) if not exists(request, k)]
        if exists(request, pruning.key) or not access_missing:
            remote(pruning.key, pruning.key, agent_job.agent_job_manifest(
                name=pruning.job_name(spec.cache), namespace=namespace,
                image=cluster.agent_image,
                args=prune_args(spec.repo, f"{namespace}/{names.progress}", pruning.keep),
                service_account=names.agent, labels=labels, policy=spec.policy,
                cache_claim=names.volume), pruning.job.complete,
                readiness_query=objects.JOB_FINISHED_QUERY, watch=True)
        return
    running_prune = prune_in_flight(request)
    if running_prune and not seen.job_exists:
        objects.carry_over(request, outcome, [running_prune])  # it ends before the fetch starts
        return
    for key, what, remote_name, ref in job_secrets(spec, names):
        outcome.compose(key, job_mounts.secret_object(
            names.object(what), remote_name, namespace, cluster.provider_config, ref,
            labels), exists(request, key))
    if spec.origin.pinned_manifest and pinned is not None:
        remote(names.manifest_key, names.manifest_key, job_mounts.manifest_configmap(
            names.manifest, namespace, pinned, labels), exists(request, names.manifest_key))
    if seen.job_exists or not (seen.missing or seen.resize_refused):  # gate creation only
        remote(names.job_key, names.job_key,
               fetch_job(spec, names, namespace, cluster.agent_image, pinned),
               seen.job.complete, readiness_query=objects.JOB_FINISHED_QUERY, watch=True)


# --- 5. report ----------------------------------------------------------------------------


def report(request: protocol.Request, spec: HydrationSpec, names: Names, seen: Seen, phase: Phase,
           pruning: Pruning, use: Use, ready_time: str | None, outcome: protocol.Outcome) -> None:
    progress = progress_of(seen.record, request.status, spec.commit, spec.bytes, phase)
    evicted = phase.phase == "Evicted"
    serving = Serving() if evicted else volume_serves(request, spec, phase)
    message = phase.message
    if phase.phase == "Hydrating":
        message = f"{progress['percent']}% ({quantities.human_bytes(progress['bytesDone'])} of " \
                  f"{quantities.human_bytes(progress['bytesTotal'])}, {progress['filesDone']}/" \
                  f"{messages.counted(progress['filesTotal'], 'file')}): {message}"
    if serving.commit and serving.commit != spec.commit:
        message = f"{message.rstrip('.')}; the volume keeps serving {serving.commit[:10]} " \
                  f"until {spec.commit[:10]} is Ready"
    message += pruning_note(pruning)
    outcome.status = {
        "phase": phase.phase,
        "progress": progress,
        "reason": phase.reason,
        "message": message,
        "resolved": {"commit": spec.commit, "manifestDigest": spec.manifest_digest,
                     "bytes": spec.bytes},
        "volumeName": spec.origin.fields["claimName"] if spec.existing_volume
        else names.volume,
        **({} if spec.existing_volume else {"volumeUID": "" if evicted else seen.volume_uid}),
        **bytes_from(seen.record, request.status, phase, spec.existing_volume, bool(spec.mirror)),
        **artifact_of(seen.record, request.status, spec.commit),
        **serving.as_status(),
        "storedCommits": [] if evicted else sorted(pruning.stored)[:COMMITS_LISTED],
        "prunedCommits": [] if evicted else list(pruning.pruned[:COMMITS_LISTED]),
        **({} if evicted else usage_of(seen.measured, request.status)),
        **use.as_status(),
        **({"readyTime": ready_time} if ready_time else {}),
    }
    outcome.condition("Hydrated", phase.ready, phase.reason, message)
    outcome.composite_ready = phase.ready
    if seen.replaced:  # an event outlives the one call that tells
        outcome.warnings.append(f"{seen.replaced}: dropped the Ready copy of {spec.commit[:10]} "
                                "and its serving commit; fetching it again")


def report_image(request: protocol.Request, spec: HydrationSpec, artifact: Artifact,
                 outcome: protocol.Outcome) -> None:
    """Nothing warmed on the cluster: its replicas mount the artifact as an image volume."""
    phase = Phase("Ready", reasons.ImageVolume, reasons.with_remedy(
        f"nothing is warmed on cluster {spec.cluster}: its replicas mount {artifact.reference} as an "
        "image volume (spec.features.imageVolumes)", reasons.ImageVolume))
    ready_time = ready_time_of(request, phase)
    outcome.status = {
        "phase": phase.phase, "reason": phase.reason, "message": phase.message,
        "progress": progress_of({}, request.status, spec.commit, spec.bytes, phase),
        "resolved": {"commit": spec.commit, "manifestDigest": spec.manifest_digest, "bytes": spec.bytes},
        "storedCommits": [], "prunedCommits": [],
        "usedBytes": 0, "usedHuman": quantities.human_bytes(0),  # nothing on a PVC: USED says so
        **use_of(request, spec, request.required.get(REPLICAS_KEY), ready_time).as_status(),
        **({"readyTime": ready_time} if ready_time else {}),
    }
    outcome.condition("Hydrated", True, phase.reason, phase.message)
    outcome.composite_ready = True


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request)
    outcome.require(FLEET_CLUSTER_KEY, fleet_cluster_requirement(spec.cluster))
    outcome.require(REPLICAS_KEY, replicas_requirement(request, spec))
    manifest, manifest_wait = None, ""
    cluster = look_up_cluster(request.required.get(FLEET_CLUSTER_KEY), spec.cluster)
    if spec.origin.pinned_manifest or (cluster.view is not None and cluster.view.image_volumes):
        outcome.require(MODEL_CACHE_KEY, protocol.Requirement(
            naming.API_VERSION, "ModelCache", match_name=spec.cache, namespace=request.namespace))
    artifact = None if spec.existing_volume else image_delivery.hydrates_nothing(
        cluster.view, next(iter(request.required.get(MODEL_CACHE_KEY) or []), None), spec.commit,
        request.required.get(REPLICAS_KEY))
    if artifact is not None:
        report_image(request, spec, artifact, outcome)
        keep_images(request, spec, cluster, outcome)
        return outcome
    if image_delivery.served_by_image(request.composite):  # its Ready warmed nothing: start afresh
        request = replace(request, composite={**request.composite, "status": {}})
    if spec.origin.pinned_manifest:
        manifest, manifest_wait = pinned_manifest(request.required.get(MODEL_CACHE_KEY), spec.cache,
                                                  spec.commit, spec.manifest_digest)
    names = Names(request.name, spec.cache, spec.commit, spec.manifest_digest)
    if cluster.view is not None:  # the Job is named for its template (agent_job.template_digest)
        names = replace(names, template=agent_job.template_digest(fetch_job(
            spec, names, request.namespace, cluster.view.agent_image, manifest)))
    replaced = replaced_volume(request, spec, names)
    if replaced:
        request = without_the_volume_of(request)
    seen = observe(request, spec, names, replaced)
    phase = decide(spec, names, seen, cluster)
    use = use_of(request, spec, request.required.get(REPLICAS_KEY), ready_time_of(request, phase))
    gate = gate_of(request, spec, cluster, seen.job_exists, phase, use,
                   bool(volume_serves(request, spec, phase).commit))
    phase = gate.phase or phase
    if manifest_wait and not phase.ready and not gate.hold and not gate.evicted \
            and not cluster.reason:  # a running Job keeps its phase; nothing new is composed
        gate = Gate(None if seen.job_exists else Phase("Pending", reasons.AwaitingManifest,
                    reasons.with_remedy(manifest_wait, reasons.AwaitingManifest)), hold=True)
        phase = gate.phase or phase
    ready_time = ready_time_of(request, phase)
    pruning = plan_pruning(request, spec.repo, spec.commit, phase.ready, spec.existing_volume,
                           mounted_commits(request.required.get(REPLICAS_KEY), spec.cluster, spec.cache),
                           spec.keep_commits)
    if cluster.view is None or cluster.reason or gate.hold:
        objects.carry_over(request, outcome, request.observed)  # compose nothing new
    elif not gate.evicted:
        compose_remote(request, spec, cluster.view, names, seen, phase, pruning, outcome,
                       manifest)
    report(request, spec, names, seen, phase, pruning, use, ready_time, outcome)
    if spec.tier == warmers.NODE_TIER:
        outcome.status["nodeTier"] = node_tier_status(request, spec, names, cluster, phase,
                                                      gate, outcome)
    keep_images(request, spec, cluster, outcome)
    return outcome


def on_nodes(request: protocol.Request, spec: HydrationSpec) -> Hydration:
    """What the node tier and the image keepers need of this hydration."""
    return Hydration(request.namespace, request.name, spec.cache, spec.cluster,
                     "" if spec.existing_volume else spec.repo, spec.commit,
                     spec.manifest_digest, labels_for(spec.cache, spec.cluster), spec.node_pool)


def keep_images(request: protocol.Request, spec: HydrationSpec, cluster: ClusterLookup,
                outcome: protocol.Outcome) -> None:
    """spec.images on the pool's nodes, whatever the tier and the volume's phase."""
    fetched = request.required.get(FLEET_CLUSTER_KEY)
    status = image_keepers.run(request, on_nodes(request, spec), fetched[0] if fetched else None,
                               cluster.view, (cluster.reason, cluster.message), spec.images, outcome)
    if status is not None:
        outcome.status["images"] = status


def node_tier_status(request: protocol.Request, spec: HydrationSpec, names: Names,
                     cluster: ClusterLookup, phase: Phase, gate: Gate,
                     outcome: protocol.Outcome) -> dict:
    """Tier Node: the pool nodes are warmed from this volume once it is Ready."""
    fetched = request.required.get(FLEET_CLUSTER_KEY)
    held = cluster.view is None or bool(cluster.reason) or gate.hold or gate.evicted
    modes = read.get_path(objects.remote_manifest(request.observed.get(VOLUME_KEY)),
                         "spec.accessModes")  # the PVC's modes once it exists, else as asked
    if not (isinstance(modes, list) and modes):
        modes = [spec.access_mode or (cluster.view.access_mode if cluster.view else "")]
    volume = VolumeTier(
        phase.phase, cluster.reason or phase.reason, composing=not held,
        problem=reasons.with_remedy(cluster.message, cluster.reason) if cluster.reason else "",
        shared="ReadWriteOnce" not in modes or "ReadWriteMany" in modes)
    return warmers.run(request, on_nodes(request, spec), fetched[0] if fetched else None, cluster.view,
                       names.volume, volume, request.required.get(REPLICAS_KEY), outcome)
