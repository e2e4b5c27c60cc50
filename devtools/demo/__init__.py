"""`fleetcache demo`: a fleet of five clusters, end to end, on one machine.

The real function server composes; the real agent fetches and verifies from a local
Hugging Face–compatible hub; fleetcache.devtools.simulation stands in for Crossplane,
provider-kubernetes and the clusters. The story:

1. five FleetClusters in two regions, a ModelCacheGrant giving the namespace a budget over
   them all, and a ModelCache for a private model (token in a Secret) that selects them all
   and names the grant; it resolves once, the grant admits it, then every cluster hydrates;
2. as soon as the commit is known, a ModelDeployment of six replicas spreads over the
   fleet, serving from the source until each cluster's cache is Ready;
3. gpu-west-2 sits behind a broken mirror that flips a byte: its hydration fails with
   DigestMismatch and the remedy, the ModelCache turns Degraded, and the replica there
   stays on Source while the others switch to the cache;
4. every Ready cluster's cache is re-verified and must hold the same bytes;
5. day two (fleetcache.devtools.demo.day_two): a model update in which every shard changes, then
   pruned; one cluster over its high watermark evicts a stale cache and keeps a pinned
   one; a TTL lapse (the clock skips a day) unpins a cache that is then evicted; with
   nothing left to evict, CapacityLow holds a new copy until capacity grows;
6. a second tenant (fleetcache.devtools.demo.tenants): its grant refuses a cache past its budget
   with the numbers, then admits it once the budget grows;
7. sources beyond the Hub (fleetcache.devtools.demo.sources): a ModelCache from S3 (an S3 server on
   loopback), one from a volume filled by hand (one cluster's copy changed: it fails with
   SourceVolumeMismatch naming the file), and a Hub ModelCache through a fleet mirror that
   reads the Hub once for all five clusters;
8. rollouts in waves (fleetcache.devtools.demo.rollouts): a commit with corrupt weights halts
   at its canary with no other cluster touched, and another, with onFailure Rollback, puts
   the canary back on the previous commit; `kubectl get modelcaches` shows both (ROLLOUT);
9. the node tier (fleetcache.devtools.demo.node_tier): two more clusters with nodes warm every
   opted-in GPU node from their volume (one Hub download per cluster), a joining node
   without the Hub, a removed node drops out of the counts, and replicas read the node copy;
10. a model from an OCI registry (fleetcache.devtools.demo.oci): three more clusters, two of
    them mounting image volumes; a ModelPack artifact resolved from a docker-registry on
    loopback, published once to the fleet's own registry; two replicas mount it by digest, the
    third its cluster volume, and the origin serves the model once for the fleet.

It exits non-zero unless the fleet converges exactly like that.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import day_two, node_tier, oci, rollouts, sources, tenants
from fleetcache.devtools.demo.stage import Echo, Stage
from fleetcache.devtools.simulation import (
    Clock,
    Cluster,
    ControlPlane,
    Provider,
    RealisticTiming,
    all_text,
    function_server,
    kubectl_table,
    step,
)
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import Fault, TestHub
from fleetcache.functions import naming, quantities, read

NAMESPACE = "demo"
GRANT = "demo"
# The grant's budget: every act fits under it (tiny-chat's two commits on five clusters
# during its update, plus day two's caches on one cluster: about 12 times the 150MiB model).
GRANT_QUOTA = "4Gi"
REPO = "fleetcache-demo/tiny-chat"
CLUSTERS = (("gpu-east-1", "us-east"), ("gpu-east-2", "us-east"), ("gpu-east-3", "us-east"),
            ("gpu-west-1", "us-west"), ("gpu-west-2", "us-west"))
BROKEN_MIRROR_CLUSTER = "gpu-west-2"
REPLICAS = 6


@dataclass(frozen=True)
class Pace:
    model_bytes: int
    deadline: float
    pause: float


# Deadlines bound the whole story (every act) against a hang, not for speed: they hold on a
# loaded machine (the fast pace runs in make test beside another xdist worker; at a load of
# 8-10 on 2 cores it took 270 s to reach its fifth act). The pause between rounds is short:
# a round of the whole fleet's reconciles already gives the agents time to move (a longer
# one was most of the full demo's wall time).
FULL = Pace(model_bytes=150 * 2**20, deadline=600.0, pause=0.1)
REALISTIC_SECONDS_PER_ROUND = 5.0
FAST = Pace(model_bytes=12 * 2**20, deadline=480.0, pause=0.1)


# --- what the platform team and the tenant apply --------------------------------------------


def fleet_clusters() -> list[dict]:
    return [{"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
             "metadata": {"name": name, "labels": {"region": region, "gpu": "h100",
                                                   "fleetcache.dev/tier": "serving"}},
             "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                              "name": f"{name}-kubeconfig"},
                      "cache": {"storageClassName": "fast-rwx"}}}
            for name, region in CLUSTERS]


def model_cache_grant() -> dict:
    """The platform team's grant to the demo namespace: the whole fleet, pinning allowed."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": GRANT, "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterSelector": {
                         "matchLabels": {"fleetcache.dev/tier": "serving"}}},
                     "quota": {"bytes": GRANT_QUOTA}, "allowPinned": True}}


