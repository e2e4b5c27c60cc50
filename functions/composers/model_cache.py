"""compose-model-cache: resolve once for the whole fleet, then hydrate every target cluster.

Lifecycle, top to bottom:
1. read the spec and ask Crossplane for the FleetClusters, the ModelCacheGrant named by
   spec.grantRef (and the token Secret);
2. pick the target clusters from the placement;
3. resolve the source to one commit with a resolve Job on the first Ready target, and
   latch the result into status.resolved, so the fleet never serves two versions of "main"
   (only once the grant exists: without one the cache resolves nothing);
4. obey the grant: fan out only what its status admitted at this very spec and resolved
   content (its composer is the one writer of admission); anything else composes nothing
   new and keeps what the grant admitted before;
5. compose one ModelCacheHydration per target, at most rollout.maxConcurrent not Ready
   at once, in cluster-name order, each with the cache's spec.retention; with fleet
   mirrors, each mirror's publisher before the clusters that read it (functions/mirror.py),
   and nothing new for a cluster whose mirror's credentials Secret is missing;
6. keep the hydration of a cluster that left the placement while a replica mounts it or it
   is pinned, then for spec.retention.afterRemoval (functions/retention.py decides);
7. report per-cluster progress, what is retained, and the Admitted/Resolved/Progressing/
   Available/Degraded/Lapsed conditions.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fleetcache.apis import specs
from fleetcache.functions.k8s import agent_job
from fleetcache.functions.k8s import objects
from fleetcache.functions import naming
from fleetcache.functions import protocol
from fleetcache.functions import quantities
from fleetcache.functions import read
from fleetcache.functions.views.fleet_cluster import FLEET_CLUSTERS, FleetClusterView
from fleetcache.functions.views import grant as grant_view
from fleetcache.functions.views import placement
from fleetcache.functions.views.hydration import PHASES, ClusterReport, pinned_to, report_of, serving_commit_of
from fleetcache.functions.views.model_cache import COMPARED_MAX, read_compared, read_resolved
from fleetcache.functions.views.placement import Target
from fleetcache import messages
from fleetcache import reasons
from fleetcache import shapes
from fleetcache.functions.decisions import admission, mirror, retention, sources
from fleetcache.functions.node_tier import rollup as node_rollup
from fleetcache.apis.models.model_cache import ModelCache

FLEET_CLUSTERS_KEY = "fleet-clusters"
GRANT_KEY = "model-cache-grant"
TOKEN_SECRET_KEY = "token-secret"
MIRROR_SECRET_PREFIX = "mirror-secret-"  # + the Secret's name: each mirror's credentials
CREDENTIALS_MISSING = reasons.CredentialsSecretMissing
RESOLVE_PREFIX = "resolve-"
HYDRATION_PREFIX = "hydration-"
LISTED_CLUSTERS = 100  # status.clusters and status.retained rows; the rest are in the hydrations
NAMED_IN_MESSAGE = 10  # cluster names a condition message spells out



# --- 1. inputs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheSpec:
    grant: str
    source: dict
    origin: sources.Source
    repo: str
    revision: str
    secret: sources.SecretRef | None  # the one the resolve Job needs (token or S3 keys)
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


def read_spec(spec: Any) -> CacheSpec:
    """The spec read through the ModelCache model; every error names the field and the fix."""
    spec = specs.read_spec(ModelCache, spec)
    source = sources.normalized(spec["source"])
    origin = sources.Source.of(source)
    names, selector = spec["placement"].get("clusterNames"), \
        spec["placement"].get("clusterSelector")
    storage = spec.get("storage", {})
    if "size" in storage:
        quantities.quantity_bytes(storage["size"], "spec.storage.size")
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
    )


# --- 2. targets ---------------------------------------------------------------------------


def target_clusters(spec: CacheSpec, fleet: list[dict]) -> list[Target]:
    """The placement's clusters in name order; named clusters that don't exist included."""
    return placement.targets(spec.cluster_names, spec.cluster_selector, fleet)


# --- 3. resolve ---------------------------------------------------------------------------


@dataclass
class Resolution:
    resolved: dict | None  # the latched status.resolved, when it matches the spec
    reason: str = reasons.Resolving
    message: str = ""


def compared_of(record: dict) -> list[dict]:
    """The resolve record's `compared` (compact JSON, a string like every record value)."""
    text = record.get("compared")
    if not isinstance(text, str) or len(text) > 64 * 1024:
        return []
    try:
        return read_compared(json.loads(text))
    except ValueError:
        return []


