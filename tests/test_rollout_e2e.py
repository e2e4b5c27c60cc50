"""A rollout in waves on the simulated fleet (issue 21, design/rollouts.md): ten clusters,
a canary that pauses for a promote, a wave of half the rest, and the implicit `rest`.

Real function server (in this process, on a clock the story can move past a progress
deadline), real agents against the test hub, fleetcache.simulation for Crossplane and the
clusters. Each cluster has a node, so an engine runs as a pod: a Deployment moved to a new
commit keeps its old pod serving until the new one is available, and a pod is available only
while the model directory it names holds config.json. One fleet plays the stories in order,
each from where the last left it: a good commit goes all the way; a commit whose weights are
corrupt halts at the canary; the cause fixed, a restart resumes it and the canary pauses
again; a commit the engine cannot load rolls the canary back. Every round is recorded; the
tests read the records.
"""

from __future__ import annotations

import copy
import datetime
import time
from collections.abc import Callable
from pathlib import Path

import lupa
import pytest
import yaml

from fleetcache import reasons
from fleetcache.devtools import render as rendering
from fleetcache.devtools.simulation import (
    Clock,
    Cluster,
    files_bytes,
    function_server,
)
from fleetcache.devtools.testhub.content import make_model, sha256_of
from fleetcache.devtools.testhub.server import Fault, TestHub
from fleetcache.functions import naming, read
from tests.support.plane import PlayedFleet, control_plane

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "ml"
REPO = "fleetcache-test/rollout"
CLUSTERS = tuple(f"gpu-{i:02d}" for i in range(10))
# The assignment the spec below makes (design/rollouts.md, "The assignment"): the canary by
# name, `early` ceil(50% of the 9 left) = 5 in name order, `rest` the 4 no wave took.
WAVES = {"canary": CLUSTERS[:1], "early": CLUSTERS[1:6], "rest": CLUSTERS[6:]}
CANARY = WAVES["canary"][0]
WAVE_SPECS = [{"name": "canary", "clusterNames": ["gpu-00"], "pause": True},
              {"name": "early", "percent": 50}]
MODEL_BYTES = 2 * 2**20
DEADLINE = 90.0  # wall seconds any one wait may take on a loaded machine
STEADY_ROUNDS = 2  # rounds a stopped rollout must stay stopped


def fleet_cluster(name: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system",
                                             "name": f"{name}-kubeconfig"}}}


def model_cache_grant() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": "team", "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterNames": list(CLUSTERS)}, "quota": {"bytes": "1Gi"}}}


def model_cache(endpoint: str, revision: str, **rollout) -> dict:
    """The cache on every cluster; with `rollout` keys (waves, promote, ...) it rolls in waves."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": "chat", "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": "team"},
                     "source": {"huggingFace": {"repo": REPO, "revision": revision,
                                                "endpoint": endpoint}},
                     "placement": {"clusterNames": list(CLUSTERS)},
                     "rollout": {"maxConcurrent": 10, **rollout}}}


def model_deployment() -> dict:
    """One replica on each cluster, so every wave has replicas to prove the commit."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": "chat"}, "replicas": len(CLUSTERS),
                     "maxReplicasPerCluster": 1,
                     "placement": {"clusterNames": list(CLUSTERS)},
                     "engine": {"image": "vllm/vllm-openai:v0.11.0",
                                "args": ["--model=$(FLEETCACHE_MODEL)"]}}}


def ready_on(hydration: dict) -> set[str]:
    """The commits a cluster's volume holds verified: the one it serves, those it stores,
    and its pinned commit once Ready."""
    status = hydration.get("status", {})
    commits = {status.get("servingCommit"), *(status.get("storedCommits") or [])}
    if status.get("phase") == "Ready":
        commits.add(hydration["spec"]["commit"])
    return commits - {None, ""}


