"""`fleetcache demo`, day two: what happens to a warm fleet after the day it was created.

Played on the demo's fleet once act one has converged (tiny-chat Ready on four clusters,
gpu-west-2 failed behind its broken mirror, six replicas placed):

1. a model update in which every shard changes: tiny-chat moves to revision v2; every
   cluster holds both commits while its replicas move, then prunes v1 (bytes on each
   volume before, at the peak and after);
2. gpu-east-1 driven over its high watermark: three more caches land there (one stale,
   one pinned, one pinned with a 24h TTL), then its FleetCluster gets a capacity they
   overfill: the stale, unpinned, unmounted cache is evicted, nothing else;
3. a TTL lapse: the clock skips 25 hours, the weekly cache lapses (its pin is gone), and
   when the capacity shrinks again it is the one evicted; its ModelCache turns Lapsed;
4. nothing left to evict: capacity below what the pinned and mounted copies hold turns
   CapacityLow True and a new cache waits as Pending/CapacityLow; more capacity admits it.

Each act returns what differs from its ending; [] when the fleet converged as it should.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from fleetcache.devtools.demo.stage import Stage, phase_of
from fleetcache.devtools.simulation import files_bytes, kubectl_table
from fleetcache.devtools.testhub.content import make_model
from fleetcache.functions import naming, quantities, read

CROWDED_CLUSTER = "gpu-east-1"
HIGH, LOW = 80, 70  # the FleetCluster defaults the act relies on
TTL = "24h"
# (cache, share of the demo model's size, retention): what lands on the crowded cluster.
CROWD: tuple[tuple[str, float, dict[str, Any]], ...] = (
    ("stale-chat", 0.5, {}),
    ("pinned-chat", 0.2, {"pinned": True}),
    ("weekly-chat", 0.3, {"pinned": True, "ttlAfterLastUse": TTL}),
)
STEADY_ROUNDS = 6  # rounds a settled decision must survive unchanged


# --- 1. a model update in which every shard changes -----------------------------------------


def update(stage: Stage, cache_manifest: Callable[[str], dict]) -> list[str]:
    """v2 shares no shard with v1: each volume must hold both until its replicas move,
    then prune v1 (no replica mounts it any more) and end at one commit's bytes."""
    before = {c: files_bytes(stage.volume(c, stage.cache)) for c in stage.healthy}
    model = make_model(stage.model_bytes, shards=4, seed=8)
    v1 = read.get_path(stage.control.xrs[("ModelCache", stage.namespace, stage.cache)],
                      "status.resolved.commit")
    v2 = [hub.add_repo(stage.repo, dict(model), revision="v2", private=True)
          for hub in stage.hubs][0]
    stage.control.apply(cache_manifest("v2"))
    stage.out(f"\nday two, act 1: {stage.cache} moves to revision v2 ({v2[:10]}), in which "
              "every shard changed")
    peak = dict(before)
    started = stage.rounds

    def pruned_everywhere() -> bool:
        for cluster in stage.healthy:
            peak[cluster] = max(peak[cluster], files_bytes(stage.volume(cluster, stage.cache)))
        replicas = [r for r in stage.control.of_kind("ModelReplica")
                    if r["spec"]["delivery"] == "Cache"]
        return all(read.get_path(r, "spec.cache.commit") == v2 for r in replicas) and all(
            phase_of(h := stage.hydration(stage.cache, c)) == "Ready"
            and h["spec"]["commit"] == v2 and v1 in h["status"].get("prunedCommits", [])
            for c in stage.healthy)

    problem = stage.until(pruned_everywhere, "v2 to roll out and v1 to be pruned")
    if problem:
        return [problem]
    after = {c: files_bytes(stage.volume(c, stage.cache)) for c in stage.healthy}
    stage.out(f"  every healthy cluster serves v2 and pruned v1 after {stage.rounds - started} "
              "rounds; bytes on each cache volume:")
    for line in kubectl_table([["CLUSTER", "V1 ONLY", "BOTH (PEAK)", "V2 AFTER PRUNE"]] + [
            [c, quantities.human_bytes(before[c]), quantities.human_bytes(peak[c]), quantities.human_bytes(after[c])]
            for c in stage.healthy]):
        stage.out(line)
    problems = []
    for cluster in stage.healthy:
        snapshots = stage.volume(cluster, stage.cache).glob(f"hub/*/snapshots/{v1}")
        if any(snapshots):
            problems.append(f"{cluster}: the v1 snapshot is still on the volume after pruning")
        if not peak[cluster] > 1.9 * before[cluster] or not after[cluster] < 0.55 * peak[cluster]:
            problems.append(f"{cluster}: volume bytes {before[cluster]} -> {peak[cluster]} -> "
                            f"{after[cluster]}, expected both commits at the peak and one after")
    return problems


# --- 2. a cluster over its high watermark ---------------------------------------------------