def stands(latched: dict | None, spec: CacheSpec) -> bool:
    """A latched result still answers this spec: the same source, something selected, and
    for an S3 prefix or a volume's file the pinned manifest every hydration needs (a status
    without it, or with a broken one, resolves again rather than strand the fleet)."""
    return bool(latched) and latched["sourceDigest"] == spec.source_digest \
        and not is_empty(latched) \
        and ("manifest" in latched or not spec.origin.pinned_manifest)


def is_empty(resolved: dict) -> bool:
    """A resolve that selected nothing: fanning it out would make empty caches Ready."""
    return resolved["bytes"] <= 0 or resolved["files"] <= 0


def empty_source(spec: CacheSpec, resolved: dict) -> Resolution:
    return Resolution(None, reasons.InvalidSource, reasons.with_remedy(
        f"{spec.origin.described} resolved to commit {resolved['commit'][:10]} with "
        f"{resolved['files']} files ({resolved['bytes']} bytes) selected: "
        f"spec.source.allowPatterns {messages.shown(spec.source['allowPatterns'])} and "
        f"ignorePatterns {messages.shown(spec.source['ignorePatterns'])} select no file; fix the "
        "patterns so they match the repository's files", reasons.InvalidSource))


def resolve(request: protocol.Request, spec: CacheSpec, targets: list[Target],
            outcome: protocol.Outcome) -> Resolution:
    """Latch the resolve result, or compose the resolve step on the first Ready target."""
    raw = request.status.get("resolved")
    latched = read_resolved(raw)
    if raw is not None and latched is None:
        outcome.warnings.append(f"status.resolved {messages.shown(raw)} is not a resolve result "
                                "(an object with a 40-hex commit); resolving again")
    if stands(latched, spec):
        return Resolution(latched, reasons.Resolved)

    secret_problem = sources.secret_problem(request, spec.secret, TOKEN_SECRET_KEY)
    if secret_problem:  # the resolve step stays; compose() keeps the hydrations
        objects.carry_over(request, outcome, [k for k in request.observed
                                          if k.startswith(RESOLVE_PREFIX)])
        reason = CREDENTIALS_MISSING if spec.origin.kind == sources.S3 \
            else reasons.TokenSecretMissing
        return Resolution(None, reason, reasons.with_remedy(secret_problem, reason))
    resolver = next((t.cluster for t in targets if t.ready), None)
    if resolver is None:
        missing = [t.name for t in targets if t.cluster is None]
        if targets and len(missing) == len(targets):
            return Resolution(None, reasons.ClusterNotFound, not_found_message(missing))
        reason = reasons.ClusterNotReady if targets else reasons.NoClusters
        return Resolution(None, reason, reasons.with_remedy(
            "no Ready target cluster to resolve the source on", reason))

    names = ResolveNames(request.name, spec.source_digest)
    record = read.mapping_at(objects.remote_manifest(request.observed.get(names.key("configmap"))),
                            "data")
    result = read_resolved(latched_result(spec, record)) \
        if record.get("phase") == "Resolved" else None
    unpinned = manifest_problem(spec, record, result)
    if unpinned:  # kept composed: the record stays, and no Job reruns until the spec changes
        compose_resolve_step(request, spec, resolver, names, outcome)
        return Resolution(None, reasons.InvalidSource, reasons.with_remedy(
            f"resolving {spec.origin.described}: {unpinned}", reasons.InvalidSource))
    if result and not is_empty(result):
        return Resolution(result, reasons.Resolved)
    if record.get("phase") == "Resolved" and result is None:
        outcome.warnings.append(f"the resolve record's commit {messages.shown(record.get('commit'))} "
                                "is not a 40-hex commit hash; waiting for a valid record")
    job = agent_job.JobState.of(objects.remote_manifest(request.observed.get(names.key("job"))))
    compose_resolve_step(request, spec, resolver, names, outcome)
    if result:  # kept composed: the record stays, and no Job reruns until the spec changes
        return empty_source(spec, result)
    if record.get("phase") == "Failed" or job.failed:
        reason, message = agent_job.failure_reason(job, record)
        return Resolution(None, reason, f"resolving {spec.origin.described} on "
                                        f"{resolver.name} failed: {message}")
    return Resolution(None, reasons.Resolving,
                      f"resolving {spec.origin.described} on cluster {resolver.name}")


def latched_result(spec: CacheSpec, record: dict) -> dict:
    """The agent's resolve record as status.resolved (read_resolved checks its fields); an
    S3 prefix or a volume's manifest file also latches the pinned manifest (contract §D)."""
    result = {
        "repo": spec.repo,
        "revision": spec.revision,
        "commit": record.get("commit"),
        "bytes": record.get("bytes"),
        "files": record.get("files"),
        "manifestDigest": record.get("manifestDigest"),
        "sourceDigest": spec.source_digest,
        "compared": compared_of(record),
    }
    if spec.origin.pinned_manifest:
        result["manifest"] = sources.manifest_of(record.get("manifest"))[0]
    return result


