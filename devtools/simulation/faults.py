"""Faults at random over a tiny simulated fleet, checked by invariants after every round (the
way FoundationDB's simulator and Jepsen earn trust; design/simulation.md, "Faults at random").

A seed draws a `Plan`: the fleet (two or three clusters, one grant, one ModelCache of a small
repo in a test hub, one ModelDeployment) and a schedule of faults at random rounds: agents
SIGKILLed at any point, objects deleted on a cluster or on the control plane, clusters
unreachable, API servers refusing writes, the hub failing, clocks skipping, capacity
shrinking, specs edited and deleted, replicas scaled, caches deleted while mounted. `play`
runs it: the real composers (in process, on the simulation's clock), the simulated
Crossplane, provider-kubernetes and clusters, a real `fleetcache-agent` process per Job
attempt; `invariants.Checker` after every round; then the faults stop, and the fleet must
settle within `RECOVERY_ROUNDS` (Ready, or a documented failure) and stay settled.

    python -m fleetcache.devtools.simulation.faults --seed 1234          # one seed, told
    python -m fleetcache.devtools.simulation.faults --seeds 0:1000 --jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import multiprocessing
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache import messages
from fleetcache.apis import xrds
from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import invariants
from fleetcache.devtools.simulation.api import Key
from fleetcache.devtools.simulation.clock import Clock
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.devtools.simulation.control_plane import ControlPlane, step
from fleetcache.devtools.simulation.deletion import BACKGROUND, FOREGROUND, deleting
from fleetcache.devtools.simulation.jobs import Pod
from fleetcache.devtools.simulation.provider import Provider
from fleetcache.devtools.testhub.content import make_model
from fleetcache.devtools.testhub.server import Fault as HubFault
from fleetcache.devtools.testhub.server import TestHub
from fleetcache.functions import naming, read, server

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE, CACHE, DEPLOYMENT, GRANT = "ml", "chat", "chat", "team"
REPO = "fleetcache-test/faults"
REVISIONS = ("v1", "v2", "main")  # main names v2's commit
CLUSTERS = ("gpu-a", "gpu-b", "gpu-c")
MODEL_BYTES = 48 * 1024  # seven files: a shard, an index, config and tokenizer JSON

SECONDS_PER_ROUND = 10.0  # of the simulation's clock; Jobs' TTL is 60 s, so 6 rounds
POLL_SECONDS = 60.0  # Crossplane's --poll-interval: a composite is reconciled at least this often
FAULT_ROUNDS = 24  # faults happen in rounds 1..FAULT_ROUNDS
RECOVERY_ROUNDS = 60  # then the fleet must settle within this many rounds
QUIET_ROUNDS = 7  # settled: nothing changed for this many rounds (more than one poll interval)
HOLD_ROUNDS = 6  # and nothing changes for this many more
AGENT_WAIT = 20.0  # wall seconds a round waits for the agents it started
# Skipped once the faults stop, to half a minute past an hour: afterRemoval and TTLs run out,
# and settling (at most 66 rounds, 660 s) sees no hour roll over (lastUsedTime is per hour).
TIMERS = datetime.timedelta(hours=2)

# The faults a Plan draws from, each with what it does (design/simulation.md has the table).
KILL_AGENT = "kill-agent"  # SIGKILL a running agent up to a second into its attempt
DELETE_REMOTE = "delete-remote"  # delete an object on a cluster (a PVC a pod uses turns Terminating)
DELETE_OBJECT = "delete-object"  # delete a composed resource on the control plane
UNREACHABLE = "unreachable"  # provider-kubernetes cannot reach a cluster for `rounds`
REFUSE_WRITES = "refuse-writes"  # the control plane's API server refuses writes for `rounds`
QUOTA = "quota"  # a cluster's API server refuses creates in the namespace (a ResourceQuota)
HUB_FAILING = "hub-failing"  # the hub answers 503, resets or 429 for `rounds`
CLOCK_SKIP = "clock-skip"  # the clock jumps ahead `minutes`
CAPACITY = "capacity"  # a FleetCluster's spec.cache.capacity changes (mostly shrinks)
REVISION = "revision"  # the ModelCache's revision changes
PLACEMENT = "placement"  # the ModelCache's clusterNames change
PIN = "pin"  # the ModelCache's spec.retention.pinned flips
SCALE = "scale"  # the ModelDeployment's replicas change
DELETE_CACHE = "delete-cache"  # the ModelCache is deleted (refused while mounted), or created again
DELETE_DEPLOYMENT = "delete-deployment"  # the ModelDeployment is deleted, or created again
KINDS = (KILL_AGENT, DELETE_REMOTE, DELETE_OBJECT, UNREACHABLE, REFUSE_WRITES, QUOTA,
         HUB_FAILING, CLOCK_SKIP, CAPACITY, REVISION, PLACEMENT, PIN, SCALE, DELETE_CACHE,
         DELETE_DEPLOYMENT)
WINDOWS = (UNREACHABLE, REFUSE_WRITES, QUOTA, HUB_FAILING)  # faults that last `rounds`


def reproducer(seed: int) -> str:
    return f".venv/bin/python -m fleetcache.devtools.simulation.faults --seed {seed}"


# --- what a seed draws ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One fault: when, what, and numbers the injector turns into a target when it fires
    (`pick` indexes the sorted candidates then, so a schedule never names what may not exist)."""

    round: int
    kind: str
    pick: int = 0
    rounds: int = 0  # how long a window lasts
    value: float = 0.0  # in [0, 1): a kill's delay in seconds, a clock skip's share of 3 hours
    foreground: bool = False

    def __str__(self) -> str:
        extra = {"pick": self.pick, "rounds": self.rounds, "value": round(self.value, 3),
                 "foreground": self.foreground}
        return f"round {self.round}: {self.kind} " + " ".join(
            f"{k}={v}" for k, v in extra.items() if v)