def crowd_manifest(stage: Stage, name: str, retention: dict, endpoint: str) -> dict:
    spec: dict = {"grantRef": {"name": "demo"},  # the main demo's grant (fleetcache.devtools.demo.GRANT)
                  "source": {"huggingFace": {"repo": f"fleetcache-demo/{name}",
                                             "endpoint": endpoint}},
                  "placement": {"clusterNames": [CROWDED_CLUSTER]}}
    if retention:
        spec["retention"] = retention
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": name, "namespace": stage.namespace}, "spec": spec}


def measured_use(stage: Stage) -> dict[str, int]:
    """cache -> its copy's usedBytes on the crowded cluster, as the hydrations report it."""
    return {h["spec"]["modelCacheName"]: read.as_int(read.get_path(h, "status.usedBytes"), 0)
            for h in stage.hydrations() if h["spec"]["clusterName"] == CROWDED_CLUSTER}


def capacity_between(full: int, freed: int) -> int | None:
    """A capacity above which `full` bytes pass the high watermark and below which
    `full - freed` bytes are under the low one: evicting exactly `freed` bytes is enough."""
    lowest, highest = (full - freed) * 100 / LOW, full * 100 / HIGH
    return int((lowest + highest) / 2) if lowest < highest else None


def set_capacity(stage: Stage, capacity: int) -> None:
    cluster = stage.fleet_cluster(CROWDED_CLUSTER)
    manifest = {k: cluster[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    manifest["spec"] = dict(manifest["spec"], cache=dict(manifest["spec"].get("cache", {}),
                                                         capacity=str(capacity)))
    stage.control.apply(manifest)


def capacity_view(stage: Stage) -> list[str]:
    cache = read.get_path(stage.fleet_cluster(CROWDED_CLUSTER), "status.cache", {}) or {}
    rows = [["CACHE", "PHASE", "REASON", "USED", "PINNED", "MOUNTED BY"]]
    for h in sorted(stage.hydrations(), key=lambda h: h["spec"]["modelCacheName"]):
        if h["spec"]["clusterName"] == CROWDED_CLUSTER:
            status = h.get("status", {})
            rows.append([h["spec"]["modelCacheName"], status.get("phase", ""),
                         status.get("reason", ""), status.get("usedHuman", "<none>"),
                         str(status.get("pinned", False)).lower(),
                         str(status.get("mountedBy", 0))])
    return [f"  FleetCluster {CROWDED_CLUSTER}: {quantities.human_bytes(cache.get('usedBytes', 0))} "
            f"of {quantities.human_bytes(cache.get('capacityBytes', 0))} used "
            f"({cache.get('usedPercent', '?')}%)"] + kubectl_table(rows)


def settled(stage: Stage, evicted: set[str], also: tuple[str, ...] = ()) -> Callable[[], bool]:
    """Every copy on the crowded cluster Ready but the evicted ones."""
    def done() -> bool:
        phases = {h["spec"]["modelCacheName"]: phase_of(h) for h in stage.hydrations()
                  if h["spec"]["clusterName"] == CROWDED_CLUSTER}
        return set(phases) >= {stage.cache, *(n for n, _, _ in CROWD), *also} and {
            c for c, p in phases.items() if p == "Evicted"} == evicted and all(
            p == "Ready" for c, p in phases.items() if c not in evicted)
    return done


def steady(stage: Stage) -> list[str]:
    """The decision must not flap: a few more rounds change no phase on the cluster."""
    def phases() -> dict[str, str]:
        return {h["metadata"]["name"]: phase_of(h) for h in stage.hydrations()}
    first = phases()
    for _ in range(STEADY_ROUNDS):
        stage.round()
        if phases() != first:
            return [f"phases changed after settling: {first} -> {phases()}"]
    return []


def crowd(stage: Stage, endpoint: str) -> list[str]:
    for name, share, _ in CROWD:
        stage.hubs[0].add_repo(f"fleetcache-demo/{name}",
                           dict(make_model(int(stage.model_bytes * share), shards=2,
                                           seed=len(name))))
    for name, _, retention in CROWD:
        stage.control.apply(crowd_manifest(stage, name, retention, endpoint))
    stage.out(f"\nday two, act 2: {', '.join(n for n, _, _ in CROWD)} land on "
              f"{CROWDED_CLUSTER} (pinned-chat pinned, weekly-chat pinned with a {TTL} TTL)")
    problem = stage.until(settled(stage, set()), "the three caches to be Ready")
    if problem:
        return [problem]
    return squeeze(stage, measured_use(stage), "stale-chat", {"stale-chat"}, "is set to")


def squeeze(stage: Stage, held: dict[str, int], evict: str, evicted: set[str], how: str
            ) -> list[str]:
    """Give the crowded cluster a capacity that the copies `held` pass the high watermark
    of and that evicting `evict` alone brings under the low one; play until exactly
    `evicted` are evicted, then some more rounds in which nothing may change."""
    capacity = capacity_between(sum(held.values()), held[evict])
    if capacity is None:
        return [f"no capacity makes evicting {evict} enough: {held}"]
    set_capacity(stage, capacity)
    stage.out(f"  {CROWDED_CLUSTER}'s spec.cache.capacity {how} {quantities.human_bytes(capacity)}: "
              f"{sum(held.values()) * 100 // capacity}% used, above the {HIGH}% watermark")
    started = stage.rounds
    problem = stage.until(settled(stage, evicted), f"{evict} to be evicted")
    if problem:
        return [problem]
    stage.out(f"  settled after {stage.rounds - started} rounds:")
    for line in capacity_view(stage):
        stage.out(line)
    return steady(stage) + low_capacity_problems(stage, expected=False)


def low_capacity_problems(stage: Stage, expected: bool) -> list[str]:
    low = read.condition_of(stage.fleet_cluster(CROWDED_CLUSTER), "CapacityLow")
    if (low.get("status") == "True") != expected:
        return [f"{CROWDED_CLUSTER}: CapacityLow={low.get('status')}, expected {expected}"]
    return []


# --- 3. a TTL lapse -------------------------------------------------------------------------


def lapse(stage: Stage) -> list[str]:
    stage.clock.advance(datetime.timedelta(hours=25))
    stage.out(f"\nday two, act 3: the clock skips 25 hours; nothing mounted weekly-chat, "
              f"so its {TTL} TTL lapses and unpins it")
    problem = stage.until(lambda: read.get_path(stage.hydration("weekly-chat", CROWDED_CLUSTER),
                                               "status.lapsed") is True,
                          "weekly-chat to lapse")
    if problem:
        return [problem]
    held = {c: b for c, b in measured_use(stage).items() if c != "stale-chat"}
    problems = squeeze(stage, held, "weekly-chat", {"stale-chat", "weekly-chat"}, "shrinks to")
    if problems:
        return problems
    caches = {c["metadata"]["name"]: c for c in stage.control.of_kind("ModelCache")}
    for name, want in (("weekly-chat", "True"), ("stale-chat", "False"),
                       ("pinned-chat", "False")):
        lapsed = read.condition_of(caches[name], "Lapsed")
        stage.out(f"  ModelCache {name}: Lapsed={lapsed.get('status')} "
                  f"{lapsed.get('message', '')}".rstrip())
        if lapsed.get("status") != want:
            problems.append(f"ModelCache {name}: Lapsed={lapsed.get('status')}, expected {want}")
    return problems


# --- 4. nothing left to evict --------------------------------------------------------------


LATE = ("late-chat", 0.3)


def full(stage: Stage, endpoint: str) -> list[str]:
    """Capacity below what the pinned and the mounted copies need: nothing is removable,
    so CapacityLow turns True and a new copy waits instead of starting; more capacity
    admits it, and the evicted copies stay evicted (no replica asked for them)."""
    use = {c: b for c, b in measured_use(stage).items() if c not in ("stale-chat", "weekly-chat")}
    capacity = sum(use.values()) * 100 // (HIGH + 10)
    set_capacity(stage, capacity)
    name, share = LATE
    stage.hubs[0].add_repo(f"fleetcache-demo/{name}",
                           dict(make_model(int(stage.model_bytes * share), shards=2, seed=9)))
    stage.control.apply(crowd_manifest(stage, name, {}, endpoint))
    stage.out(f"\nday two, act 4: {CROWDED_CLUSTER}'s capacity drops to "
              f"{quantities.human_bytes(capacity)}, below what its pinned and mounted copies hold, and "
              f"{name} is placed there")

    def waiting() -> bool:
        late = stage.hydration(name, CROWDED_CLUSTER)
        return read.get_path(late, "status.reason") == "CapacityLow" and not \
            low_capacity_problems(stage, expected=True)

    problem = stage.until(waiting, f"{name} to wait and CapacityLow to turn True")
    if problem:
        return [problem]
    low = read.condition_of(stage.fleet_cluster(CROWDED_CLUSTER), "CapacityLow")
    late = stage.hydration(name, CROWDED_CLUSTER)["status"]
    stage.out(f"  FleetCluster {CROWDED_CLUSTER}: CapacityLow=True {low.get('message', '')}")
    stage.out(f"  {name}: {late['phase']}/{late['reason']}: {late['message']}")
    problems = steady(stage)
    gone = [c for c in (stage.cache, "pinned-chat")
            if phase_of(stage.hydration(c, CROWDED_CLUSTER)) != "Ready"]
    if gone:
        problems.append(f"{', '.join(gone)} left Ready although pinned or mounted")
    roomy = 4 * 2**30  # a new copy reserves its whole request (1Gi at least) until Ready
    set_capacity(stage, roomy)
    stage.out(f"  {CROWDED_CLUSTER}'s capacity grows to {quantities.human_bytes(roomy)}")
    problem = stage.until(settled(stage, {"stale-chat", "weekly-chat"}, also=(name,)),
                          f"{name} to be admitted and Ready")
    if problem:
        return problems + [problem]
    for line in capacity_view(stage):
        stage.out(line)
    return problems + low_capacity_problems(stage, expected=False)


def play(stage: Stage, cache_manifest: Callable[[str], dict], endpoint: str) -> list[str]:
    """The three acts in order; a later act only plays on a fleet the earlier one left right."""
    for act in (lambda: update(stage, cache_manifest), lambda: crowd(stage, endpoint),
                lambda: lapse(stage), lambda: full(stage, endpoint)):
        problems = act()
        if problems:
            return problems
    return []