def manifest_problem(spec: CacheSpec, record: dict, result: dict | None) -> str:
    """Why a resolved S3 prefix or volume manifest cannot be latched ("" when it can): every
    hydration fetches or verifies against the latched manifest, so it must be there, within
    the bound, and hash to the digest the record states."""
    if result is None or not spec.origin.pinned_manifest:
        return ""
    manifest, problem = sources.manifest_of(record.get("manifest"))
    if manifest is None:
        return problem
    if sources.digest_of_manifest(manifest) != result["manifestDigest"]:
        return "the resolve record's manifest does not hash to its manifestDigest"
    return ""


def named(names: list[str]) -> str:
    """Cluster names for a message: the first few, then how many more."""
    shown = ", ".join(messages.clipped(n, 63) for n in names[:NAMED_IN_MESSAGE])
    more = len(names) - NAMED_IN_MESSAGE
    return f"{shown} and {more} more" if more > 0 else shown


def not_found_message(missing: list[str]) -> str:
    return reasons.with_remedy(f"FleetCluster {named(missing)} named in "
                           "spec.placement.clusterNames does not exist", reasons.ClusterNotFound)


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


def served_commits(request: protocol.Request, repo: str) -> list[str]:
    """The commits of `repo` the clusters' volumes hold for serving (each hydration's
    servingCommit and its pinned spec.commit), the most clusters first, then by commit;
    at most COMPARED_MAX."""
    counts: Counter[str] = Counter()
    for key, observed in sorted(request.observed.items()):
        if not key.startswith(HYDRATION_PREFIX):
            continue
        held = {serving_commit_of(observed, repo)}
        pinned = read.get_path(observed, "spec.commit")
        if read.get_path(observed, "spec.source.huggingFace.repo") == repo \
                and shapes.is_resolved_commit(pinned):
            held.add(pinned)
        counts.update(c for c in held if c)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [commit for commit, _ in ranked[:COMPARED_MAX]]


def compare_commits(request: protocol.Request, spec: CacheSpec, names: ResolveNames) -> list[str]:
    """The resolve Job's --compare commits. A Job is immutable, so once it was composed its
    commits stay as they were; a fleet that moves meanwhile only costs some headroom."""
    composed = read.get_path(request.observed.get(names.key("job")),
                            "spec.forProvider.manifest.spec.template.spec.containers")
    if isinstance(composed, list) and composed and isinstance(composed[0], dict):
        args = composed[0].get("args")
        args = args if isinstance(args, list) else []
        return [b for a, b in zip(args, args[1:])
                if a == "--compare" and shapes.is_resolved_commit(b)
                ][:COMPARED_MAX]
    return served_commits(request, spec.repo)


def compose_resolve_step(request: protocol.Request, spec: CacheSpec, cluster: FleetClusterView,
                         names: ResolveNames, outcome: protocol.Outcome) -> None:
    namespace = request.namespace
    labels = {naming.LABEL_MANAGED_BY: "fleetcache", naming.LABEL_COMPONENT: "resolve",
              naming.LABEL_MODEL_CACHE: naming.label_value(request.name)}

    def remote(what: str, manifest: dict, **kwargs: Any) -> None:
        outcome.compose(names.key(what), objects.remote_object(
            names.object_name(what), namespace, manifest, cluster.provider_config, **kwargs))

    remote("namespace", objects.namespace_manifest(namespace),
           management_policies=objects.CREATE_ONLY)
    for manifest in agent_job.progress_access_manifests(names.service_account, names.remote,
                                                  namespace, labels):
        remote(manifest["kind"].lower(), manifest)
    remote("configmap", agent_job.progress_configmap_manifest(names.remote, namespace, labels),
           management_policies=objects.OBSERVE_CREATE_DELETE)
    mounts = []
    if spec.secret:
        secret_name = naming.child_name(request.name, "resolver-token")
        outcome.compose(names.key("token"), sources.secret_object(
            names.object_name("token"), secret_name, namespace, cluster.provider_config,
            spec.secret, labels))
        mounts.append(sources.secret_mount("token", secret_name, spec.secret))
    if spec.origin.reads_claim:  # the volume's own manifest file, read-only
        mounts.append(sources.claim_mount(spec.origin.fields["claimName"]))
    args = spec.origin.resolve_args(f"{namespace}/{names.remote}")
    if spec.origin.hub is not None:
        for commit in compare_commits(request, spec, names):
            args += ["--compare", commit]
    remote("job", sources.with_mounts(agent_job.agent_job_manifest(
        name=names.remote, namespace=namespace, image=cluster.agent_image, args=args,
        service_account=names.service_account, labels=labels,
        policy=agent_job.JobPolicy.of(spec.job)), mounts))


