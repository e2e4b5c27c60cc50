"""compose-model-cache: resolve once for the whole fleet, then hydrate every target cluster.

Lifecycle, top to bottom:
1. read the spec and ask Crossplane for the FleetClusters, the ModelCacheGrant named by
   spec.grantRef (and the token Secret);
2. pick the target clusters from the placement;
3. resolve the source to one commit with a resolve Job on the first Ready target
   (functions/k8s/resolve_job.py), and latch the result into status.resolved
   (functions/decisions/resolution.py), so the fleet never serves two versions of "main"
   (only once the grant exists: without one the cache resolves nothing);
4. obey the grant (functions/decisions/obey_grant.py): fan out only what its status admitted
   at this very spec and resolved content (its composer is the one writer of admission);
   anything else composes nothing new and keeps what the grant admitted before;
5. with spec.rollout.waves, decide where the rollout stands (functions/decisions/waves.py,
   from the hydrations and the ModelReplicas that mount this cache, required by label:
   functions/views/cache_replicas.py): only the waves started may move to the resolved
   content, a rollback re-pins the clusters on it to the previous content, and the volumes
   keep the previous commit until the rollout is Complete plus spec.retention.afterRemoval;
   then compose one ModelCacheHydration per target it lets start, at most
   rollout.maxConcurrent not Ready at once, in cluster-name order
   (functions/decisions/rollout.py), each with the cache's spec.retention; with fleet
   mirrors, each mirror's publisher (among the clusters that may start) before the clusters
   that read it (functions/decisions/mirror.py), and nothing new for a cluster whose
   mirror's credentials Secret is missing;
6. keep the hydration of a cluster that left the placement while a replica mounts it or it
   is pinned, then for spec.retention.afterRemoval (functions/decisions/retention.py decides);
7. report per-cluster progress, what is retained, status.rollout, and the Admitted/Resolved/
   Progressing/Available/Degraded/Lapsed conditions (functions/decisions/cache_rollup.py
   rolls the clusters up; a paused, halted or rolled-back rollout holds Progressing), a
   warning when the rollout halts or rolls back, and last the status.reason those add up to
   (the REASON column).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fleetcache import messages, reasons
from fleetcache.functions import naming, protocol, quantities, read
from fleetcache.functions.decisions import image_pins, mirror, obey_grant, retention, rollout, sources, waves
from fleetcache.functions.decisions.cache_rollup import fleet_conditions, fleet_status, headline
from fleetcache.functions.decisions.resolution import (
    Resolution,
    empty_source,
    manifest_problem,
    not_found_message,
    result_of,
    stands,
)
from fleetcache.functions.k8s import agent_job, job_mounts, objects, resolve_job
from fleetcache.functions.k8s.resolve_job import RESOLVE_PREFIX, ResolveNames
from fleetcache.functions.node_tier import rollup as node_rollup
from fleetcache.functions.views import cache_replicas, placement
from fleetcache.functions.views import grant as grant_view
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS, FleetClusterView
from fleetcache.functions.views.hydration import (
    ClusterReport,
    hydration_manifest,
    pinned_to,
    report_of,
    served_commits,
    serving_commit_of,
)
from fleetcache.functions.views.model_cache import (
    COMPARED_MAX,
    COMPLETE,
    HALTED,
    ROLLED_BACK,
    RolloutSpec,
    is_empty,
    read_artifact,
    read_resolved,
    rollout_of,
    volume_bytes,
)
from fleetcache.functions.views.model_cache import read_spec as read_cache_spec
from fleetcache.functions.views.placement import Target

FLEET_CLUSTERS_KEY = "fleet-clusters"
GRANT_KEY = "model-cache-grant"
TOKEN_SECRET_KEY = "token-secret"
MIRROR_SECRET_PREFIX = "mirror-secret-"  # + the Secret's name: each mirror's credentials
CREDENTIALS_MISSING = reasons.CredentialsSecretMissing
HYDRATION_PREFIX = "hydration-"
IMAGE_RESOLVE_STEP = "image-resolve"  # the keys and remote names of the resolve-images step
REPLICAS_KEY = cache_replicas.REPLICAS_KEY
# Why a Rollback cannot run for a source whose hydrations read the cache's current manifest.
PINNED_MANIFEST = ("the source's hydrations read the ModelCache's current manifest (an S3 prefix, an OCI "
                   "artifact or a volume's manifest file), so they cannot be pinned to the previous one")


# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheSpec:
    grant: str
    source: dict
    origin: sources.Source
    repo: str
    revision: str
    secret: job_mounts.SecretRef | None  # the one the resolve Job needs (token or S3 keys)
    mirror: dict | None  # spec.distribution.mirror
    cluster_names: tuple[str, ...] | None
    cluster_selector: dict | None
    storage: dict
    max_concurrent: int
    min_ready: int
    job: dict
    agent: dict
    source_digest: str
    retention: retention.Retention
    rollout: RolloutSpec
    images: tuple[dict, ...] = ()  # spec.images: kept on the pool nodes (design/engine-images.md)


def read_spec(spec: Any) -> CacheSpec:
    """The spec read through the ModelCache model; every error names the field and the fix."""
    spec = read_cache_spec(spec)
    source = sources.normalized(spec["source"])
    origin = sources.Source.of(source)
    names, selector = spec["placement"].get("clusterNames"), \
        spec["placement"].get("clusterSelector")
    storage = spec.get("storage", {})
    return CacheSpec(
        grant=spec["grantRef"]["name"],
        source=source,
        origin=origin,
        repo=origin.repo,
        revision=origin.revision,
        secret=origin.secret,
        mirror=read.get_path(spec, "distribution.mirror") if origin.kind != sources.VOLUME
        else None,  # an existing volume downloads nothing
        cluster_names=tuple(names) if names is not None else None,
        cluster_selector=selector,
        storage=storage,
        max_concurrent=spec["rollout"]["maxConcurrent"],
        min_ready=spec["minReady"],
        job=spec["job"],
        agent=spec.get("agent", {}),
        source_digest=origin.digest,
        retention=retention.Retention.of(spec),
        rollout=rollout_of(spec),
        images=tuple(spec.get("images") or ()),
    )


# --- 2. targets ---------------------------------------------------------------------------


def target_clusters(spec: CacheSpec, fleet: list[dict]) -> list[Target]:
    """The placement's clusters in name order; named clusters that don't exist included."""
    return placement.targets(spec.cluster_names, spec.cluster_selector, fleet)


# --- 3. resolve ---------------------------------------------------------------------------


def resolve(request: protocol.Request, spec: CacheSpec, targets: list[Target],
            outcome: protocol.Outcome) -> Resolution:
    """Latch the resolve result, or compose the resolve step on the first Ready target."""
    raw = request.status.get("resolved")
    latched = read_resolved(raw)
    if raw is not None and latched is None:
        outcome.warnings.append(f"status.resolved {messages.shown(raw)} is not a resolve result "
                                "(an object with a 40-hex commit); resolving again")
    if stands(latched, spec.origin):
        return Resolution(latched, reasons.Resolved)

    secret_problem = sources.secret_problem(request, spec.secret, TOKEN_SECRET_KEY)
    if secret_problem:  # the resolve step stays; compose() keeps the hydrations
        objects.carry_over(request, outcome, [k for k in request.observed
                                          if k.startswith(RESOLVE_PREFIX)])
        reason: str = reasons.TokenSecretMissing if spec.origin.hub is not None \
            else CREDENTIALS_MISSING
        return Resolution(None, reason, reasons.with_remedy(secret_problem, reason))
    resolver = next((t.cluster for t in targets if t.ready), None)
    if resolver is None:
        missing = [t.name for t in targets if t.cluster is None]
        if targets and len(missing) == len(targets):
            return Resolution(None, reasons.ClusterNotFound, not_found_message(missing))
        reason = reasons.ClusterNotReady if targets else reasons.NoClusters
        return Resolution(None, reason, reasons.with_remedy(
            "no Ready target cluster to resolve the source on", reason))

    names = ResolveNames(request.name, spec.source_digest, resolver.name)
    record = resolve_job.record_of(request.observed, names)
    result = result_of(spec.origin, record)
    unpinned = manifest_problem(spec.origin, record, result)
    job = agent_job.JobState.of(objects.remote_manifest(resolve_job.observed_job(request.observed,
                                                                                  names)))
    if unpinned:  # kept composed: the record stays, and no Job reruns until the spec changes
        compose_resolve_step(request, spec, resolver, names, outcome, resolved=True)
        return Resolution(None, reasons.InvalidSource, reasons.with_remedy(
            f"resolving {spec.origin.described}: {unpinned}", reasons.InvalidSource))
    if result and not is_empty(result):
        return Resolution(result, reasons.Resolved)
    if record.get("phase") == "Resolved" and result is None:
        outcome.warnings.append(f"the resolve record's commit {messages.shown(record.get('commit'))} "
                                "is not a 40-hex commit hash; waiting for a valid record")
    compose_resolve_step(request, spec, resolver, names, outcome, resolved=result is not None)
    if result:  # kept composed: the record stays, and no Job reruns until the spec changes
        return empty_source(spec.origin, spec.source, result)
    if record.get("phase") == "Failed" or job.failed:
        reason, message = agent_job.failure_reason(job, record)
        return Resolution(None, reason, f"resolving {spec.origin.described} on "
                                        f"{resolver.name} failed: {message}")
    return Resolution(None, reasons.Resolving,
                      f"resolving {spec.origin.described} on cluster {resolver.name}")


def compare_commits(request: protocol.Request, spec: CacheSpec, names: ResolveNames) -> list[str]:
    """The resolve Job's --compare commits. A Job is immutable, so once it was composed its
    commits stay as they were; a fleet that moves meanwhile only costs some headroom."""
    composed = resolve_job.composed_compares(resolve_job.observed_job(request.observed, names))
    if composed is not None:
        return composed[:COMPARED_MAX]
    return served_commits((h for k, h in sorted(request.observed.items()) if k.startswith(HYDRATION_PREFIX)),
                          spec.repo)


def compose_resolve_step(request: protocol.Request, spec: CacheSpec, cluster: FleetClusterView,
                         names: ResolveNames, outcome: protocol.Outcome, *, resolved: bool) -> None:
    """resolved: its record says Resolved, so the Job is never run again
    (resolve_job.compose_job). A completed Job whose record is lost (its ConfigMap deleted
    and created again empty) is not: it runs again once its TTL collected it, instead of
    leaving the cache Resolving for ever."""
    namespace = request.namespace
    labels = resolve_job.labels_for(request.name)
    resolve_job.compose_record(outcome, names, namespace, cluster.provider_config, labels)
    mounts = []
    if spec.secret:
        secret_name = naming.child_name(request.name, "resolver-token")
        outcome.compose(names.key("token"), job_mounts.secret_object(
            names.object_name("token"), secret_name, namespace, cluster.provider_config,
            spec.secret, labels))
        mounts.append(job_mounts.secret_mount("token", secret_name, spec.secret))
    if spec.origin.reads_claim:  # the volume's own manifest file, read-only
        mounts.append(job_mounts.claim_mount(spec.origin.fields["claimName"]))
    args = spec.origin.resolve_args(f"{namespace}/{names.remote}")
    if spec.origin.hub is not None:
        for commit in compare_commits(request, spec, names):
            args += ["--compare", commit]
    job = resolve_job.job_manifest(names, namespace, cluster.agent_image, args, labels,
                                   agent_job.JobPolicy.of(spec.job))
    resolve_job.compose_job(outcome, names, namespace, cluster.provider_config,
                            job_mounts.with_mounts(job, mounts), resolved)


def resolve_images(request: protocol.Request, spec: CacheSpec, targets: list[Target],
                   outcome: protocol.Outcome) -> image_pins.Pins:
    """Pin every image of spec.images to one digest for the fleet: the latched ones stand;
    the others are asked of their registries by one resolve-images Job on the first Ready
    target, composed only while some image has no digest (then Crossplane deletes it)."""
    pins = image_pins.pins_of(list(spec.images), request.status.get("images"), None)
    resolver = next((t.cluster for t in targets if t.ready), None)
    if not pins.unresolved or resolver is None:
        return pins
    secrets = image_pins.pull_secrets(list(spec.images), pins.unresolved)
    names = ResolveNames(request.name, pins.step_digest(secrets), resolver.name, step=IMAGE_RESOLVE_STEP,
                         account="image-resolver")
    record = resolve_job.record_of(request.observed, names)
    fresh = image_pins.pins_of(list(spec.images), request.status.get("images"), record)
    if not fresh.unresolved:
        return fresh
    labels = resolve_job.labels_for(request.name)
    resolve_job.compose_record(outcome, names, request.namespace, resolver.provider_config, labels)
    args = ["resolve-images", *(a for image in pins.unresolved for a in ("--image", image)),
            "--progress-configmap", f"{request.namespace}/{names.remote}"]
    mounts = []
    for index, (secret_name, key) in enumerate(secrets):
        secret = job_mounts.SecretRef(secret_name, ((key, sources.REGISTRY_CONFIG_FILE),),
                                      f"{sources.REGISTRY_MOUNT_PATH}/{index}", "spec.images[].pullSecretRef")
        copy = naming.child_name(request.name, f"image-resolver-pull-{index}")
        outcome.compose(names.key(f"pull-{index}"), job_mounts.secret_object(
            names.object_name(f"pull-{index}"), copy, request.namespace, resolver.provider_config, secret, labels))
        mounts.append(job_mounts.secret_mount(f"pull-{index}", copy, secret))
        args += ["--registry-config", f"{secret.mount_path}/{sources.REGISTRY_CONFIG_FILE}"]
    job = resolve_job.job_manifest(names, request.namespace, resolver.agent_image, args, labels,
                                   agent_job.JobPolicy.of(spec.job))
    resolve_job.compose_job(outcome, names, request.namespace, resolver.provider_config,
                            job_mounts.with_mounts(job, mounts), False)
    state = agent_job.JobState.of(objects.remote_manifest(resolve_job.observed_job(request.observed, names)))
    if record.get("phase") == "Failed" or state.failed:
        reason, message = agent_job.failure_reason(state, record)
        outcome.warnings.append(f"resolving spec.images on {resolver.name} failed: {message}")
        return dataclasses.replace(fresh, failure=reason)
    return fresh


def report_images(request: protocol.Request, spec: CacheSpec, pins: image_pins.Pins,
                  targets: list[Target], outcome: protocol.Outcome) -> None:
    """status.images and the IMAGES column, summed over the target hydrations."""
    if not spec.images:
        return
    rows, summary = image_pins.fleet_images(list(spec.images), pins,
                                            [request.observed.get(hydration_key(t.name)) for t in targets])
    outcome.status["images"] = rows
    outcome.status["imagesSummary"] = summary


# --- 4. admission: obey the grant (functions/decisions/obey_grant.py) ----------------------


def latched_resolution(request: protocol.Request, spec: CacheSpec, admitted: obey_grant.Admission
                       ) -> Resolution:
    """Without a grant nothing resolves: the latched result still stands for this source."""
    latched = read_resolved(request.status.get("resolved"))
    if stands(latched, spec.origin):
        return Resolution(latched, reasons.Resolved)
    return Resolution(None, admitted.reason, admitted.message)


# --- 5. hydrations ------------------------------------------------------------------------


def hydration_key(cluster: str) -> str:
    return f"{HYDRATION_PREFIX}{cluster}"


def hydration(request: protocol.Request, spec: CacheSpec, resolved: dict, cluster: str,
              fleet: mirror.Mirror | None = None, keep: tuple[str, ...] = (),
              images: tuple[dict, ...] = ()) -> dict:
    """keep: the commits its volume must keep besides its own (spec.keepCommits); images:
    spec.images with their pinned digests (functions/decisions/image_pins.py)."""
    serving = serving_commit_of(request.observed.get(hydration_key(cluster)),
                                resolved.get("repo") or spec.repo)
    storage = {"size": spec.storage.get("size")
               or quantities.volume_size_for(volume_bytes(resolved, serving))}
    for key in ("storageClassName", "accessMode"):
        if spec.storage.get(key):
            storage[key] = spec.storage[key]
    mirrored = fleet.for_hydration(cluster, read.get_path(
        request.observed.get(hydration_key(cluster)), "spec.mirror.role")) if fleet else None
    return hydration_manifest(request.namespace, request.name, cluster, {
        "source": spec.source,
        "commit": resolved["commit"],
        "manifestDigest": resolved["manifestDigest"],
        "bytes": resolved["bytes"],
        "storage": storage,
        "tier": spec.storage.get("tier", "Volume"),
        **({"nodePool": spec.storage["nodePool"]}
           if spec.storage.get("nodePool", grant_view.DEFAULT_POOL) != grant_view.DEFAULT_POOL else {}),
        "job": agent_job.JobPolicy.of(spec.job).as_spec(),
        **({"agent": dict(spec.agent)} if spec.agent else {}),
        "retention": spec.retention.for_hydration(),
        **({"mirror": mirrored} if mirrored else {}),
        **({"keepCommits": list(keep)} if keep else {}),
        **({"images": [dict(i) for i in images]} if images else {}),
    })


def fleet_mirror(request: protocol.Request, spec: CacheSpec, resolved: dict,
                 targets: list[Target], may_start: frozenset[str]) -> mirror.Mirror | None:
    """Which mirror each target reads (by its FleetCluster's region label), who publishes
    the resolved commit to each (among the targets the waves let start), and whether it has
    (one writer per mirror, functions/decisions/mirror.py); None without
    spec.distribution.mirror. A named cluster that does not exist uses no mirror."""
    candidates = [mirror.Candidate(t.name, t.cluster.labels, t.ready,
                                   observed if pinned_to(observed, resolved) else None,
                                   t.name in may_start)
                  for t in targets if t.cluster is not None
                  for observed in [request.observed.get(hydration_key(t.name))]]
    return mirror.decide(spec.mirror, resolved["commit"], candidates,
                         request.status.get("mirror"), resolved.get("repo") or spec.repo)


def published_artifact(request: protocol.Request, fleet: mirror.Mirror, resolved: dict,
                       targets: list[Target]) -> dict | None:
    """The OCI mirror's artifact of the resolved commit, as its publisher's hydration reports
    it once Ready on that commit (its record's reference, pinned by digest), for
    status.resolved.artifact; None while nothing is published, or for an S3 mirror."""
    group = fleet.groups[0] if fleet.groups else None
    if group is None or group.location.oci is None:
        return None
    expected = f"{group.location.repository}/{fleet.artifact}@"
    for target in targets:
        observed = request.observed.get(hydration_key(target.name))
        artifact = read_artifact(read.get_path(observed, "status.artifact"))
        if pinned_to(observed, resolved) and read.get_path(observed, "status.phase") == "Ready" \
                and read.get_path(observed, "spec.mirror.role") == mirror.PUBLISHER \
                and artifact and artifact["reference"].startswith(expected):
            return artifact
    return None


def mirror_secret_key(ref: job_mounts.SecretRef) -> str:
    return f"{MIRROR_SECRET_PREFIX}{ref.name}"


def missing_mirror_secrets(request: protocol.Request, spec: CacheSpec) -> dict[str, str]:
    """Why each mirror's credentials Secret cannot be used, by region ("" for the default
    mirror); checked before fan-out, so no hydration is composed that would wait for it."""
    problems = {}
    for location in mirror.locations(spec.mirror):
        ref = location.secret
        problem = sources.secret_problem(request, ref, mirror_secret_key(ref)) if ref else ""
        if problem:
            problems[location.region] = reasons.with_remedy(problem, CREDENTIALS_MISSING)
    return problems


def rollout_decision(request: protocol.Request, spec: CacheSpec, resolved: dict,
                     targets: list[Target]) -> waves.Decision:
    """Where the rollout in waves stands (functions/decisions/waves.py): without
    spec.rollout.waves every target may start and there is no status.rollout."""
    now = request.now.timestamp()
    replicas = cache_replicas.by_cluster(request.required.get(REPLICAS_KEY) or [], request.name,
                                         resolved["commit"], now) if spec.rollout.waves else {}
    return waves.decide(targets, spec.rollout, {t.name: request.observed.get(hydration_key(t.name)) for t in targets},
                        replicas, request.status.get("rollout"), resolved, now,
                        PINNED_MANIFEST if spec.origin.pinned_manifest else "")


def kept_commits(spec: CacheSpec, decision: waves.Decision, now: float) -> tuple[str, ...]:
    """The previous commit, which every volume keeps for a rollback while the rollout is in
    flight and for spec.retention.afterRemoval after it completed (a late rollback of the
    completed rollout is a revert, which then finds it still there)."""
    state = decision.status
    if state is None or not state.previous_commit:
        return ()
    if state.phase == COMPLETE and state.completed is not None \
            and now >= state.completed + spec.retention.after_removal.total_seconds():
        return ()
    return (state.previous_commit,)


def previous_content(decision: waves.Decision, resolved: dict) -> dict | None:
    """The content a rollback composes again, as the resolved content is passed on: the
    previous commit, manifest digest and bytes latched when the rollout started."""
    state = decision.status
    if state is None or not state.previous_manifest_digest:
        return None
    return {**resolved, "commit": state.previous_commit, "manifestDigest": state.previous_manifest_digest,
            "bytes": state.previous_bytes, "compared": []}


def compose_hydrations(request: protocol.Request, spec: CacheSpec, resolved: dict,
                       targets: list[Target], outcome: protocol.Outcome, decision: waves.Decision,
                       fleet: mirror.Mirror | None = None,
                       missing_secrets: dict[str, str] | None = None,
                       images: tuple[dict, ...] = ()) -> list[ClusterReport]:
    """One hydration per target the waves let start, in the rollout's order
    (functions/decisions/rollout.py): at most maxConcurrent not Ready, taken in name order; a
    cluster that waits (for its wave, for a slot, for its mirror, for its mirror's
    credentials) keeps what it has, and its report says why. A cluster rolled back is
    composed on the previous content, on the size its volume has (a volume never shrinks)."""
    keep = kept_commits(spec, decision, request.now.timestamp())
    plan = rollout.plan(targets, {t.name: request.observed.get(hydration_key(t.name)) for t in targets},
                        resolved, spec.max_concurrent, fleet, missing_secrets,
                        frozenset(t.name for t in targets) - decision.may_start)
    for cluster, ready in plan.composed.items():
        outcome.compose(hydration_key(cluster), hydration(request, spec, resolved, cluster, fleet, keep,
                                                          images), ready=ready)
    previous = previous_content(decision, resolved)
    for cluster in sorted(decision.roll_back):
        if previous is None:
            break
        desired = hydration(request, spec, previous, cluster, None, keep, images)
        size = read.get_path(request.observed.get(hydration_key(cluster)), "spec.storage.size")
        if isinstance(size, str) and size and not spec.storage.get("size"):
            desired["spec"]["storage"]["size"] = size
        outcome.compose(hydration_key(cluster), desired, ready=False)
    objects.carry_over(request, outcome, [hydration_key(cluster) for cluster in plan.carried])
    reports = []
    for target in targets:
        observed = request.observed.get(hydration_key(target.name))
        report = report_of(target, observed, resolved["bytes"], resolved,
                           resolved.get("repo") or spec.repo)
        plan.explain(report, target, spec.max_concurrent, fleet)
        held = decision.hold(target.name)
        if held:
            report.reason, report.message = held
            if report.serving_commit:
                report.message += f"; serving {report.serving_commit[:10]} until then"
        reports.append(report)
    return reports


# --- 6. retention -------------------------------------------------------------------------


def retain_departed(request: protocol.Request, spec: CacheSpec, targets: list[Target],
                    outcome: protocol.Outcome) -> list[retention.Kept]:
    """Keep the hydrations of clusters that left the placement as long as retention says.

    A kept hydration is composed as observed (it fetches nothing new: spec.removal tells
    its composer so), with the cache's current spec.retention and spec.removal. One that
    retention lets go is no longer composed, and Crossplane deletes it with its volume.
    """
    wanted = {hydration_key(t.name) for t in targets}
    kept = []
    for key, observed in sorted(request.observed.items()):
        if not key.startswith(HYDRATION_PREFIX) or key in wanted:
            continue
        cluster = key[len(HYDRATION_PREFIX):]
        since = retention.latched_since(cluster, observed, request.status.get("retained"),
                                        request.now)
        decision = retention.decide(cluster, observed, since, request.now, spec.retention)
        if decision is None:
            continue
        desired = objects.strip_observed(observed)
        # spec.crossplane is the hydration's own reconciler's (its composition, its
        # resourceRefs): claiming it from here would fight that reconciler.
        desired["spec"] = {**{k: v for k, v in read.mapping_at(desired, "spec").items()
                              if k != "crossplane"},
                           "retention": spec.retention.for_hydration(),
                           "removal": decision.removal()}
        outcome.compose(key, desired, ready=None)
        kept.append(decision)
    return kept


# --- 7. report ----------------------------------------------------------------------------


def report(request: protocol.Request, spec: CacheSpec, resolution: Resolution,
           admitted: obey_grant.Admission, reports: list[ClusterReport],
           kept: list[retention.Kept] | None, mounted: int, outcome: protocol.Outcome,
           missing_secrets: list[str] | None = None, decision: waves.Decision | None = None) -> None:
    """kept is None when retention did not run (the grant has not admitted this spec);
    missing_secrets: why mirror credentials Secrets cannot be used (the cache is not Ready
    until they can); decision: the rollout in waves decided in this call, if any."""
    status = fleet_status(request, reports, kept, mounted)
    resolved = resolution.resolved
    shown = resolved or read_resolved(request.status.get("resolved"))  # the old commit
    if shown:
        status["resolved"] = shown
        status["commitShort"] = shown["commit"][:8]
        status["sizeHuman"] = quantities.human_bytes(shown["bytes"])
    outcome.status = status

    outcome.condition("Admitted", admitted.admitted, admitted.reason, admitted.message)
    if resolved:
        outcome.condition("Resolved", True, reasons.Resolved,
                          f"{spec.origin.described} is commit {resolved['commit']} "
                          f"({messages.counted(resolved['files'], 'file')}, "
                          f"{quantities.human_bytes(resolved['bytes'])})")
    else:
        outcome.condition("Resolved", False, resolution.reason, resolution.message)
    state = decision.status if decision else None
    if state is not None:
        status["rollout"] = state.as_status()
        report_rollout_change(request.status.get("rollout"), state.as_status(), outcome)
    elif spec.rollout.waves and isinstance(request.status.get("rollout"), dict):
        status["rollout"] = request.status["rollout"]  # decided again once the content is admitted
    hold = (decision.reason, state.message) if decision and state and decision.reason else None
    fleet_conditions(reports, resolution, admitted, spec.min_ready, spec.retention.ttl_after_last_use,
                     outcome, missing_secrets, hold)


def report_rollout_change(before: Any, after: dict, outcome: protocol.Outcome) -> None:
    """A warning (Crossplane records it as a Warning event on the ModelCache) when the rollout
    halts or rolls back, a notice (a Normal event) when it otherwise changes phase or wave:
    once, on the change, not on every call while it stays so."""
    before = before if isinstance(before, dict) else {}
    changed = (before.get("commit"), before.get("phase")) != (after["commit"], after["phase"])
    if changed and after["phase"] in (HALTED, ROLLED_BACK):
        outcome.warnings.append(f"rollout of {after['commit'][:10]} {after['summary']}: {after['message']}")
    elif changed or before.get("wave") != after["wave"]:
        outcome.notices.append(f"rollout of {after['commit'][:10]} {after['summary']}: {after['message']}")


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request.spec)
    outcome.require(FLEET_CLUSTERS_KEY, FLEET_CLUSTERS)
    outcome.require(GRANT_KEY, obey_grant.grant_requirement(request.namespace, spec.grant))
    if spec.secret:
        outcome.require(TOKEN_SECRET_KEY, protocol.Requirement(
            "v1", "Secret", match_name=spec.secret.name, namespace=request.namespace))
    if spec.rollout.waves:
        outcome.require(REPLICAS_KEY, cache_replicas.requirement(request.namespace, request.name))
    for ref in filter(None, (m.secret for m in mirror.locations(spec.mirror))):
        outcome.require(mirror_secret_key(ref), protocol.Requirement(
            "v1", "Secret", match_name=ref.name, namespace=request.namespace))
    if FLEET_CLUSTERS_KEY not in request.required or GRANT_KEY not in request.required \
            or (spec.rollout.waves and REPLICAS_KEY not in request.required):
        objects.carry_over(request, outcome, request.observed)
        return outcome

    targets = target_clusters(spec, request.required[FLEET_CLUSTERS_KEY])
    grant = next((g for g in request.required[GRANT_KEY] if isinstance(g, dict)), None)
    if grant is None:  # compose nothing new: what exists stays as it is
        admitted = obey_grant.grant_not_found(request.namespace, spec.grant)
        objects.carry_over(request, outcome, request.observed)
        resolution = latched_resolution(request, spec, admitted)
        pins = image_pins.pins_of(list(spec.images), request.status.get("images"), None)
    else:
        resolution = resolve(request, spec, targets, outcome)
        pins = resolve_images(request, spec, targets, outcome)
        admitted = obey_grant.admission_of(request, spec.grant, grant, resolution.resolved, targets,
                                           request.required[FLEET_CLUSTERS_KEY],
                                           any(k.startswith(HYDRATION_PREFIX) for k in request.observed))
    fleet, decision = None, None
    missing_secrets = missing_mirror_secrets(request, spec)
    if resolution.resolved and admitted.admitted:
        decision = rollout_decision(request, spec, resolution.resolved, targets)
        outcome.requeue_after = None if decision.wake_at is None else decision.wake_at - request.now.timestamp()
        fleet = fleet_mirror(request, spec, resolution.resolved, targets, decision.may_start)
        artifact = published_artifact(request, fleet, resolution.resolved, targets) if fleet else None
        if artifact and "artifact" not in resolution.resolved:  # latched once: it stays with the commit
            resolution.resolved["artifact"] = artifact
        reports = compose_hydrations(request, spec, resolution.resolved, targets, outcome, decision,
                                     fleet, missing_secrets,
                                     tuple(image_pins.hydration_images(list(spec.images), pins)))
    else:
        # Resolving under the grant's admission: the targets keep their hydrations, and
        # retention decides on the others. Not admitted: every hydration stays as it is.
        held = [hydration_key(t.name) for t in targets] if admitted.admitted \
            else [k for k in request.observed if k.startswith(HYDRATION_PREFIX)]
        objects.carry_over(request, outcome, held)
        shown = resolution.resolved or read_resolved(request.status.get("resolved")) or {}
        size = resolution.resolved["bytes"] if resolution.resolved else 0
        reports = [report_of(t, request.observed.get(hydration_key(t.name)), size,
                             shown, shown.get("repo") or spec.repo)
                   for t in targets]
    kept = retain_departed(request, spec, targets, outcome) if admitted.admitted else None
    mounted = retention.mounted_replicas([h for k, h in sorted(request.observed.items())
                                          if k.startswith(HYDRATION_PREFIX)
                                          and k in outcome.desired])
    report(request, spec, resolution, admitted, reports, kept, mounted, outcome,
           list(missing_secrets.values()), decision)
    if fleet is not None:
        outcome.status["mirror"] = fleet.as_status()
    node_rollup.apply(spec.storage.get("tier", "Volume"),
                      {t.name: request.observed.get(hydration_key(t.name)) for t in targets},
                      outcome)
    report_images(request, spec, pins, targets, outcome)
    outcome.status["reason"] = headline(reports, outcome)
    return outcome