class Fleet(PlayedFleet):
    """The rollout's fleet, and what it reads of it."""

    def cache(self) -> dict:
        return self.control.xrs[("ModelCache", NAMESPACE, "chat")]

    def rollout(self) -> dict:
        return read.get_path(self.cache(), "status.rollout", {}) or {}

    def hydrations(self) -> dict[str, dict]:
        return {h["spec"]["clusterName"]: h for h in self.control.of_kind("ModelCacheHydration")}

    def replicas(self) -> dict[str, dict]:
        return {r["spec"]["clusterName"]: r for r in self.control.of_kind("ModelReplica")}

    def serving(self) -> dict[str, str]:
        """cluster -> the commit its replica mounts from the cache ("" off the cache)."""
        return {c: read.get_path(r, "spec.cache.commit", "") for c, r in self.replicas().items()}

    def pinned(self) -> dict[str, str]:
        return {c: h["spec"]["commit"] for c, h in self.hydrations().items()}

    def volume(self, cluster: str) -> Path:
        return self.clusters[cluster].volume_dir(NAMESPACE, naming.cache_volume_name("chat"))

    def unavailable(self) -> list[str]:
        """Clusters whose engine could not start right now."""
        return sorted(name for name, cluster in self.clusters.items()
                      for key, obj in cluster.objects.items()
                      if key[0] == "Deployment" and not read.is_true(obj, "Available"))

    def unready_mounts(self) -> list[str]:
        """Replicas mounting a commit their cluster's volume is not Ready on."""
        hydrations = self.hydrations()
        return sorted(f"{cluster}: {commit[:8]}" for cluster, commit in self.serving().items()
                      if commit and commit not in ready_on(hydrations.get(cluster, {})))

    def record(self) -> dict:
        return {"rollout": copy.deepcopy(self.rollout()),
                "progressing": read.condition_of(self.cache(), "Progressing"),
                "pinned": self.pinned(), "serving": self.serving(),
                "phases": {c: read.get_path(h, "status.phase", "") for c, h in
                           self.hydrations().items()},
                "unready_mounts": self.unready_mounts(), "unavailable": self.unavailable(),
                "volume_bytes": {c: files_bytes(self.volume(c)) for c in CLUSTERS}}

    def until(self, done: Callable[[], bool], what: str) -> list[dict]:
        """Rounds until `done`, each one recorded."""
        rounds, started = [], time.monotonic()
        while not done():
            assert time.monotonic() - started < DEADLINE, f"timed out waiting for {what}: " \
                f"{self.rollout().get('summary')} {self.rollout().get('message')}"
            self.round()
            rounds.append(self.record())
        return rounds

    def steady(self) -> list[dict]:
        rounds = []
        for _ in range(STEADY_ROUNDS):
            self.round()
            rounds.append(self.record())
        return rounds

    def everywhere(self, commit: str) -> bool:
        """Every cluster Ready on `commit` with its replica serving it, the engines up."""
        hydrations = self.hydrations()
        return len(hydrations) == len(CLUSTERS) and all(
            h["spec"]["commit"] == commit and read.get_path(h, "status.phase") == "Ready"
            for h in hydrations.values()) and self.serving() == dict.fromkeys(CLUSTERS, commit) \
            and not self.unavailable()

    def phase(self, phase: str) -> Callable[[], bool]:
        return lambda: self.rollout().get("phase") == phase


def failed_hydration_jobs(cluster: Cluster) -> list:
    return [key for key, obj in cluster.objects.items() if key[0] == "Job"
            and read.get_path(obj, "metadata.labels", {}).get("app.kubernetes.io/component")
            == "hydration" and read.is_true(obj, "Failed")]