@dataclass(frozen=True)
class Plan:
    """The fleet and the faults a seed draws."""

    seed: int
    clusters: tuple[str, ...]
    replicas: int
    per_cluster: int
    while_hydrating: str
    max_concurrent: int
    after_removal: str
    faults: tuple[Fault, ...]
    overlap: frozenset[int]  # rounds that do not wait for their agents (they run on)

    @classmethod
    def of(cls, seed: int) -> Plan:
        rng = random.Random(seed)
        clusters = CLUSTERS[:rng.choice((2, 3))]
        faults = []
        for _ in range(rng.randint(3, 10)):
            kind = rng.choice(KINDS)
            start = rng.randint(1, FAULT_ROUNDS)
            faults.append(Fault(
                start, kind, pick=rng.randrange(1000),
                rounds=min(rng.randint(1, 6), FAULT_ROUNDS + 1 - start) if kind in WINDOWS else 0,
                value=rng.random(), foreground=rng.random() < 0.3))
        return cls(seed, clusters, replicas=rng.randint(1, 3), per_cluster=rng.choice((1, 2)),
                   while_hydrating=rng.choice(("Source", "Wait")),
                   max_concurrent=rng.choice((1, 2)), after_removal=rng.choice(("0h", "1h")),
                   faults=tuple(sorted(faults, key=lambda f: (f.round, f.kind))),
                   overlap=frozenset(r for r in range(1, FAULT_ROUNDS + 1) if rng.random() < 0.2))

    def describe(self) -> list[str]:
        head = (f"seed {self.seed}: clusters {','.join(self.clusters)}, replicas {self.replicas} "
                f"(at most {self.per_cluster} per cluster, whileHydrating {self.while_hydrating}), "
                f"maxConcurrent {self.max_concurrent}, afterRemoval {self.after_removal}")
        return [head, *(str(f) for f in self.faults)]


# --- the manifests ---------------------------------------------------------------------------------


def fleet_cluster(name: str, capacity: str = "4Gi") -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"},
                     "cache": {"capacity": capacity}}}


def grant(plan: Plan, quota: int) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": GRANT, "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterNames": list(plan.clusters)}, "quota": {"bytes": str(quota)},
                     "allowPinned": True}}


def model_cache(plan: Plan, endpoint: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": GRANT},
                     "source": {"huggingFace": {"repo": REPO, "revision": "v1", "endpoint": endpoint}},
                     "placement": {"clusterNames": list(plan.clusters)},
                     "storage": {"size": "1Gi"},
                     "rollout": {"maxConcurrent": plan.max_concurrent},
                     "retention": {"pinned": False, "afterRemoval": plan.after_removal},
                     "job": {"backoffLimit": 2, "ttlSecondsAfterFinished": 60,
                             "activeDeadlineSeconds": 600}}}