def model_cache(endpoint: str, revision: str = "main") -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "tiny-chat", "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": GRANT},
                     "source": {"huggingFace": {"repo": REPO, "revision": revision,
                                                "endpoint": endpoint,
                                                "tokenSecretRef": {"name": "hf-token"}},
                                "allowPatterns": ["*.safetensors", "*.json"]},
                     "placement": {"clusterSelector": {
                         "matchLabels": {"fleetcache.dev/tier": "serving"}}},
                     "rollout": {"maxConcurrent": 10}}}


def model_deployment() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "tiny-chat", "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": "tiny-chat"}, "replicas": REPLICAS,
                     "maxReplicasPerCluster": 2,
                     "placement": {"clusterSelector": {
                         "matchLabels": {"fleetcache.dev/tier": "serving"}}},
                     "engine": {"image": "vllm/vllm-openai:v0.11.0",
                                "args": ["--model=$(FLEETCACHE_MODEL)",
                                         "--revision=$(FLEETCACHE_MODEL_REVISION)"]}}}


def token_secret(token: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "hf-token", "namespace": NAMESPACE},
            "data": {"HF_TOKEN": base64.b64encode(token.encode()).decode()}}


# --- what kubectl get would print ----------------------------------------------------------


def hydration_rows(control: ControlPlane) -> list[list[str]]:
    rows = [["CLUSTER", "PHASE", "PROGRESS", "REASON"]]
    for xr in sorted(control.of_kind("ModelCacheHydration"), key=lambda x: x["spec"]["clusterName"]):
        status = xr.get("status", {})
        rows.append([xr["spec"]["clusterName"], status.get("phase", ""),
                     f"{read.get_path(status, 'progress.percent', 0)}%", status.get("reason", "")])
    return rows


def replica_rows(control: ControlPlane) -> list[list[str]]:
    rows = [["REPLICA", "CLUSTER", "DELIVERY", "PHASE"]]
    for xr in sorted(control.of_kind("ModelReplica"), key=lambda x: x["spec"]["replica"]):
        rows.append([str(xr["spec"]["replica"]), xr["spec"]["clusterName"],
                     xr["spec"]["delivery"], xr.get("status", {}).get("phase", "")])
    return rows


# --- when a composite reconciles -------------------------------------------------------------


POLL_SECONDS = 2.0  # Crossplane's poll interval (1 min), compressed like the agents' periods


@dataclass(frozen=True)
class Render:
    """A composite's last function run: the input it saw and what it returned."""

    inputs: str  # the composite, its observed resources and the skipped clock, as JSON
    requirements: tuple  # what each function call asked for (fnv1.Requirements)
    required: str  # what answered those requirements, as JSON
    rendered: str  # the rendered output, as JSON
    at: float  # time.monotonic() of the run


class Recorder:
    """The function stub, keeping what each call required."""

    def __init__(self, stub: grpcv1.FunctionRunnerServiceStub):
        self.stub = stub
        self.requirements: list[fnv1.Requirements] = []

    def RunFunction(self, request, timeout: float):  # noqa: N802 - the gRPC stub's name
        response = self.stub.RunFunction(request, timeout=timeout)
        self.requirements.append(response.requirements)
        return response