def figures(rounds: list[dict], started: float) -> dict:
    """A story's rounds, its wall time, and the bytes on the volumes at its peak."""
    return {"rounds": len(rounds), "seconds": round(time.monotonic() - started, 1),
            "peak_total": max(sum(r["volume_bytes"].values()) for r in rounds),
            "peak_volume": max(max(r["volume_bytes"].values()) for r in rounds)}


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    root = tmp_path_factory.mktemp("rollout")
    clock = Clock()
    with TestHub() as hub, function_server(clock) as address, \
            rendering.channel_to(address) as channel:
        commits = {}
        for seed, revision in enumerate(("v1", "v2", "v3", "v4"), start=1):
            model = make_model(MODEL_BYTES, shards=2, seed=seed)
            if revision == "v4":
                del model["config.json"]  # verified bytes an engine cannot load
            commits[revision] = hub.add_repo(REPO, model, revision=revision)
            if revision == "v3":
                shard = sha256_of(model["model-00002-of-00002.safetensors"])
                corrupt = hub.inject(Fault("corrupt", path=f"/lfs/{shard}", times=None))
        clusters = {name: Cluster(name, root / name) for name in CLUSTERS}
        for cluster in clusters.values():
            cluster.add_node("gpu-1")  # engines run as pods: a new one rolls in beside the old
        control = control_plane(channel, clusters, clock=clock)
        fleet = Fleet(control, clusters)
        v1, v2, v4 = commits["v1"], commits["v2"], commits["v4"]
        out: dict = {"commits": commits, "figures": {}}
        try:
            for name in CLUSTERS:
                control.apply(fleet_cluster(name))
            control.apply(model_cache_grant())
            control.apply(model_cache(hub.endpoint, "v1"))
            fleet.until(lambda: len(fleet.hydrations()) == len(CLUSTERS) and all(
                read.get_path(h, "status.phase") == "Ready" for h in fleet.hydrations().values()),
                "v1 to hydrate everywhere")
            control.apply(model_deployment())
            fleet.until(lambda: fleet.everywhere(v1), "the replicas on v1")

            # A good commit: the canary, a pause, a promote, then early and rest.
            story = time.monotonic()
            control.apply(model_cache(hub.endpoint, "v2", waves=WAVE_SPECS))
            to_pause = fleet.until(fleet.phase("Paused"), "v2 to pause at the canary")
            held = fleet.steady()
            out["paused"] = {"rounds": to_pause + held, "argo": copy.deepcopy(fleet.cache())}
            control.apply(model_cache(hub.endpoint, "v2", waves=WAVE_SPECS, promote="canary"))
            promoted = fleet.until(lambda: fleet.rollout().get("phase") == "Complete"
                                   and fleet.everywhere(v2), "v2 to complete")
            out["good"] = {"rounds": to_pause + held + promoted}
            out["figures"]["good"] = figures(out["good"]["rounds"], story)

            # Corrupt weights: the canary's hydration fails and the rollout halts there. The
            # promote of v2 stays in the spec, as a user leaves it.
            story = time.monotonic()
            control.apply(model_cache(hub.endpoint, "v3", waves=WAVE_SPECS, promote="canary"))
            halting = fleet.until(fleet.phase("Halted"), "v3 to halt")
            halted = fleet.steady()
            out["halted"] = {"rounds": halting + halted, "argo": copy.deepcopy(fleet.cache())}
            out["figures"]["halt"] = figures(halting + halted, story)

            # The cause fixed (the Hub serves the right bytes; the failed Job deleted, as the
            # README's remedy says, so it runs again before its TTL), a restart resumes at
            # the canary, which pauses: the promote left from v2 does not pass it.
            story = time.monotonic()
            hub.faults.remove(corrupt)
            for key in failed_hydration_jobs(clusters[CANARY]):
                clusters[CANARY].delete(key)
            restarted = clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
            control.apply(model_cache(hub.endpoint, "v3", waves=WAVE_SPECS, promote="canary",
                                      restartedAt=restarted))
            resuming = fleet.until(fleet.phase("Paused"), "v3 to resume and pause at the canary")
            paused = fleet.steady()
            out["resumed"] = {"rounds": resuming + paused, "cache": copy.deepcopy(fleet.cache())}
            out["figures"]["resume"] = figures(resuming + paused, story)

            # An engine that cannot load the commit: the canary's replica moves to it and is
            # never Ready; past the progress deadline the canary rolls back to the commit the
            # fleet serves, v2.
            story = time.monotonic()
            control.apply(model_cache(hub.endpoint, "v4", waves=WAVE_SPECS,
                                      onFailure="Rollback"))
            stuck = fleet.until(lambda: read.get_path(fleet.replicas()[CANARY],
                                                      "status.model.revision") == v4,
                                "the canary's replica to be composed on v4")
            clock.advance(datetime.timedelta(minutes=31))
            rolling = fleet.until(lambda: fleet.rollout().get("phase") == "RolledBack"
                                  and fleet.everywhere(v2), "the canary to roll back to v2")
            rolled = fleet.steady()
            out["rolled_back"] = {"rounds": stuck + rolling + rolled, "stuck": stuck,
                                  "argo": copy.deepcopy(fleet.cache())}
            out["figures"]["rollback"] = figures(stuck + rolling + rolled, story)
            out["rounds"] = out["good"]["rounds"] + out["halted"]["rounds"] \
                + out["resumed"]["rounds"] + out["rolled_back"]["rounds"]
            print(f"\nrollout figures (design/rollouts.md): {out['figures']}")
            yield out
        finally:
            for cluster in clusters.values():
                cluster.stop()


# --- reading the records ---------------------------------------------------------------------


def started_waves(rollout: dict) -> set[str]:
    """The clusters of the waves up to the rollout's current one."""
    names = list(WAVES)
    current = names.index(rollout["wave"]) if rollout.get("wave") in names else -1
    return {c for name in names[:current + 1] for c in WAVES[name]}