def model_deployment(plan: Plan) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": CACHE}, "replicas": plan.replicas,
                     "maxReplicasPerCluster": plan.per_cluster,
                     "placement": {"clusterNames": list(plan.clusters)},
                     "delivery": {"whileHydrating": plan.while_hydrating},
                     "engine": {"image": "vllm/vllm-openai:v0.11.0",
                                "args": ["--model=$(FLEETCACHE_MODEL)"]}}}


# --- Crossplane calling the function, in process ----------------------------------------------------


@dataclass
class Render:
    inputs: str
    answered: str
    requirements: tuple
    rendered: str  # the Rendered as JSON: a copy each time it is reused
    at: float


class Functions:
    """Crossplane's calls to the function server: `server.run` in this process on the
    simulation's clock (the gRPC hop is the same bytes, tests/test_grpc.py), each response
    checked (`problems`: a fatal result, a message over its limit). A composite is run when it,
    what it composed or what it requires changed (Crossplane's watches, v2.4 for required
    resources), and at least every `POLL_SECONDS` of the clock; otherwise its last render
    stands, as composers are pure (time only through the clock)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.last: dict[Key, Render] = {}
        self.problems: list[str] = []
        self.requirements: list[fnv1.Requirements] = []
        self.calls = 0

    def RunFunction(self, request: fnv1.RunFunctionRequest, timeout: float  # noqa: N802 - the stub's name
                    ) -> fnv1.RunFunctionResponse:
        del timeout
        self.calls += 1
        response = server.run(request, self.clock.now())
        said = [r.message for r in response.results] + [c.message for c in response.conditions]
        for result in response.results:
            if result.severity == fnv1.SEVERITY_FATAL:
                self.problems.append(f"{request.meta.tag}: fatal result: {result.message}")
        self.problems += [f"{request.meta.tag}: a message of {len(m)} characters, over "
                          f"{messages.MESSAGE_LIMIT}" for m in said if len(m) > messages.MESSAGE_LIMIT]
        self.requirements.append(response.requirements)
        return response

    def __call__(self, composite: dict, composition: dict, observed: list[dict],
                 required: list[dict]) -> rendering.Rendered:
        meta = composite.get("metadata", {})
        key = (composite.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))
        inputs = json.dumps([composite, observed], sort_keys=True, default=str)
        last, now = self.last.get(key), self.clock.seconds()
        if last is not None and last.inputs == inputs and now - last.at < POLL_SECONDS \
                and last.answered == answered(last.requirements, required):
            return rendering.Rendered(**json.loads(last.rendered))
        self.requirements = []
        rendered = rendering.run_pipeline(self, composite, composition, observed, required,
                                          clock=self.clock.now)
        requirements = tuple(self.requirements)
        self.last[key] = Render(inputs, answered(requirements, required), requirements,
                                json.dumps(vars(rendered)), now)
        return rendered


def answered(requirements: tuple, required: list[dict]) -> str:
    return json.dumps([rendering.answer_requirements(each, required) for each in requirements],
                      sort_keys=True, default=str)


@cache
def definitions() -> tuple[dict, dict]:
    """The repository's Compositions and XRD schemas, read once per process."""
    return rendering.repo_definitions(ROOT)


# --- the fleet ---------------------------------------------------------------------------------------


@dataclass
class Fleet:
    plan: Plan
    hub: TestHub
    clock: Clock
    clusters: dict[str, Cluster]
    control: ControlPlane
    functions: Functions
    manifests: dict[str, dict]  # what the user applied last, by kind
    commits: dict[str, str]  # revision -> commit on the hub

    def all_running(self) -> list[tuple[str, Key, Pod]]:
        return [(name, key, run.pod) for name, cluster in sorted(self.clusters.items())
                for key, run in sorted(cluster.job_controller.jobs.items())
                if run.pod is not None and run.pod.process.poll() is None]