class Watch:
    """Crossplane runs a composite's functions when the composite, a resource it composed or
    one it requires changes (its watches), and otherwise once per poll interval. The
    simulation's rounds reconcile every composite every round (nine in ten of those runs
    changed nothing); composers are pure (time only through the clock), so a run whose
    input is the last run's returns that run's render without calling the functions."""

    def __init__(self, stub: grpcv1.FunctionRunnerServiceStub, clock: Clock):
        self.stub, self.clock = stub, clock
        self.last: dict[tuple[str, str, str], Render] = {}

    def __call__(self, composite: dict, composition: dict, observed: list[dict],
                 required: list[dict]) -> tuple[rendering.Rendered, bool]:
        """The render, and whether the functions ran (False: the last render, unchanged)."""
        meta = composite.get("metadata", {})
        key = (composite.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))
        inputs = json.dumps([composite, observed, self.clock.skipped.total_seconds()],
                            sort_keys=True, default=str)
        last, now = self.last.get(key), time.monotonic()
        if last is not None and last.inputs == inputs and now - last.at < POLL_SECONDS \
                and last.required == answered(last.requirements, required):
            return rendering.Rendered(**json.loads(last.rendered)), False
        recorder = Recorder(self.stub)
        rendered = rendering.run_pipeline(recorder, composite, composition, observed, required,
                                          clock=self.clock.now)
        requirements = tuple(recorder.requirements)
        self.last[key] = Render(inputs, requirements, answered(requirements, required),
                                json.dumps(asdict(rendered), default=str), now)
        return rendered, True


def answered(requirements: tuple, required: list[dict]) -> str:
    """The resources that answer each requirement, as JSON (what a watch on them sees)."""
    return json.dumps([rendering.answer_requirements(each, required) for each in requirements],
                      sort_keys=True, default=str)


# --- the story ------------------------------------------------------------------------------


def tiny_chat(control: ControlPlane) -> dict:
    """The story's ModelCache (day two adds others)."""
    return control.xrs.get(("ModelCache", NAMESPACE, "tiny-chat"), {})


def expected_problems(control: ControlPlane, token: str) -> list[str]:
    """What differs from the story's ending; [] when the fleet converged as it should."""
    problems = []
    phases = {x["spec"]["clusterName"]: x.get("status", {}) for x in
              control.of_kind("ModelCacheHydration")}
    for name, _ in CLUSTERS:
        status = phases.get(name, {})
        want = "Failed" if name == BROKEN_MIRROR_CLUSTER else "Ready"
        if status.get("phase") != want:
            problems.append(f"{name}: hydration {status.get('phase')} ({status.get('reason')}), "
                            f"expected {want}")
    broken = phases.get(BROKEN_MIRROR_CLUSTER, {})
    if broken.get("phase") == "Failed" and broken.get("reason") != "DigestMismatch":
        problems.append(f"{BROKEN_MIRROR_CLUSTER}: failed with {broken.get('reason')}, "
                        "expected DigestMismatch")
    if read.condition_of(tiny_chat(control), "Degraded").get("reason") != "HydrationFailed":
        problems.append("the ModelCache is not Degraded with HydrationFailed")
    replicas = control.of_kind("ModelReplica")
    if len(replicas) != REPLICAS:
        problems.append(f"{len(replicas)} ModelReplicas, expected {REPLICAS}")
    for replica in replicas:
        cluster, delivery = replica["spec"]["clusterName"], replica["spec"]["delivery"]
        want = "Source" if cluster == BROKEN_MIRROR_CLUSTER else "Cache"
        if delivery != want or replica.get("status", {}).get("phase") != "Ready":
            problems.append(f"replica {replica['spec']['replica']} on {cluster}: {delivery} "
                            f"{replica.get('status', {}).get('phase')}, expected {want} Ready")
    if token in all_text(control.xrs.values()):
        problems.append("the token appears in a composite's spec or status")
    return problems + grant_problems(control)