def on(record: dict, commit: str) -> set[str]:
    """Clusters pinned to `commit` or whose replica serves it."""
    return {c for c in CLUSTERS if commit in (record["pinned"].get(c), record["serving"].get(c))}


def first_serving(rounds: list[dict], commit: str) -> dict[str, int]:
    """cluster -> the first round its replica serves `commit`."""
    firsts: dict[str, int] = {}
    for number, record in enumerate(rounds):
        for cluster, serving in record["serving"].items():
            if serving == commit:
                firsts.setdefault(cluster, number)
    return firsts


@pytest.fixture(scope="module")
def argo_health():
    """The ModelCache health check of examples/argocd/argocd-cm.yaml, run as Argo CD runs it."""
    scripts = yaml.safe_load((ROOT / "examples" / "argocd" / "argocd-cm.yaml").read_text())["data"]
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    check = lua.eval("function(obj)\n"
                     f"{scripts['resource.customizations.health.fleetcache.dev_ModelCache']}\nend")

    def value(obj):
        if isinstance(obj, dict):
            return lua.table_from({k: value(v) for k, v in obj.items()})
        if isinstance(obj, list):
            return lua.table_from([value(v) for v in obj])
        return obj

    return lambda cache: check(value(cache))["status"]


# --- invariants, every round of every story ----------------------------------------------------


def test_no_replica_ever_mounts_a_commit_its_cluster_is_not_ready_on(stories):
    assert [r["unready_mounts"] for r in stories["rounds"] if r["unready_mounts"]] == []


def test_no_engine_is_ever_unavailable_the_old_pod_serves_until_the_new_one_is(stories):
    assert [r["unavailable"] for r in stories["rounds"] if r["unavailable"]] == []


def test_no_cluster_is_pinned_to_or_serves_a_new_commit_before_its_wave_starts(stories):
    for record in stories["rounds"]:
        rollout = record["rollout"]
        if rollout.get("phase") not in (None, "Complete"):
            assert on(record, rollout["commit"]) <= started_waves(rollout), rollout["summary"]


# --- a good commit -------------------------------------------------------------------------


def test_the_waves_are_the_canary_half_of_the_rest_and_the_rest(stories):
    waves = stories["good"]["rounds"][-1]["rollout"]["waves"]
    assert [(w["name"], w["clusters"]) for w in waves] == [
        (name, len(clusters)) for name, clusters in WAVES.items()]


def test_a_new_commit_goes_to_the_canary_and_pauses_there(stories):
    last = stories["paused"]["rounds"][-1]
    v2 = stories["commits"]["v2"]
    assert (last["rollout"]["phase"], last["rollout"]["summary"]) == ("Paused", "paused at canary")
    assert (last["progressing"]["status"], last["progressing"]["reason"]) == (
        "False", reasons.RolloutPaused)
    assert (last["pinned"][CANARY], last["serving"][CANARY]) == (v2, v2)


def test_while_paused_no_cluster_outside_the_canary_is_pinned_to_or_serves_the_new_commit(stories):
    v2 = stories["commits"]["v2"]
    assert {c for r in stories["paused"]["rounds"] for c in on(r, v2)} == {CANARY}


def test_argo_cd_reads_a_paused_rollout_as_suspended(stories, argo_health):
    assert argo_health(stories["paused"]["argo"]) == "Suspended"


def test_the_waves_start_in_order_the_next_only_after_the_promote(stories):
    seen = [r["rollout"]["wave"] for r in stories["good"]["rounds"] if r["rollout"]]
    assert [w for i, w in enumerate(seen) if i == 0 or seen[i - 1] != w] == list(WAVES)
    assert {r["rollout"]["wave"] for r in stories["paused"]["rounds"] if r["rollout"]} == {"canary"}


def test_at_each_wave_start_the_replicas_outside_the_started_waves_still_serve_the_old_commit(stories):
    v1 = stories["commits"]["v1"]
    starts = {}
    for record in stories["good"]["rounds"]:
        starts.setdefault(record["rollout"].get("wave"), record)
    for wave in WAVES:
        record = starts[wave]
        outside = set(CLUSTERS) - started_waves(record["rollout"])
        assert {record["serving"][c] for c in outside} <= {v1}, wave