@contextlib.contextmanager
def fleet(plan: Plan, root: Path) -> Iterator[Fleet]:
    """The plan's fleet, built and with its first manifests applied; stopped on exit."""
    with TestHub() as hub:
        commits = {"v1": hub.add_repo(REPO, make_model(MODEL_BYTES, shards=1, seed=1), revision="v1"),
                   "v2": hub.add_repo(REPO, make_model(MODEL_BYTES, shards=1, seed=2), revision="v2")}
        hub.repos[REPO].refs["main"] = commits["main"] = commits["v2"]
        clock = Clock(seconds_per_round=SECONDS_PER_ROUND)
        clusters = {name: Cluster(name, root / name, clock=clock) for name in plan.clusters}
        functions = Functions(clock)
        compositions, schemas = definitions()
        control = ControlPlane(functions, compositions, schemas,
                               Provider(clusters, lambda: control.secrets()))
        size = sum(f.content.size for f in hub.repos[REPO].commits[commits["v1"]].values())
        played = Fleet(plan, hub, clock, clusters, control, functions, {}, commits)
        manifests = [*(fleet_cluster(name) for name in plan.clusters),
                     grant(plan, 2 * size * len(plan.clusters)), model_cache(plan, hub.endpoint),
                     model_deployment(plan)]
        for manifest in manifests:
            user_apply(played, manifest)
        try:
            yield played
        finally:
            for cluster in clusters.values():
                cluster.stop()


def user_apply(played: Fleet, manifest: dict) -> bool:
    """`kubectl apply` as the API server takes it: refused (False) when the XRD's schema or a
    CEL rule (transition rules included) refuses the change."""
    key = (manifest["kind"], manifest["metadata"].get("namespace", ""), manifest["metadata"]["name"])
    current = played.control.xrs.get(key)
    if current is not None and deleting(current):
        return False
    admitted = xrds.admit(copy.deepcopy(manifest), played.control.schemas)
    if xrds.violations(admitted, current):
        return False
    played.control.apply(manifest)
    played.manifests[manifest["kind"] if manifest["kind"] != "FleetCluster"
                     else f"FleetCluster/{key[2]}"] = copy.deepcopy(manifest)
    return True


# --- the faults ----------------------------------------------------------------------------------------