def grant_problems(control: ControlPlane) -> list[str]:
    """The grant's figures against a hand count: tiny-chat's one content at its resolved
    size on each of the five clusters holding a hydration of it (the failed one included),
    used and projected alike, within the budget."""
    grant = control.xrs.get(("ModelCacheGrant", NAMESPACE, GRANT), {})
    status = grant.get("status", {})
    counted = read.as_int(read.get_path(tiny_chat(control), "status.resolved.bytes")) * len(CLUSTERS)
    figures = (status.get("usedBytes"), status.get("projectedBytes"),
               read.condition_of(grant, "OverQuota").get("status"))
    if figures != (counted, counted, "False"):
        return [f"ModelCacheGrant {GRANT}: used, projected, OverQuota {figures}, expected "
                f"{(counted, counted, 'False')} by hand"]
    return []


def verify_caches(clusters: dict[str, Cluster], commit: str, out: Echo) -> list[str]:
    """Re-hash every Ready cluster's cache with `fleetcache-agent verify`, the clusters at
    once (as each cluster would, on its own machine); all must agree."""
    digests, problems, running = {}, [], {}
    for name, cluster in clusters.items():
        if name == BROKEN_MIRROR_CLUSTER:
            continue
        dest = cluster.volume_dir(NAMESPACE, naming.cache_volume_name("tiny-chat"))
        running[name] = subprocess.Popen(
            [sys.executable, "-c", "from fleetcache.agent.cli import main; main()", "verify",
             "--dest", str(dest), "--repo", REPO, "--revision", commit,
             "--termination-log", str(cluster.root / "verify-termination-log")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, process in running.items():
        try:
            stdout, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
        if process.returncode != 0:
            problems.append(f"{name}: verify exited {process.returncode}: {stderr[-300:]}")
            continue
        report = json.loads(stdout)
        digests[name] = report.get("manifestDigest")
        out(f"  {name}: {report.get('files')} files re-hashed, manifest {str(digests[name])[:16]}")
    if len(set(digests.values())) > 1:
        problems.append(f"the Ready clusters disagree on the bytes: {digests}")
    return problems


def run(repo_root: Path, *, fast: bool = False, out: Echo = print,
        on_composite: Callable[[dict], None] | None = None, workdir: Path | None = None,
        realistic_timing: bool = False) -> int:
    """Play the fleet until it converges; 0 when it ends as the story says, else 1.

    `on_composite` sees every composite of every act after each reconcile that ran its
    functions (the Argo CD health checks and the printer-column test read those).
    `realistic_timing`: provider-kubernetes reconciles at its own pace on a compressed clock
    of REALISTIC_SECONDS_PER_ROUND a round (design/provider-timing.md), and act one says how
    many rounds and simulated seconds it took; the deadlines grow tenfold."""
    pace = FAST if fast else FULL
    if realistic_timing:
        pace = Pace(pace.model_bytes, pace.deadline * 10, pace.pause)
    started = time.monotonic()
    token = "hf_" + secrets.token_hex(16)
    compositions, schemas = rendering.repo_definitions(repo_root)
    model = make_model(pace.model_bytes, shards=4, seed=7)
    clock = Clock(REALISTIC_SECONDS_PER_ROUND if realistic_timing else None)
    timing = RealisticTiming(clock) if realistic_timing else None
    with tempfile.TemporaryDirectory(prefix="fleetcache-demo-", dir=workdir) as tmp, \
            TestHub() as hub, TestHub() as broken_mirror, \
            function_server(clock) as address, rendering.channel_to(address) as channel:
        for each in (hub, broken_mirror):
            each.add_repo(REPO, dict(model), private=True)
            each.add_token(token, (REPO,))
        broken_mirror.inject(Fault("corrupt", path="/lfs/*", host="cdn", times=None,
                                   offset=4096))
        watch = Watch(grpcv1.FunctionRunnerServiceStub(channel), clock)

        def pipeline(composite: dict, composition: dict, observed: list[dict],
                     required: list[dict]) -> rendering.Rendered:
            rendered, changed = watch(composite, composition, observed, required)
            if changed and on_composite is not None and not rendered.fatal:
                on_composite(copy.deepcopy(rendered.composite))
            return rendered

        clusters = {name: Cluster(name, Path(tmp) / name,
                                  broken_mirror.endpoint if name == BROKEN_MIRROR_CLUSTER
                                  else None, clock if timing else None)
                    for name, _ in CLUSTERS}
        control = ControlPlane(pipeline, compositions, schemas,
                               Provider(clusters, lambda: control.secrets(), timing))
        out(f"fleetcache demo: function server {address}, hub {hub.endpoint} "
            f"({REPO}, {quantities.human_bytes(sum(c.size for c in model.values()))}, private), "
            f"{BROKEN_MIRROR_CLUSTER} behind a broken mirror\n")
        for fleet_cluster in fleet_clusters():
            control.apply(fleet_cluster)
        control.apply(token_secret(token))
        control.apply(model_cache_grant())
        control.apply(model_cache(hub.endpoint))
        out(f"applied: 5 FleetClusters (us-east: 3, us-west: 2), Secret hf-token, "
            f"ModelCacheGrant {GRANT} ({GRANT_QUOTA} over the fleet), ModelCache tiny-chat")
        try:
            converged = play(control, clusters, pace, started, token, out, clock)
            commit = read.get_path(tiny_chat(control), "status.resolved.commit", "")
            report(control, out)
            out("\nEvery Ready cluster re-verifies its cache (fleetcache-agent verify):")
            problems = expected_problems(control, token) + verify_caches(clusters, commit, out)
            if converged and not problems:
                stage = Stage(
                    control, clusters, (hub, broken_mirror), clock, NAMESPACE, "tiny-chat", REPO,
                    pace.model_bytes, tuple(n for n, _ in CLUSTERS if n != BROKEN_MIRROR_CLUSTER),
                    pace.pause, started + pace.deadline, out)
                problems = day_two.play(
                    stage, lambda revision: model_cache(hub.endpoint, revision), hub.endpoint)
                if not problems:
                    problems = tenants.play(stage, hub.endpoint)
                if not problems:
                    problems = sources.play(stage, hub, out)
                if not problems:
                    commit = read.get_path(tiny_chat(control), "status.resolved.commit", "")
                    out("\nEvery Ready cluster re-verifies the updated cache:")
                    problems = verify_caches(clusters, commit, out)
                if not problems:
                    problems = rollouts.play(stage, hub.endpoint)
                if not problems:
                    problems = node_tier.play(stage, Path(tmp) / "node-tier")
                if not problems:
                    problems = oci.play(stage, Path(tmp) / "oci")
        finally:
            for cluster in clusters.values():
                cluster.stop()
    elapsed = time.monotonic() - started
    if converged and not problems:
        out(f"\ndemo OK in {elapsed:.0f}s: 4 clusters serve identical verified bytes from "
            f"their caches; {BROKEN_MIRROR_CLUSTER} failed with DigestMismatch and its replica "
            "serves from the source; the token never appeared in any status; a full-weight "
            "update fit and freed the old commit; a stale cache was evicted, a pinned one "
            "kept, a lapsed one evicted and reported Lapsed, CapacityLow held a new copy until "
            "capacity grew; team-b's grant refused a cache past its budget, then admitted it; "
            "an S3 cache and a hand-filled volume converged verified (a changed file named), "
            "and a fleet mirror read the Hub once for five clusters; a corrupt commit halted "
            "at its canary and another rolled the canary back; "
            "every opted-in GPU node was warmed from its cluster's volume (one Hub download per "
            "cluster), a joining node without the Hub, and replicas read the node copy; the engine "
            "image, pinned to one digest, was kept on every opted-in node, the joining one too, and "
            "no replica pod pulled it; an OCI "
            "artifact was published once to the fleet's registry, two clusters mounted it as an "
            "image volume and one its volume, the origin serving the model once")
        return 0
    out(f"\ndemo FAILED after {elapsed:.0f}s" + ("" if converged else " (did not converge)"))
    for problem in problems:
        out(f"  - {problem}")
    return 1


def play(control: ControlPlane, clusters: dict[str, Cluster], pace: Pace, started: float,
         token: str, out: Echo, clock: Clock) -> bool:
    """Reconcile rounds until the story's ending holds, printing what changed."""
    deployment_applied = False
    last_view: list[str] = []
    round_number = 0
    while time.monotonic() - started < pace.deadline:
        round_number += 1
        clock.tick()
        now = step(control, clusters.values())
        cache = tiny_chat(control)
        if not deployment_applied and read.get_path(cache, "status.resolved.commit"):
            control.apply(model_deployment())
            deployment_applied = True
            out(f"\nround {round_number}: {read.condition_of(cache, 'Resolved').get('message')}; "
                f"applied ModelDeployment tiny-chat ({REPLICAS} replicas)")
        view = kubectl_table(hydration_rows(control))
        if len(view) == 1:
            progressing = read.condition_of(cache, "Progressing")
            view = [f"  ModelCache tiny-chat: {progressing.get('reason')}: "
                    f"{progressing.get('message')}"]
        if control.of_kind("ModelReplica"):
            view += [""] + kubectl_table(replica_rows(control))
        if view != last_view:
            out(f"\nround {round_number} ({now - started:.1f}s)")
            for line in view:
                out(line)
            last_view = view
        for event in control.events[-3:]:
            out(f"  event: {event.kind} {event.name}: {event.message}")
        control.events.clear()
        busy = any(c.running_pods() for c in clusters.values())
        if deployment_applied and not busy and not expected_problems(control, token):
            if clock.seconds_per_round:
                out(f"\nact one converged in {round_number} rounds, {clock.seconds():.0f} "
                    "simulated seconds (realistic timing)")
            return True
        time.sleep(pace.pause)
    return False


def report(control: ControlPlane, out: Echo) -> None:
    cache = tiny_chat(control)
    status = cache.get("status", {})
    out("\n$ kubectl get modelcache tiny-chat")
    for line in kubectl_table([["NAME", "CLUSTERS", "FAILED", "SIZE", "COMMIT", "PROGRESS", "REASON"],
                       ["tiny-chat", status.get("summary", ""), str(status.get("failedClusters", 0)),
                        status.get("sizeHuman", ""), status.get("commitShort", ""),
                        str(status.get("progressPercent", 0)), status.get("reason", "")]]):
        out(line)
    degraded = read.condition_of(cache, "Degraded")
    out(f"  Degraded={degraded.get('status')} {degraded.get('reason')}: {degraded.get('message')}")
    admitted = read.condition_of(cache, "Admitted")
    out(f"  Admitted={admitted.get('status')} {admitted.get('reason')}: {admitted.get('message')}")
    grant = control.xrs.get(("ModelCacheGrant", NAMESPACE, GRANT), {})
    figures = grant.get("status", {})
    out(f"\n$ kubectl get modelcachegrant {GRANT}")
    for line in kubectl_table([["NAME", "BUDGET", "USED", "PROJECTED", "CACHES", "OVERQUOTA"],
                               [GRANT, figures.get("budgetHuman", ""),
                                figures.get("usedHuman", ""), figures.get("projectedHuman", ""),
                                figures.get("cachesSummary", ""),
                                read.condition_of(grant, "OverQuota").get("status", "")]]):
        out(line)
    deployments = control.of_kind("ModelDeployment")
    if deployments:
        replicas = deployments[0].get("status", {}).get("replicas", {})
        out("\n$ kubectl get modeldeployment tiny-chat")
        for line in kubectl_table([["NAME", "REPLICAS", "CACHE", "SOURCE", "WAITING", "FAILED", "REASON"],
                           ["tiny-chat", deployments[0].get("status", {}).get("summary", ""),
                            str(replicas.get("cache", 0)), str(replicas.get("source", 0)),
                            str(replicas.get("waiting", 0)), str(replicas.get("failed", 0)),
                            deployments[0].get("status", {}).get("reason", "")]]):
            out(line)
    failed = [x for x in control.of_kind("ModelCacheHydration")
              if x.get("status", {}).get("phase") == "Failed"]
    for xr in failed:
        out(f"\n{xr['spec']['clusterName']}: {xr['status']['reason']}: {xr['status']['message']}")
