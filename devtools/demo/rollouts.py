"""`fleetcache demo`, rollouts in waves (issue 21): a broken commit stops at its canary.

Played after the sources act, in its own namespace under its own grant, over the four clusters whose
hydrations can succeed (gpu-west-2 sits behind the broken mirror):
1. ModelCache wave-chat is Ready on all four at v1 (no waves yet);
2. v2, whose weights the Hub serves corrupt, goes out in waves (a canary, gpu-east-1, then
   the rest): the canary's hydration fails with DigestMismatch, the rollout halts there and
   no other cluster is touched; `kubectl get modelcaches` shows ROLLOUT "halted at canary";
3. v3, as corrupt, with spec.rollout.onFailure Rollback: the canary fails again and is
   pinned back to v1, Ready from its volume; ROLLOUT "rolled back".

`play` returns what differs from that ending; [] when the fleet converged as it should.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetcache.devtools.demo.stage import Stage, phase_of
from fleetcache.devtools.simulation import kubectl_table
from fleetcache.devtools.testhub.content import make_model, sha256_of
from fleetcache.devtools.testhub.server import Fault
from fleetcache.functions import naming, read

NAMESPACE = "rollouts"
GRANT = "rollouts"
CACHE = "wave-chat"
REPO = "fleetcache-demo/wave-chat"
CANARY = "gpu-east-1"
WAVES = [{"name": "canary", "clusterNames": [CANARY]}]
SHARE = 0.1  # of the demo model's size


def grant(clusters: tuple[str, ...]) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": GRANT, "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterNames": list(clusters)}, "quota": {"bytes": "1Gi"}}}


def cache(endpoint: str, clusters: tuple[str, ...], revision: str, **rollout) -> dict:
    """wave-chat at `revision`; with `rollout` keys (waves, onFailure) it rolls in waves."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": GRANT},
                     "source": {"huggingFace": {"repo": REPO, "revision": revision,
                                                "endpoint": endpoint}},
                     "placement": {"clusterNames": list(clusters)},
                     "rollout": {"maxConcurrent": 10, **rollout}}}


def model_cache(stage: Stage) -> dict:
    return stage.control.xrs.get(("ModelCache", NAMESPACE, CACHE), {})


def rollout_phase(stage: Stage) -> str:
    return read.get_path(model_cache(stage), "status.rollout.phase", "") or ""


def show(stage: Stage) -> None:
    """`kubectl get modelcaches` and the hydrations' pinned commits."""
    status = model_cache(stage).get("status", {})
    stage.out(f"  $ kubectl get modelcaches -n {NAMESPACE}")
    for line in kubectl_table([["NAME", "CLUSTERS", "COMMIT", "REASON", "ROLLOUT"],
                               [CACHE, status.get("summary", ""), status.get("commitShort", ""),
                                status.get("reason", ""),
                                read.get_path(status, "rollout.summary", "") or "<none>"]]):
        stage.out(line)
    progressing = read.condition_of(model_cache(stage), "Progressing")
    stage.out(f"  Progressing={progressing.get('status')} {progressing.get('reason')}: "
              f"{progressing.get('message')}")
    rows = [["CLUSTER", "COMMIT", "PHASE", "REASON"]]
    for hydration in sorted(stage.hydrations(CACHE), key=lambda h: h["spec"]["clusterName"]):
        rows.append([hydration["spec"]["clusterName"], hydration["spec"]["commit"][:10],
                     phase_of(hydration), read.get_path(hydration, "status.reason", "") or ""])
    for line in kubectl_table(rows):
        stage.out(line)


def pinned(stage: Stage) -> dict[str, str]:
    return {h["spec"]["clusterName"]: h["spec"]["commit"] for h in stage.hydrations(CACHE)}


def play(stage: Stage, endpoint: str) -> list[str]:
    hub, clusters = stage.hubs[0], stage.healthy
    size = int(stage.model_bytes * SHARE)
    commits, faults = {}, []
    for seed, revision in enumerate(("v1", "v2", "v3"), start=21):
        model = make_model(size, shards=2, seed=seed)
        commits[revision] = hub.add_repo(REPO, dict(model), revision=revision)
        if revision != "v1":  # the Hub serves these weights corrupt
            shard = sha256_of(model["model-00001-of-00002.safetensors"])
            faults.append(hub.inject(Fault("corrupt", path=f"/lfs/{shard}", times=None)))
    try:
        return acts(stage, endpoint, clusters, commits)
    finally:
        for fault in faults:
            hub.faults.remove(fault)


def acts(stage: Stage, endpoint: str, clusters: tuple[str, ...], commits: dict[str, str]
         ) -> list[str]:
    v1 = commits["v1"]

    def apply(revision: str, **rollout) -> None:
        stage.control.apply(cache(endpoint, clusters, revision, **rollout))

    def until(done: Callable[[], bool], what: str) -> str:
        started = stage.rounds
        problem = stage.until(done, what)
        if not problem:
            stage.out(f"  after {stage.rounds - started} rounds:")
        return problem

    stage.control.apply(grant(clusters))
    apply("v1")
    stage.out(f"\nrollouts: ModelCache {CACHE} at v1 ({v1[:10]}) on {', '.join(clusters)}")
    problem = until(lambda: len(stage.hydrations(CACHE)) == len(clusters) and all(
        phase_of(h) == "Ready" for h in stage.hydrations(CACHE)), f"{CACHE} Ready at v1")
    if problem:
        return [problem]

    apply("v2", waves=WAVES)
    stage.out(f"\nrollouts: {CACHE} moves to v2, whose weights the Hub serves corrupt, in "
              f"waves: canary ({CANARY}), then the rest")
    problem = until(lambda: rollout_phase(stage) == "Halted", "the rollout of v2 to halt")
    if problem:
        return [problem]
    show(stage)
    problems = [f"{cluster}: pinned to {commit[:10]} although only the canary may move"
                for cluster, commit in pinned(stage).items() if cluster != CANARY and commit != v1]

    apply("v3", waves=WAVES, onFailure="Rollback")
    stage.out(f"\nrollouts: {CACHE} moves to v3, as corrupt, with spec.rollout.onFailure "
              "Rollback")
    problem = until(lambda: rollout_phase(stage) == "RolledBack" and pinned(stage) == dict.fromkeys(
        clusters, v1) and phase_of(stage.hydration(CACHE, CANARY)) == "Ready",
        "the canary to roll back to v1 and be Ready on it")
    if problem:
        return problems + [problem]
    show(stage)
    return problems