def test_replicas_switch_to_the_new_commit_wave_by_wave(stories):
    firsts = first_serving(stories["good"]["rounds"], stories["commits"]["v2"])
    canary, early, rest = ([firsts[c] for c in clusters] for clusters in WAVES.values())
    assert max(canary) < min(early) and max(early) < min(rest)


def test_while_a_commit_rolls_out_a_volume_holds_both_commits_and_no_third(stories):
    one_commit = stories["good"]["rounds"][0]["volume_bytes"][CANARY]  # v1, before v2 starts
    assert 1.9 * one_commit < stories["figures"]["good"]["peak_volume"] < 2.1 * one_commit


def test_a_good_commit_completes_with_every_replica_on_it(stories):
    last = stories["good"]["rounds"][-1]
    v2 = stories["commits"]["v2"]
    assert (last["rollout"]["phase"], last["rollout"]["summary"]) == ("Complete", "complete")
    assert last["serving"] == last["pinned"] == dict.fromkeys(CLUSTERS, v2)


# --- corrupt weights halt at the canary --------------------------------------------------------


def test_corrupt_weights_on_the_canary_halt_the_rollout_naming_wave_cluster_and_reason(stories):
    last = stories["halted"]["rounds"][-1]
    progressing = last["progressing"]
    assert (last["rollout"]["phase"], last["rollout"]["summary"]) == ("Halted", "halted at canary")
    assert (progressing["status"], progressing["reason"]) == ("False", reasons.RolloutHalted)
    assert "wave canary" in progressing["message"]
    assert f"{CANARY}: {reasons.DigestMismatch}" in progressing["message"]


def test_a_halt_leaves_every_other_cluster_and_its_replica_on_the_old_commit(stories):
    v2 = stories["commits"]["v2"]
    for record in stories["halted"]["rounds"]:
        others = set(CLUSTERS) - {CANARY}
        assert {record["pinned"][c] for c in others} == {record["serving"][c] for c in others} == {v2}


def test_no_replica_serves_the_corrupt_commit(stories):
    v3 = stories["commits"]["v3"]
    assert all(v3 not in r["serving"].values() for r in stories["halted"]["rounds"])


def test_argo_cd_reads_a_halted_rollout_as_degraded(stories, argo_health):
    assert argo_health(stories["halted"]["argo"]) == "Degraded"


# --- the cause fixed, a restart resumes ------------------------------------------------------


def test_a_restart_after_the_cause_is_fixed_resumes_the_halted_wave(stories):
    v3 = stories["commits"]["v3"]
    rounds = stories["resumed"]["rounds"]
    assert rounds[0]["rollout"]["phase"] == "Progressing"
    assert (rounds[-1]["pinned"][CANARY], rounds[-1]["serving"][CANARY]) == (v3, v3)
    assert rounds[-1]["phases"][CANARY] == "Ready"


def test_a_promote_left_from_the_last_rollout_does_not_pass_the_canary(stories):
    cache = stories["resumed"]["cache"]
    assert cache["spec"]["rollout"]["promote"] == "canary"
    assert (cache["status"]["rollout"]["summary"], cache["status"]["rollout"]["stalePromote"]) \
        == ("paused at canary", "canary")


# --- an engine that cannot load the commit rolls back ------------------------------------------


def test_the_canary_replica_moves_to_the_new_commit_before_the_deadline(stories):
    assert stories["rolled_back"]["stuck"][-1]["serving"][CANARY] == stories["commits"]["v4"]


def test_past_the_deadline_the_canary_rolls_back_and_its_replica_serves_the_old_commit(stories):
    last = stories["rolled_back"]["rounds"][-1]
    v2 = stories["commits"]["v2"]
    assert (last["rollout"]["phase"], last["rollout"]["summary"]) == ("RolledBack", "rolled back")
    assert last["rollout"]["previousCommit"] == v2
    assert (last["progressing"]["status"], last["progressing"]["reason"]) == (
        "False", reasons.RolledBack)
    assert (last["pinned"][CANARY], last["serving"][CANARY], last["phases"][CANARY]) == (
        v2, v2, "Ready")


def test_a_rollback_touches_no_cluster_outside_the_canary(stories):
    v2 = stories["commits"]["v2"]
    others = set(CLUSTERS) - {CANARY}
    for record in stories["rolled_back"]["rounds"]:
        assert {record["pinned"][c] for c in others} == {record["serving"][c] for c in others} == {v2}


def test_argo_cd_reads_a_rolled_back_rollout_as_degraded(stories, argo_health):
    assert argo_health(stories["rolled_back"]["argo"]) == "Degraded"