# --- 4. admission -------------------------------------------------------------------------


ADMITTED = reasons.GrantAdmitted
REFUSALS = (reasons.OutsideGrant, reasons.PinningNotAllowed, reasons.OverQuota)  # the grant's, with its message


@dataclass(frozen=True)
class Admission:
    """What the grant decided about this cache, as this composer obeys it: fan out only
    when `admitted`; otherwise compose nothing new and keep what exists."""

    reason: str  # ADMITTED, GrantNotFound, AwaitingGrant, or one of REFUSALS
    message: str

    @property
    def admitted(self) -> bool:
        return self.reason == ADMITTED


def grant_requirement(request: protocol.Request, spec: CacheSpec) -> protocol.Requirement:
    return protocol.Requirement(naming.API_VERSION, "ModelCacheGrant", match_name=spec.grant,
                           namespace=request.namespace)


def grant_not_found(request: protocol.Request, spec: CacheSpec) -> Admission:
    return Admission(reasons.GrantNotFound, reasons.with_remedy(
        f"ModelCacheGrant {messages.clipped(spec.grant, 253)} (spec.grantRef.name) does not exist in "
        f"namespace {request.namespace}", reasons.GrantNotFound))


def as_admitted(request: protocol.Request, resolved: dict | None) -> dict:
    """The cache as the grant weighs it: its spec, and the content it would fan out (the
    resolution of this call, else the latched one), so content the grant never counted
    is never fanned out under an admission of other content."""
    shown = resolved or read_resolved(request.status.get("resolved")) or {}
    return {**request.composite,
            "status": {**request.status,
                       "resolved": {"manifestDigest": shown.get("manifestDigest", "")}}}


def outside_grant(grant: dict, targets: list[Target], fleet: list[dict]) -> list[str]:
    """Existing targets outside the grant's spec.clusters now (all of them when those
    cannot be read): the grant decided over the fleet as it was, and a cluster that has since
    come to match the placement waits for its next decision instead of being reached at
    once. A named cluster that does not exist cannot be reached, so it is not counted."""
    views = (FleetClusterView.of(r) for r in fleet if isinstance(r, dict))
    try:
        covered = admission.Placements(views).clusters(read.get_path(grant, "spec.clusters"),
                                                        "spec.clusters")
    except specs.InputError:
        covered = frozenset()
    return [t.name for t in targets if t.cluster is not None and t.name not in covered]