@dataclass
class Injector:
    """Turns each `Fault` into what it does to the fleet, and undoes the windows when they end."""

    fleet: Fleet
    kill: Fault | None = None  # armed: the next running agent is killed `value` seconds in
    kill_seen: float = 0.0
    writes_refused_until: int = -1
    undo: list[tuple[int, Callable[[], None]]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def heal(self, now_round: int, everything: bool = False) -> None:
        for entry in list(self.undo):
            if everything or entry[0] <= now_round:
                entry[1]()
                self.undo.remove(entry)
        if everything:
            self.writes_refused_until = -1
            self.kill = None

    def writes_refused(self, now_round: int) -> bool:
        return now_round < self.writes_refused_until

    def inject(self, fault: Fault, now_round: int) -> None:
        handler = getattr(self, fault.kind.replace("-", "_"))
        if fault.kind in (REVISION, PLACEMENT, PIN, SCALE, DELETE_CACHE, DELETE_DEPLOYMENT,
                          CAPACITY) and self.writes_refused(now_round):
            self.log.append(f"{fault}: refused (the API server refuses writes)")
            return
        self.log.append(f"{fault}: {handler(fault) or 'done'}")

    # -- infrastructure --------------------------------------------------------------------------
    def kill_agent(self, fault: Fault) -> str:
        self.kill, self.kill_seen = fault, 0.0
        return "armed"

    def arm_or_fire(self) -> None:
        """Called while a round waits for its agents: SIGKILL the armed victim once it has run
        for the fault's delay (up to one second), at whatever point the agent then is."""
        if self.kill is None:
            return
        running = self.fleet.all_running()
        if not running:
            return
        now = time.monotonic()
        if not self.kill_seen:
            self.kill_seen = now
        if now - self.kill_seen >= self.kill.value:
            cluster, key, pod = running[self.kill.pick % len(running)]
            pod.process.send_signal(signal.SIGKILL)
            self.log.append(f"  killed {cluster}/{key[2]} ({pod.name}) after "
                            f"{now - self.kill_seen:.2f}s")
            self.kill = None

    def delete_remote(self, fault: Fault) -> str:
        name = self.fleet.plan.clusters[fault.pick % len(self.fleet.plan.clusters)]
        cluster = self.fleet.clusters[name]
        candidates = sorted(k for k in cluster.objects if k[0] not in ("Namespace", "ResourceQuota"))
        if not candidates:
            return f"nothing to delete on {name}"
        key = candidates[(fault.pick // 7) % len(candidates)]
        cluster.delete(key)
        return f"deleted {key[0]} {key[1]}/{key[2]} on {name}"

    def delete_object(self, fault: Fault) -> str:
        control = self.fleet.control
        candidates = [key for key in control.api.keys()
                      if key[0] in ("Object", "Usage", "ModelCacheHydration", "ModelReplica")
                      and not deleting(control.api.get(key) or {})]
        if not candidates:
            return "nothing to delete"
        key = candidates[fault.pick % len(candidates)]
        refused = control.delete(key, FOREGROUND if fault.foreground else BACKGROUND)
        return f"deleted {key[0]} {key[2]}" + (f": refused: {refused}" if refused else "")

    def unreachable(self, fault: Fault) -> str:
        unreachable = self.fleet.control.provider.unreachable
        name = self.fleet.plan.clusters[fault.pick % len(self.fleet.plan.clusters)]
        if name in unreachable:
            return f"{name} is already unreachable"
        unreachable.add(name)
        self.undo.append((fault.round + fault.rounds, lambda: unreachable.discard(name)))
        return f"{name} unreachable for {fault.rounds} rounds"

    def refuse_writes(self, fault: Fault) -> str:
        self.writes_refused_until = max(self.writes_refused_until, fault.round + fault.rounds)
        return f"for {fault.rounds} rounds"

    def quota(self, fault: Fault) -> str:
        name = self.fleet.plan.clusters[fault.pick % len(self.fleet.plan.clusters)]
        objects = self.fleet.clusters[name].objects
        key = ("ResourceQuota", NAMESPACE, f"faults-{fault.round}")
        objects[key] = {"apiVersion": "v1", "kind": "ResourceQuota",
                        "metadata": {"name": key[2], "namespace": NAMESPACE},
                        "spec": {"hard": {"count/jobs.batch": "0", "count/deployments.apps": "0",
                                          "persistentvolumeclaims": "0", "configmaps": "0",
                                          "secrets": "0", "services": "0"}}}

        def lift() -> None:
            objects.pop(key, None)

        self.undo.append((fault.round + fault.rounds, lift))
        return f"{name} refuses creates in {NAMESPACE} for {fault.rounds} rounds"

    def hub_failing(self, fault: Fault) -> str:
        hub = self.fleet.hub
        kind = ("status-503", "reset", "status-429")[fault.pick % 3]
        if kind == "reset":
            injected = HubFault("reset", times=None)
        else:
            injected = HubFault("status", times=None, status=int(kind[-3:]),
                                retry_after="0" if kind.endswith("429") else None)
        hub.inject(injected)
        self.undo.append((fault.round + fault.rounds, lambda: hub.faults.remove(injected)))
        return f"{kind} for {fault.rounds} rounds"

    def clock_skip(self, fault: Fault) -> str:
        minutes = 1 + int(fault.value * 180)
        self.fleet.clock.advance(datetime.timedelta(minutes=minutes))
        return f"{minutes} minutes ahead"

    # -- users -----------------------------------------------------------------------------------
    def capacity(self, fault: Fault) -> str:
        name = self.fleet.plan.clusters[fault.pick % len(self.fleet.plan.clusters)]
        capacity = ("4Gi", "2Gi", str(MODEL_BYTES // 2))[fault.pick // 7 % 3]
        manifest = copy.deepcopy(self.fleet.manifests[f"FleetCluster/{name}"])
        manifest["spec"]["cache"]["capacity"] = capacity
        return f"{name} capacity {capacity}" + ("" if user_apply(self.fleet, manifest) else ": refused")

    def edit_cache(self, change: Callable[[dict], str]) -> str:
        if ("ModelCache", NAMESPACE, CACHE) not in self.fleet.control.xrs:
            return "no ModelCache to edit"
        manifest = copy.deepcopy(self.fleet.manifests["ModelCache"])
        said = change(manifest["spec"])
        return said + ("" if user_apply(self.fleet, manifest) else ": refused")

    def revision(self, fault: Fault) -> str:
        def change(spec: dict) -> str:
            current = spec["source"]["huggingFace"]["revision"]
            others = [r for r in REVISIONS if r != current]
            spec["source"]["huggingFace"]["revision"] = others[fault.pick % len(others)]
            return f"revision {current} -> {spec['source']['huggingFace']['revision']}"
        return self.edit_cache(change)

    def placement(self, fault: Fault) -> str:
        clusters = self.fleet.plan.clusters
        subsets = [[c for i, c in enumerate(clusters) if mask >> i & 1]
                   for mask in range(1, 2 ** len(clusters))]
        chosen = subsets[fault.pick % len(subsets)]

        def change(spec: dict) -> str:
            spec["placement"]["clusterNames"] = chosen
            return f"placement {','.join(chosen)}"
        return self.edit_cache(change)

    def pin(self, fault: Fault) -> str:
        def change(spec: dict) -> str:
            spec["retention"]["pinned"] = not spec["retention"]["pinned"]
            return f"pinned {spec['retention']['pinned']}"
        return self.edit_cache(change)

    def scale(self, fault: Fault) -> str:
        if ("ModelDeployment", NAMESPACE, DEPLOYMENT) not in self.fleet.control.xrs:
            return "no ModelDeployment to scale"
        manifest = copy.deepcopy(self.fleet.manifests["ModelDeployment"])
        manifest["spec"]["replicas"] = fault.pick % 4
        return f"replicas {fault.pick % 4}" + ("" if user_apply(self.fleet, manifest) else ": refused")

    def toggle(self, kind: str, fault: Fault) -> str:
        key = (kind, NAMESPACE, CACHE if kind == "ModelCache" else DEPLOYMENT)
        if key not in self.fleet.control.xrs:
            return "created again" if user_apply(self.fleet, self.fleet.manifests[kind]) else \
                "created again: refused"
        propagation = FOREGROUND if fault.foreground else BACKGROUND
        refused = self.fleet.control.delete(key, propagation)
        return f"deleted ({propagation})" + (f": refused: {refused}" if refused else "")

    def delete_cache(self, fault: Fault) -> str:
        return self.toggle("ModelCache", fault)

    def delete_deployment(self, fault: Fault) -> str:
        return self.toggle("ModelDeployment", fault)


# --- playing a seed ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What a seed's run found: every violation with its round, the rounds it took, the
    function calls made, and the faults as they fired."""

    seed: int
    violations: list[str] = field(default_factory=list)
    rounds: int = 0
    calls: int = 0
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"seed {self.seed}: {len(self.violations)} violation(s) in {self.rounds} rounds"
                 f"; reproduce: {reproducer(self.seed)}",
                 *self.violations[:20], "faults:", *self.log]
        return "\n".join(lines)


class Play:
    """One seed's rounds: faults, a step of the control plane and the clusters, the agents
    given their time, the invariants."""

    def __init__(self, played: Fleet, outcome: Outcome) -> None:
        self.fleet = played
        self.outcome = outcome
        self.injector = Injector(played)
        self.checker = invariants.Checker(played.hub.repos[REPO])
        self.round = 0

    def step(self, faults: tuple[Fault, ...] = (), wait: bool = True) -> None:
        self.round += 1
        self.injector.heal(self.round)
        for fault in faults:
            self.injector.inject(fault, self.round)
        self.fleet.clock.tick()
        if self.injector.writes_refused(self.round):
            now = time.monotonic()
            for cluster in self.fleet.clusters.values():
                cluster.tick(now)
        else:
            step(self.fleet.control, self.fleet.clusters.values())
        self.agents(wait)
        problems, self.fleet.functions.problems = self.fleet.functions.problems, []
        self.violated(self.checker.after_round(self.fleet.control, self.fleet.clusters, problems))

    def agents(self, wait: bool) -> None:
        """Until the agents started exit (or a short while, on an overlapping round), firing an
        armed kill on the way."""
        started = time.monotonic()
        limit = AGENT_WAIT if wait else 0.05
        while True:
            self.injector.arm_or_fire()
            if not self.fleet.all_running() or time.monotonic() - started > limit:
                return
            time.sleep(0.005)

    def violated(self, found: list[invariants.Violation]) -> None:
        self.outcome.violations += [f"round {self.round}: {v}" for v in found]

    def fingerprint(self) -> dict[str, str]:
        """What settling compares, item by item: every composite and control-plane object,
        every object on every cluster, and whether an agent runs."""
        control = self.fleet.control
        state: dict[str, object] = {f"{k[0]}/{k[2]}": v
                                    for k, v in [*control.xrs.items(), *control.others.items()]}
        state.update({f"{name}: {k[0]}/{k[2]}": v for name, cluster in self.fleet.clusters.items()
                      for k, v in cluster.objects.items()})
        state["agents"] = [f"{c}/{k[2]}" for c, k, _ in self.fleet.all_running()]
        return {k: json.dumps(v, sort_keys=True, default=str) for k, v in state.items()}

    def settle(self) -> None:
        """After the faults: every window healed, timers run out, then rounds until nothing
        changed for QUIET_ROUNDS, within RECOVERY_ROUNDS, and nothing changes for HOLD_ROUNDS."""
        self.injector.heal(self.round, everything=True)
        clock = self.fleet.clock
        later = clock.now() + TIMERS
        clock.advance(later.replace(minute=0, second=30, microsecond=0) + datetime.timedelta(hours=1)
                      - clock.now())
        quiet, settled_at = 0, None
        last: dict[str, str] = {}
        for _ in range(RECOVERY_ROUNDS):
            self.step()
            now = self.fingerprint()
            quiet = quiet + 1 if now == last else 0
            last = now
            if quiet >= QUIET_ROUNDS:
                settled_at = self.round
                break
        if settled_at is None:
            self.violated([invariants.Violation(invariants.CONVERGES, (
                f"still changing {RECOVERY_ROUNDS} rounds after the faults stopped: "
                f"{changing(self.fleet)}"))])
            return
        for _ in range(HOLD_ROUNDS):
            self.step()
        now = self.fingerprint()
        if now != last:
            moved = sorted(k for k in now.keys() | last.keys() if now.get(k) != last.get(k))
            self.violated([invariants.Violation(invariants.CONVERGES, (
                f"settled at round {settled_at}, changed again by round {self.round}: "
                f"{', '.join(moved[:4])}"))])
        self.violated(invariants.deletions_complete(self.fleet.control, self.fleet.clusters))
        self.violated(invariants.settled_as_documented(self.fleet.control, self.fleet.commits))


def changing(played: Fleet) -> str:
    """What is not settled, for the violation's line: composites not Ready and agents running."""
    parts = [f"{xr['kind']}/{xr['metadata']['name']} {read.condition_of(xr, 'Ready').get('reason', '?')}"
             for xr in played.control.xrs.values() if not read.is_true(xr, "Ready")]
    parts += [f"agent {c}/{k[2]}" for c, k, _ in played.all_running()]
    return ", ".join(parts[:6]) or "statuses only"


def play(seed: int, root: Path | None = None) -> Outcome:
    """Run one seed's plan end to end; its violations, [] when every invariant held."""
    plan = Plan.of(seed)
    outcome = Outcome(seed)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix=f"faults-{seed}-", dir=root))
    try:
        with fleet(plan, workdir) as played:
            run = Play(played, outcome)
            for round_ in range(1, FAULT_ROUNDS + 1):
                run.step(tuple(f for f in plan.faults if f.round == round_),
                         wait=round_ not in plan.overlap)
            run.settle()
            outcome.rounds, outcome.calls = run.round, played.functions.calls
            outcome.log = plan.describe()[:1] + run.injector.log
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    outcome.seconds = time.monotonic() - started
    return outcome


def play_many(seeds: list[int], jobs: int, echo: Callable[[str], None] = print) -> list[Outcome]:
    """Every seed, `jobs` at a time in worker processes; each failing seed's report echoed."""
    started = time.monotonic()
    outcomes = []
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for outcome in pool.imap_unordered(play, seeds):
            outcomes.append(outcome)
            if outcome.violations:
                echo(outcome.report())
    minutes = (time.monotonic() - started) / 60
    failed = sorted(o.seed for o in outcomes if o.violations)
    echo(f"{len(outcomes)} seeds in {minutes:.1f} min ({len(outcomes) / max(minutes, 1e-9):.1f} "
         f"seeds/min, {jobs} jobs), {sum(o.rounds for o in outcomes)} rounds, "
         f"{sum(o.calls for o in outcomes)} function calls; failed: {failed or 'none'}")
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="one seed, its plan and every fault as it fired")
    parser.add_argument("--seeds", help="a range START:STOP of seeds")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for --seeds")
    args = parser.parse_args(argv)
    if args.seed is not None:
        outcome = play(args.seed)
        print("\n".join(Plan.of(args.seed).describe()))
        print(outcome.report() if outcome.violations else
              f"seed {args.seed}: no violation in {outcome.rounds} rounds, {outcome.calls} "
              f"function calls, {outcome.seconds:.1f}s\n" + "\n".join(outcome.log))
        return 1 if outcome.violations else 0
    start, _, stop = (args.seeds or "0:10").partition(":")
    outcomes = play_many(list(range(int(start), int(stop))), args.jobs)
    return 1 if any(o.violations for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
