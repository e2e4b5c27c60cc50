"""`make demo`: the fleet converges, the injected fault fails one cluster with its remedy,
and that cluster's replica falls back to the source."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from fleetcache.devtools import cli, demo
from fleetcache.devtools.demo import day_two, node_tier, oci, rollouts, tenants
from tests.support import xrd
from tests.support.played_demo import played_demo

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo_output() -> str:
    played = played_demo()
    assert played.code == 0, played.output
    return played.output


def test_the_demo_converges_and_says_so(demo_output):
    assert "demo OK" in demo_output


def test_the_demo_prints_a_live_hydration_table_per_round(demo_output):
    assert demo_output.count("CLUSTER     PHASE") >= 2
    assert "Hydrating" in demo_output


def test_the_broken_mirror_fails_its_cluster_with_digest_mismatch_and_the_remedy(demo_output):
    assert "gpu-west-2  Failed" in demo_output
    assert "Degraded=True HydrationFailed: hydration failed on gpu-west-2 (DigestMismatch)" \
        in demo_output
    assert "Check the mirror or proxy" in demo_output


def test_replicas_switch_to_the_cache_except_on_the_failed_cluster(demo_output):
    final = demo_output[demo_output.rindex("REPLICA  CLUSTER"):].split("\n\n")[0]
    assert "gpu-west-2  Source    Ready" in final
    assert final.count("Cache     Ready") == demo.REPLICAS - 1


def digests_after(output: str, heading: str) -> list[str]:
    block = output[output.index(heading):].split("\n\n")[0]
    return [line.rsplit(" ", 1)[-1] for line in block.splitlines() if "files re-hashed" in line]


def test_every_ready_cluster_verifies_the_same_bytes(demo_output):
    first = digests_after(demo_output, "Every Ready cluster re-verifies its cache")
    assert len(first) == 4 and len(set(first)) == 1


def test_after_the_update_every_ready_cluster_verifies_the_same_new_bytes(demo_output):
    first = digests_after(demo_output, "Every Ready cluster re-verifies its cache")
    updated = digests_after(demo_output, "Every Ready cluster re-verifies the updated cache")
    assert len(updated) == 4 and len(set(updated)) == 1 and updated[0] != first[0]


def volume_row(output: str, cluster: str) -> list[str]:
    block = output[output.index("V1 ONLY"):]
    return next(line.split() for line in block.splitlines() if line.split()[0] == cluster)


def test_a_full_weight_update_holds_both_commits_then_frees_the_old_ones_bytes(demo_output):
    assert "every healthy cluster serves v2 and pruned v1" in demo_output
    for cluster in ("gpu-east-1", "gpu-east-2", "gpu-east-3", "gpu-west-1"):
        _, before, peak, after = volume_row(demo_output, cluster)
        assert before == after and peak != before


def crowded_table(output: str, act: str) -> dict[str, list[str]]:
    block = output[output.index(act):]
    block = block[block.index("CACHE        PHASE"):].split("\n\n")[0]
    return {line.split()[0]: line.split()[1:] for line in block.splitlines()[1:]
            if line.startswith("  ") and not line.startswith("  ModelCache")}


def test_over_the_high_watermark_only_the_stale_unpinned_unmounted_cache_is_evicted(demo_output):
    rows = crowded_table(demo_output, "day two, act 2")
    assert {name: row[0] for name, row in rows.items()} == {
        "pinned-chat": "Ready", "stale-chat": "Evicted", "tiny-chat": "Ready",
        "weekly-chat": "Ready"}


def test_a_lapsed_cache_loses_its_pin_is_evicted_and_its_model_cache_says_lapsed(demo_output):
    rows = crowded_table(demo_output, "day two, act 3")
    assert rows["weekly-chat"][:2] == ["Evicted", "Evicted"] and rows["pinned-chat"][0] == "Ready"
    assert "ModelCache weekly-chat: Lapsed=True" in demo_output
    assert "ModelCache stale-chat: Lapsed=False" in demo_output


def test_with_nothing_removable_capacity_low_holds_a_new_copy_until_capacity_grows(demo_output):
    act = demo_output[demo_output.index("day two, act 4"):]
    assert "CapacityLow=True" in act and "late-chat: Pending/CapacityLow: this copy needs" in act
    rows = crowded_table(demo_output, "day two, act 4")
    assert rows["late-chat"][0] == "Ready" and rows["pinned-chat"][0] == "Ready"
    assert rows["stale-chat"][0] == "Evicted"  # more room does not re-warm an evicted copy


def test_a_second_tenant_is_refused_past_its_budget_with_the_numbers_then_admitted(demo_output):
    act = demo_output[demo_output.index(f"tenant {tenants.TENANT}"):]
    refusal = next(line for line in act.splitlines() if "OverQuota" in line)
    assert "would make the projection" in refusal and "over the budget of" in refusal
    assert f"{tenants.CACHE} is Ready on gpu-east-2 and gpu-east-3" in act


def test_every_manifest_of_the_second_tenant_is_valid_against_its_xrd():
    xrd.assert_valid(tenants.grant(2**20))
    xrd.assert_valid(tenants.cache("http://127.0.0.1:1"))


def test_the_grant_admits_the_demo_cache_and_shows_its_figures(demo_output):
    assert f"Admitted=True GrantAdmitted: ModelCacheGrant {demo.GRANT} admits this cache on 5 " \
        "clusters" in demo_output
    table = demo_output[demo_output.index(f"$ kubectl get modelcachegrant {demo.GRANT}"):]
    header, row = table.splitlines()[1:3]
    assert header.split() == ["NAME", "BUDGET", "USED", "PROJECTED", "CACHES", "OVERQUOTA"]
    assert row.split()[:2] == [demo.GRANT, "4.0GiB"] and row.split()[-1] == "False"


def test_every_demo_composite_is_valid_against_its_xrd():
    for resource in [*demo.fleet_clusters(), demo.model_cache_grant(),
                     demo.model_cache("http://127.0.0.1:1"), demo.model_deployment()]:
        xrd.assert_valid(resource)


def test_every_cache_of_the_demo_names_its_grant():
    assert demo.model_cache("http://127.0.0.1:1")["spec"]["grantRef"] == {"name": demo.GRANT}
    stage = SimpleNamespace(namespace=demo.NAMESPACE)
    for name, _, retention in day_two.CROWD:
        cache = day_two.crowd_manifest(stage, name, retention, "http://127.0.0.1:1")
        assert cache["spec"]["grantRef"] == {"name": demo.GRANT}
        xrd.assert_valid(cache)


# --- the rollouts act (fleetcache.devtools.demo.rollouts) -----------------------------------


def rollout_listings(output: str) -> list[dict[str, str]]:
    """Each `kubectl get modelcaches` row the rollouts act printed, by column."""
    act = output[output.index("rollouts: ModelCache"):]
    listings = []
    for block in act.split(f"$ kubectl get modelcaches -n {rollouts.NAMESPACE}\n")[1:]:
        header, row = (line.split() for line in block.splitlines()[:2])
        *cells, rollout = row[:len(header) - 1] + [" ".join(row[len(header) - 1:])]
        listings.append(dict(zip(header, [*cells, rollout], strict=True)))
    return listings


def test_the_rollouts_act_shows_a_halted_then_a_rolled_back_rollout(demo_output):
    halted, rolled_back = rollout_listings(demo_output)
    assert (halted["ROLLOUT"], halted["REASON"]) == ("halted at canary", "DigestMismatch")
    assert (rolled_back["ROLLOUT"], rolled_back["REASON"]) == ("rolled back", "RolledBack")


def test_a_rolled_back_canary_is_ready_on_the_commit_every_other_cluster_serves(demo_output):
    act = demo_output[demo_output.index("spec.rollout.onFailure Rollback"):]
    table = act[act.index("CLUSTER     COMMIT"):].split("\n\n")[0].splitlines()[1:]
    assert len({line.split()[1] for line in table}) == 1
    assert {line.split()[2] for line in table} == {"Ready"}


def test_every_manifest_of_the_rollouts_act_is_valid_against_its_xrd():
    clusters = ("gpu-east-1", "gpu-east-2")
    xrd.assert_valid(rollouts.grant(clusters))
    xrd.assert_valid(rollouts.cache("http://127.0.0.1:1", clusters, "v2", waves=rollouts.WAVES,
                                    onFailure="Rollback"))


# --- the node tier act (fleetcache.demo_node_tier) ------------------------------------------


def node_tier_act(output: str) -> str:
    return output[output.index("node tier: ModelCache"):]


def tier_tables(text: str) -> list[dict[str, list[str]]]:
    """Every node-count table printed, in order: cluster -> its row after the name."""
    tables = []
    for block in text.split("CLUSTER      VOLUME")[1:]:
        rows = {}
        for line in block.splitlines()[1:]:
            if not line.startswith("  gpu-nodes-"):
                break
            rows[line.split()[0]] = line.split()[1:]
        tables.append(rows)
    return tables


def test_the_node_tier_act_warms_every_opted_in_node_of_both_clusters(demo_output):
    act = node_tier_act(demo_output)
    converged = tier_tables(act[:act.index("$ kubectl get nodes")])[-1]
    assert {c: row[:4] for c, row in converged.items()} == {
        c: ["Ready", "Ready", "2", "2"] for c in node_tier.CLUSTERS}


def test_only_opted_in_pool_nodes_carry_the_warm_label(demo_output):
    act = node_tier_act(demo_output)
    table = act[act.index("$ kubectl get nodes"):].split("\n\n")[0].splitlines()[2:]
    warm = {line.split()[0]: line.split()[-1] != "<none>" for line in table}
    assert warm == {"control-plane": False, "gpu-1": True, "gpu-2": True, "gpu-3": False}


def test_a_joining_node_is_warmed_without_the_hub_and_a_removed_one_leaves_the_counts(demo_output):
    act = node_tier_act(demo_output)
    assert f"{node_tier.JOINING} warmed from the cluster volume" in act
    assert "0 requests since it joined" in act
    removed = act.index(f"node {node_tier.LEAVING} is removed")
    joined = [t[node_tier.CHURN_CLUSTER][2] for t in tier_tables(act[:removed])]
    after = tier_tables(act[removed:act.index("ModelDeployment edge-chat")])
    assert joined[-1] == "3"
    assert after[-1][node_tier.CHURN_CLUSTER][:4] == ["Ready", "Ready", "2", "2"]


def test_node_tier_replicas_run_on_warm_nodes_reading_the_node_copy(demo_output):
    act = node_tier_act(demo_output)
    table = act[act.index("NODE WARM"):].split("\n\n")[0].splitlines()[1:]
    assert len(table) == len(node_tier.CLUSTERS)
    for line in table:
        cluster, _, node, warm, select, reason, reads, _ = line.split()
        assert (select, reason) == ("node", "(NodeCopyReady)") and warm != "no"
        assert reads.startswith(f"{node}:{node_tier.CACHE_PATH}/")


def test_no_node_tier_replica_pulls_its_engine_image(demo_output):
    act = node_tier_act(demo_output)
    table = act[act.index("NODE WARM"):].split("\n\n")[0].splitlines()[1:]
    assert [line.split()[-1] for line in table] == ["no"] * len(node_tier.CLUSTERS)


def test_the_engine_image_is_kept_on_every_opted_in_node_and_the_joining_one(demo_output):
    act = node_tier_act(demo_output)
    converged = tier_tables(act[:act.index("$ kubectl get nodes")])[-1]
    assert {c: row[-1] for c, row in converged.items()} == {c: "2/2" for c in node_tier.CLUSTERS}
    after = tier_tables(act[act.index(f"node {node_tier.LEAVING} is removed"):act.index("ModelDeployment edge-chat")])
    assert after[-1][node_tier.CHURN_CLUSTER][-1] == "2/2"


def test_the_engine_image_figure_states_the_size_bandwidth_and_both_waits(demo_output):
    act = node_tier_act(demo_output)
    assert f"{node_tier.JOINING}'s keeper, when the node joined: Successfully pulled image" in act
    assert "41 s at 200.0MiB/s without it warmed, 0 s with it" in act


def test_the_replica_on_the_joining_node_finds_the_engine_image_already_there(demo_output):
    act = node_tier_act(demo_output)
    table = act[act.index("NODE WARM"):].split("\n\n")[0].splitlines()[1:]
    churned = next(row for row in map(str.split, table) if row[0] == node_tier.CHURN_CLUSTER)
    assert churned[2] == node_tier.JOINING and churned[-1] == "no"
    line = next(line for line in act.splitlines() if f"the replica's pod on {node_tier.JOINING}:" in line)
    assert line.endswith("already present on machine")


def listing(act: str, command: str) -> list[list[str]]:
    """The rows `$ kubectl get <command>` printed, header first."""
    block = act[act.index(f"$ kubectl get {command}\n"):].split("\n\n")[0]
    return [line.split() for line in block.splitlines()[1:]]


def test_kubectl_get_shows_the_node_tier_in_its_columns(demo_output):
    act = node_tier_act(demo_output)
    ns, clusters = node_tier.NAMESPACE, node_tier.CLUSTERS
    cache = listing(act, f"modelcache -n {ns} {node_tier.CACHE}")
    nodes = cache[0].index("NODES")
    assert cache[1][nodes] == f"{2 * len(clusters)}/{2 * len(clusters)}"
    assert cache[0][-1] == "IMAGES" and cache[1][-3:] == ["1", "image", f"{2 * len(clusters)}/{2 * len(clusters)}"]
    fleet = listing(act, f"fleetcluster {' '.join(clusters)}")
    assert [row[0] for row in fleet[1:]] == list(clusters)
    assert all(len(row) > 1 and row[1] != "<none>" for row in fleet[1:])
    replicas = listing(act, f"modelreplica -n {ns}")
    assert [row[2:] for row in replicas[1:]] == [["Node", "Ready", "Warm"]] * len(clusters)


def test_each_node_tier_cluster_shows_the_bytes_it_read_from_the_hub(demo_output):
    act = node_tier_act(demo_output)
    table = act[act.index("HUB BYTES READ"):].split("\n\n")[0].splitlines()[1:]
    assert [line.split()[0] for line in table] == list(node_tier.CLUSTERS)


def test_every_manifest_of_the_node_tier_act_is_valid_against_its_xrd():
    for resource in [*map(node_tier.fleet_cluster, node_tier.CLUSTERS),
                     node_tier.grant(),
                     node_tier.model_cache("http://127.0.0.1:1", "127.0.0.1:5000/engines/vllm-openai:v0.11.0"),
                     node_tier.model_deployment("127.0.0.1:5000/engines/vllm-openai:v0.11.0")]:
        xrd.assert_valid(resource)


# --- the OCI act (fleetcache.devtools.demo.oci) ------------------------------------------------


def oci_act(output: str) -> str:
    return output[output.index("oci: a ModelPack"):]


def test_the_oci_act_publishes_from_the_volume_cluster_and_the_image_volume_clusters_warm_nothing(demo_output):
    act = oci_act(demo_output)
    table = act[act.index("CLUSTER    ROLE"):].split("\n\n")[0].splitlines()[1:]
    assert {row.split()[0]: row.split()[1:] for row in table} == {
        oci.VOLUME_CLUSTER: ["Publisher", "Ready", "Hydrated", "Origin"],
        **{c: ["Reader", "Ready", "ImageVolume", "-"] for c in oci.IMAGE_CLUSTERS}}


def test_two_oci_replicas_mount_the_artifact_and_one_its_volume_all_ready(demo_output):
    replicas = listing(oci_act(demo_output), f"modelreplicas -n {oci.NAMESPACE}")
    assert {row[0]: row[1:4] for row in replicas[1:]} == {
        oci.VOLUME_CLUSTER: ["Cache", "Ready", "CacheReady"],
        **{c: ["Image", "Ready", "ImageVolume"] for c in oci.IMAGE_CLUSTERS}}


def test_every_oci_replicas_model_holds_the_same_files_whatever_its_delivery(demo_output):
    replicas = listing(oci_act(demo_output), f"modelreplicas -n {oci.NAMESPACE}")
    assert replicas[0][-3:] == ["FLEETCACHE_MODEL", "FILES", "MANIFEST"]
    assert len({tuple(row[-2:]) for row in replicas[1:]}) == 1
    assert {row[-3] for row in replicas[1:] if row[1] == "Image"} == {"/var/cache/fleetcache-image"}


def test_the_origin_registry_serves_the_model_once_for_the_oci_fleet(demo_output):
    said = next(line for line in oci_act(demo_output).splitlines() if "the origin registry served" in line)
    assert "1.00x the model" in said and "(2.00x: one pull per image-volume cluster)" in said


def test_every_manifest_of_the_oci_act_is_valid_against_its_xrd():
    for resource in [*map(oci.fleet_cluster, oci.CLUSTERS), oci.grant(),
                     oci.model_cache("127.0.0.1:5000", "127.0.0.1:5001"), oci.model_deployment()]:
        xrd.assert_valid(resource)


def test_demo_realistic_timing_flag_plays_the_demo_at_the_providers_pace(monkeypatch):
    calls = []
    monkeypatch.setattr(demo, "run", lambda root, **kwargs: calls.append(kwargs) or 0)
    result = CliRunner().invoke(cli.main, ["demo", "--fast", "--realistic-timing"])
    assert result.exit_code == 0, result.output
    assert calls and calls[0]["realistic_timing"] is True and calls[0]["fast"] is True