def admission_of(request: protocol.Request, spec: CacheSpec, grant: dict, resolved: dict | None,
                 targets: list[Target], fleet: list[dict]) -> Admission:
    """Admitted when the grant's row for this cache says admitted at its digest. A refused
    row shows the grant's reason and message, also when it still carries this digest (a
    latch: the grant refused the same spec again, e.g. its selector now matches clusters
    outside the grant, so what exists keeps serving and nothing new is composed); no row,
    or an admission at another digest, waits for the grant's next decision."""
    name = messages.clipped(spec.grant, 253)
    row = grant_view.cache_rows(read.get_path(grant, "status.caches")).get(request.name)
    digest = grant_view.admission_digest(as_admitted(request, resolved))
    if row is None:
        return Admission(reasons.AwaitingGrant, f"ModelCacheGrant {name} has not decided on this "
                                                "cache yet; nothing new is composed until it does")
    admitted_here = row.admitted and row.admitted_digest == digest
    outside = outside_grant(grant, targets, fleet)
    if admitted_here and outside:
        return Admission(reasons.AwaitingGrant, f"{named(outside)} came to match spec.placement "
                                                f"outside ModelCacheGrant {name}'s clusters since it "
                                                "decided; nothing new is composed until it decides "
                                                "again")
    if admitted_here and len(targets) > row.clusters:
        return Admission(reasons.AwaitingGrant, f"spec.placement matches {len(targets)} clusters, "
                                                f"more than the {row.clusters} ModelCacheGrant {name} "
                                                "counted when it decided; nothing new is composed "
                                                "until it decides again")
    if admitted_here:
        return Admission(ADMITTED, f"ModelCacheGrant {name} admits this cache on {row.clusters} clusters "
                                   f"({quantities.human_bytes(row.bytes)} each)")
    holds = bool(row.admitted_digest) and any(k.startswith(HYDRATION_PREFIX) for k in request.observed)
    kept = "; the copies it admitted before keep serving" if holds else ""
    if not row.admitted and row.reason in REFUSALS:
        said = messages.clipped(row.message, messages.MESSAGE_LIMIT // 2).rstrip(".")
        return Admission(row.reason, reasons.with_remedy(
            f"ModelCacheGrant {name} refuses this spec: {said or row.reason}{kept}", row.reason))
    return Admission(reasons.AwaitingGrant, f"ModelCacheGrant {name} has not decided on this spec "
                                            f"(or its resolved content) yet{kept}")


# --- 5. hydrations ------------------------------------------------------------------------


def hydration_key(cluster: str) -> str:
    return f"{HYDRATION_PREFIX}{cluster}"


def volume_bytes(resolved: dict, serving_commit: str) -> int:
    """Bytes the cluster's volume must hold: the resolved commit, plus what the commit it
    serves does not share with it (content-addressed blobs are stored once), as long as
    that commit stays on the volume for its replicas. A serving commit the resolve did
    not compare (or the hub no longer has) gives the resolved bytes alone, as before."""
    if not serving_commit or serving_commit == resolved["commit"]:
        return resolved["bytes"]
    for row in resolved.get("compared") or ():
        if row["commit"] == serving_commit and not row["missing"]:
            return resolved["bytes"] + row["bytes"] - row["sharedBytes"]
    return resolved["bytes"]


def hydration(request: protocol.Request, spec: CacheSpec, resolved: dict, cluster: str,
              fleet: mirror.Mirror | None = None) -> dict:
    serving = serving_commit_of(request.observed.get(hydration_key(cluster)),
                                resolved.get("repo") or spec.repo)
    storage = {"size": spec.storage.get("size")
               or quantities.volume_size_for(volume_bytes(resolved, serving))}
    for key in ("storageClassName", "accessMode"):
        if spec.storage.get(key):
            storage[key] = spec.storage[key]
    mirrored = fleet.for_hydration(cluster, read.get_path(
        request.observed.get(hydration_key(cluster)), "spec.mirror.role")) if fleet else None
    return {
        "apiVersion": naming.API_VERSION,
        "kind": "ModelCacheHydration",
        "metadata": {
            "name": naming.child_name(request.name, cluster),
            "namespace": request.namespace,
            "labels": {naming.LABEL_MODEL_CACHE: naming.label_value(request.name),
                       naming.LABEL_CLUSTER: naming.label_value(cluster)},
        },
        "spec": {
            "clusterName": cluster,
            "modelCacheName": request.name,
            "source": spec.source,
            "commit": resolved["commit"],
            "manifestDigest": resolved["manifestDigest"],
            "bytes": resolved["bytes"],
            "storage": storage,
            "tier": spec.storage.get("tier", "Volume"),
            "job": job_spec(agent_job.JobPolicy.of(spec.job)),
            **({"agent": dict(spec.agent)} if spec.agent else {}),
            "retention": spec.retention.for_hydration(),
            **({"mirror": mirrored} if mirrored else {}),
        },
    }


def job_spec(policy: agent_job.JobPolicy) -> dict:
    return {"backoffLimit": policy.backoff_limit,
            "activeDeadlineSeconds": policy.active_deadline_seconds,
            "ttlSecondsAfterFinished": policy.ttl_seconds_after_finished}


def fleet_mirror(request: protocol.Request, spec: CacheSpec, resolved: dict,
                 targets: list[Target]) -> mirror.Mirror | None:
    """Which mirror each target reads (by its FleetCluster's region label), who publishes
    the resolved commit to each, and whether it has (one writer per mirror,
    functions/mirror.py); None without spec.distribution.mirror. A named cluster that does
    not exist uses no mirror."""
    candidates = [mirror.Candidate(t.name, t.cluster.labels, t.ready,
                                   observed if pinned_to(observed, resolved) else None)
                  for t in targets if t.cluster is not None
                  for observed in [request.observed.get(hydration_key(t.name))]]
    return mirror.decide(spec.mirror, resolved["commit"], candidates,
                         request.status.get("mirror"))


def mirror_secret_key(ref: sources.SecretRef) -> str:
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


def compose_hydrations(request: protocol.Request, spec: CacheSpec, resolved: dict,
                       targets: list[Target], outcome: protocol.Outcome,
                       fleet: mirror.Mirror | None = None,
                       missing_secrets: dict[str, str] | None = None) -> list[ClusterReport]:
    """One hydration per target; at most maxConcurrent not Ready, taken in name order.

    A hydration already pinned to the resolved commit keeps its slot; a cluster still on
    an older commit keeps its old hydration (and cache) until a slot frees up. Failed
    hydrations hold their slot, so a bad source stops the rollout instead of failing
    the whole fleet; evicted ones do not (they fetch nothing until a replica returns).
    With a fleet mirror, a cluster other than its mirror's publisher is not composed on the
    resolved commit before that mirror holds it (it waits as Pending, WaitingForMirror). A
    cluster whose mirror's credentials Secret is missing (missing_secrets, by region) gets
    nothing new: what it has is kept as observed, and it is Pending CredentialsSecretMissing.
    """
    reports = []
    in_flight = 0
    waiting: list[tuple[Target, dict | None]] = []
    missing = missing_secrets or {}
    held = {t.name: missing[group.region] for t in targets if fleet is not None
            for group in [fleet.group_of(t.name)] if group and group.region in missing}
    for target in targets:
        observed = request.observed.get(hydration_key(target.name))
        if target.name in held:
            objects.carry_over(request, outcome, [hydration_key(target.name)])
            if pinned_to(observed, resolved) and \
                    read.get_path(observed, "status.phase") not in ("Ready", "Evicted"):
                in_flight += 1
        elif observed is not None and pinned_to(observed, resolved):
            outcome.compose(hydration_key(target.name),
                            hydration(request, spec, resolved, target.name, fleet),
                            ready=read.get_path(observed, "status.phase") == "Ready")
            if read.get_path(observed, "status.phase") not in ("Ready", "Evicted"):
                in_flight += 1
        else:
            waiting.append((target, observed))
    queued, for_mirror = set(), set()
    for target, observed in waiting:
        if fleet is not None and target.ready and fleet.waits(target.name):
            for_mirror.add(target.name)
        elif target.ready and in_flight < spec.max_concurrent:
            outcome.compose(hydration_key(target.name),
                            hydration(request, spec, resolved, target.name, fleet), ready=False)
            in_flight += 1
            continue
        if observed is not None:
            objects.carry_over(request, outcome, [hydration_key(target.name)])
        if target.ready:
            queued.add(target.name)
    for target in targets:
        observed = request.observed.get(hydration_key(target.name))
        report = report_of(target, observed, resolved["bytes"], resolved,
                           resolved.get("repo") or spec.repo)
        if target.name in queued:
            report.reason = reasons.RolloutQueued
            report.message = (f"waiting for a rollout slot: {spec.max_concurrent} clusters "
                              "hydrate at once (spec.rollout.maxConcurrent)")
            if report.serving_commit:
                report.message += f"; serving {report.serving_commit[:10]} until then"
        if fleet is not None and target.name in for_mirror:
            report.reason = reasons.WaitingForMirror
            report.message = fleet.waiting_message(target.name)
        if target.name in held and target.ready and report.phase == "Pending":
            report.reason, report.message = CREDENTIALS_MISSING, held[target.name]
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


@dataclass
class Rollup:
    reports: list[ClusterReport] = field(default_factory=list)

    def count(self, phase: str) -> int:
        return sum(1 for r in self.reports if r.phase == phase)

    @property
    def percent(self) -> int:
        total = sum(r.bytes_total for r in self.reports)
        done = sum(min(r.bytes_done, r.bytes_total) for r in self.reports)
        return int(done * 100 // total) if total else 0


def listed(reports: list[ClusterReport]) -> list[ClusterReport]:
    """The rows status.clusters shows: those that need attention first (Failed, Hydrating,
    Pending, then Ready), each phase in name order, at most LISTED_CLUSTERS, so the
    ModelCache stays far below etcd's object limit at any fleet size."""
    return sorted(reports, key=lambda r: (PHASES.index(r.phase), r.name))[:LISTED_CLUSTERS]


def every_cluster_command(request: protocol.Request) -> str:
    return (f"kubectl get modelcachehydrations -n {request.namespace} "
            f"-l {naming.LABEL_MODEL_CACHE}={naming.label_value(request.name)}")


def previously_retained(request: protocol.Request) -> list:
    """status.retained as it was: while the grant has not admitted the current spec,
    retention decides nothing, so what it latched (each cluster's `since`) stays."""
    rows = request.status.get("retained")
    return [r for r in rows if isinstance(r, dict)][:LISTED_CLUSTERS] \
        if isinstance(rows, list) else []


def report(request: protocol.Request, spec: CacheSpec, resolution: Resolution,
           admitted: Admission, reports: list[ClusterReport],
           kept: list[retention.Kept] | None, mounted: int, outcome: protocol.Outcome,
           missing_secrets: list[str] | None = None) -> None:
    """kept is None when retention did not run (the grant has not admitted this spec);
    missing_secrets: why mirror credentials Secrets cannot be used (the cache is not Ready
    until they can)."""
    rollup = Rollup(reports)
    desired = len(reports)
    ready, failed = rollup.count("Ready"), rollup.count("Failed")
    hydrating, pending = rollup.count("Hydrating"), rollup.count("Pending")
    evicted = [r for r in reports if r.phase == "Evicted"]
    missing = [r.name for r in reports if r.reason == reasons.ClusterNotFound]
    # A cluster serving the previous commit while the new one hydrates (or failed) still
    # serves this model warm: a model update is not an outage of the cache.
    serving = sum(1 for r in reports if r.serving_previous)
    needed = spec.min_ready or desired
    available = desired > 0 and ready + serving >= needed
    rows = listed(reports)
    status: dict[str, Any] = {
        "desiredClusters": desired,
        "readyClusters": ready,
        "hydratingClusters": hydrating,
        "failedClusters": failed,
        "pendingClusters": pending,
        "lapsedClusters": sum(1 for r in reports if r.lapsed),
        "evictedClusters": len(evicted),
        "retainedClusters": len(kept) if kept is not None
        else max(0, read.as_int(request.status.get("retainedClusters"))),
        "mountedReplicas": mounted,
        "summary": f"{ready}/{desired}",
        "progressPercent": rollup.percent,
        "clusters": [r.as_status() for r in rows],
        "clustersOmitted": desired - len(rows),
        "everyCluster": every_cluster_command(request),
        "retained": [k.as_status() for k in kept[:LISTED_CLUSTERS]] if kept is not None
        else previously_retained(request),
    }
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
                          f"({resolved['files']} files, {quantities.human_bytes(resolved['bytes'])})")
    else:
        outcome.condition("Resolved", False, resolution.reason, resolution.message)

    evicted_on = ""
    if evicted:
        evicted_on = (f"evicted on {named([r.name for r in evicted])} to free room (re-warmed "
                      "when a replica is placed there)")
    if not admitted.admitted and (resolved or admitted.reason == reasons.GrantNotFound):
        outcome.condition("Progressing", admitted.reason == reasons.AwaitingGrant, admitted.reason,
                          admitted.message)
    elif desired == 0:
        outcome.condition("Progressing", False, reasons.NoClusters,
                          reasons.with_remedy("no FleetCluster matches spec.placement", reasons.NoClusters))
    elif missing_secrets:
        outcome.condition("Progressing", False, CREDENTIALS_MISSING,
                          messages.clipped("; ".join(missing_secrets), messages.MESSAGE_LIMIT))
    elif ready == desired:
        outcome.condition("Progressing", False, reasons.Complete, f"all {desired} clusters are Ready")
    elif missing and ready + len(missing) == desired:
        outcome.condition("Progressing", False, reasons.ClusterNotFound, not_found_message(missing))
    elif evicted and ready + len(missing) + len(evicted) == desired:
        outcome.condition("Progressing", False, reasons.Evicted,
                          f"{ready}/{desired} Ready; nothing hydrates: {evicted_on}")
    elif resolved:
        outcome.condition("Progressing", True, reasons.Hydrating,
                          f"{ready}/{desired} Ready, {hydrating} hydrating, {pending} pending, "
                          f"{failed} failed" + (f", {len(evicted)} evicted" if evicted else "")
                          + f" ({rollup.percent}% of the fleet's bytes)")
    else:
        outcome.condition("Progressing", True, resolution.reason, resolution.message)

    lapsed = lapsed_shortfall(reports, available)
    counted = f"{ready} of {desired} clusters Ready"
    if serving:
        counted += f", {serving} serving the previous commit until the new one is Ready"
    counted += f" (needs {needed})"
    if evicted_on:
        counted += f"; {evicted_on}"
    if available:
        outcome.condition("Available", True, reasons.MinimumClustersReady, counted)
    else:
        outcome.condition("Available", False, reasons.Lapsed if lapsed else reasons.TooFewClustersReady,
                          counted)
    report_lapsed(reports, available, lapsed, spec, outcome)

    failures = [r for r in reports if r.phase == "Failed"]
    failed_on = ""
    if failures:
        failed_on = f"hydration failed on {named([f'{r.name} ({r.reason})' for r in failures])}"
    if missing:
        message = not_found_message(missing)
        outcome.condition("Degraded", True, reasons.ClusterNotFound,
                          f"{message.rstrip('.')}; {failed_on}" if failed_on else message)
    elif failures:
        first = reasons.remedy(failures[0].reason) or failures[0].message
        outcome.condition("Degraded", True, reasons.HydrationFailed, f"{failed_on}. {first}".strip())
    else:
        outcome.condition("Degraded", False, reasons.NoFailures, "no cluster has failed")
    outcome.composite_ready = available and not missing_secrets


def short_of(reports: list[ClusterReport]) -> list[ClusterReport]:
    """The targets that serve nothing warm: not Ready, and no previous commit to serve."""
    return [r for r in reports if r.phase != "Ready" and not r.serving_previous]


def lapsed_shortfall(reports: list[ClusterReport], available: bool) -> bool:
    """The shortfall below minReady is the TTL's doing: every target short of a copy is one
    whose copy lapsed and was evicted. Any other cause (hydrating, pending, failed, evicted
    without lapsing) keeps it False, so a lapse never masks one of those."""
    short = short_of(reports)
    return not available and bool(short) and all(r.lapsed and r.phase == "Evicted"
                                                  for r in short)


def report_lapsed(reports: list[ClusterReport], available: bool, lapsed: bool,
                  spec: CacheSpec, outcome: protocol.Outcome) -> None:
    ttl = spec.retention.ttl_after_last_use or "unset"
    gone = [r.name for r in short_of(reports) if r.lapsed and r.phase == "Evicted"]
    if lapsed:
        copies = "1 copy" if len(gone) == 1 else f"{len(gone)} copies"
        outcome.condition("Lapsed", True, reasons.Lapsed,
                          f"{copies} lapsed (no replica mounted it for "
                          f"spec.retention.ttlAfterLastUse {ttl}) and evicted, on {named(gone)}; "
                          "a replica placed on such a cluster warms it again")
        return
    if available:
        message = "no shortfall below spec.minReady"
    elif gone:
        message = (f"{len(gone)} lapsed and evicted, but the shortfall below spec.minReady has "
                   "other causes too (clusters hydrating, pending, failed or evicted without "
                   "lapsing)")
    else:
        message = "the shortfall below spec.minReady is not the TTL's doing"
    lapsed_count = sum(1 for r in reports if r.lapsed)
    if lapsed_count and not gone:
        message += f"; {lapsed_count} lapsed (unpinned) but still on their clusters"
    outcome.condition("Lapsed", False, reasons.NotLapsed, message)


def latched_resolution(request: protocol.Request, spec: CacheSpec, admitted: Admission
                       ) -> Resolution:
    """Without a grant nothing resolves: the latched result still stands for this source."""
    latched = read_resolved(request.status.get("resolved"))
    if stands(latched, spec):
        return Resolution(latched, reasons.Resolved)
    return Resolution(None, admitted.reason, admitted.message)


def compose(request: protocol.Request) -> protocol.Outcome:
    outcome = protocol.Outcome()
    spec = read_spec(request.spec)
    outcome.require(FLEET_CLUSTERS_KEY, FLEET_CLUSTERS)
    outcome.require(GRANT_KEY, grant_requirement(request, spec))
    if spec.secret:
        outcome.require(TOKEN_SECRET_KEY, protocol.Requirement(
            "v1", "Secret", match_name=spec.secret.name, namespace=request.namespace))
    for ref in filter(None, (m.secret for m in mirror.locations(spec.mirror))):
        outcome.require(mirror_secret_key(ref), protocol.Requirement(
            "v1", "Secret", match_name=ref.name, namespace=request.namespace))
    if FLEET_CLUSTERS_KEY not in request.required or GRANT_KEY not in request.required:
        objects.carry_over(request, outcome, request.observed)
        return outcome

    targets = target_clusters(spec, request.required[FLEET_CLUSTERS_KEY])
    grant = next((g for g in request.required[GRANT_KEY] if isinstance(g, dict)), None)
    if grant is None:  # compose nothing new: what exists stays as it is
        admitted = grant_not_found(request, spec)
        objects.carry_over(request, outcome, request.observed)
        resolution = latched_resolution(request, spec, admitted)
    else:
        resolution = resolve(request, spec, targets, outcome)
        admitted = admission_of(request, spec, grant, resolution.resolved, targets,
                                request.required[FLEET_CLUSTERS_KEY])
    fleet = None
    missing_secrets = missing_mirror_secrets(request, spec)
    if resolution.resolved and admitted.admitted:
        fleet = fleet_mirror(request, spec, resolution.resolved, targets)
        reports = compose_hydrations(request, spec, resolution.resolved, targets, outcome,
                                     fleet, missing_secrets)
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
           list(missing_secrets.values()))
    if fleet is not None:
        outcome.status["mirror"] = fleet.as_status()
    node_rollup.apply(spec.storage.get("tier", "Volume"),
                      {t.name: request.observed.get(hydration_key(t.name)) for t in targets},
                      outcome)
    return outcome
