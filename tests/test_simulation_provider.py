"""The simulation's provider-kubernetes and API server, against what upstream does
(design/simulation.md cites the code): refusals reported as Synced=False in the provider's
words, a remote object recreated or left alone by its management policies, and with
realistic timing, each Object re-read when the real provider would re-read it; a deleted
Object's finalizer kept until its remote object is gone (not while its cluster is unreachable
or a pod holds its PVC)."""

from __future__ import annotations

import time

from fleetcache.devtools.simulation import Clock, Cluster, Provider, ProviderFlags, RealisticTiming
from fleetcache.functions import read
from fleetcache.functions.k8s import job_mounts, objects

NS = "ml"
SECONDS_PER_ROUND = 5.0


def namespace() -> dict:
    return objects.remote_object("ns", NS, objects.namespace_manifest(NS), "c",
                                 management_policies=objects.CREATE_ONLY)


def configmap(phase: str = "Pending", **kwargs) -> dict:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "record", "namespace": NS}, "data": {"phase": phase}}
    return objects.remote_object("record", NS, manifest, "c", **kwargs)


def record(**kwargs) -> dict:
    """A record an agent writes: created once, never overwritten (as the composers compose it)."""
    return configmap(management_policies=objects.OBSERVE_CREATE_DELETE, **kwargs)


def job(image: str = "agent:v1", ttl: int | None = None) -> dict:
    spec: dict = {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "agent", "image": image,
                                                  "args": ["--help"]}]}}}
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    manifest = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "fetch", "namespace": NS}, "spec": spec}
    return objects.remote_object("fetch", NS, manifest, "c")


def synced(observed: dict) -> dict:
    return read.condition_of(observed, "Synced")


def plain(tmp_path) -> tuple[Provider, Cluster]:
    cluster = Cluster("c", tmp_path / "c")
    return Provider({"c": cluster}, list), cluster


def realistic(tmp_path, **flags) -> tuple[Provider, Cluster, Clock]:
    clock = Clock(SECONDS_PER_ROUND)
    cluster = Cluster("c", tmp_path / "c", clock=clock)
    return Provider({"c": cluster}, list, RealisticTiming(clock, ProviderFlags(**flags))), \
        cluster, clock


def rounds(clock: Clock, seconds: float) -> None:
    for _ in range(int(seconds // SECONDS_PER_ROUND)):
        clock.tick()


# --- the API server's refusals ----------------------------------------------------------------


def test_an_object_in_a_namespace_that_does_not_exist_is_refused_with_the_providers_message(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(configmap())
    assert synced(provider.observe(configmap())) == {
        "type": "Synced", "status": "False", "reason": "ReconcileError",
        "message": 'create failed: cannot create object: cannot create object: '
                   'namespaces "ml" not found'}
    assert cluster.get(("ConfigMap", NS, "record")) is None


def test_a_refused_object_is_created_once_its_namespace_exists(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(configmap())
    provider.apply(namespace())
    assert synced(provider.observe(configmap()))["status"] == "True"
    assert cluster.get(("ConfigMap", NS, "record")) is not None


def test_a_changed_job_template_is_refused_and_the_job_stays_as_it_was(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(job("agent:v1"))
    provider.apply(job("agent:v2"))
    observed = provider.observe(job("agent:v2"))
    assert synced(observed)["message"] == (
        'observe failed: cannot get desired state: cannot dry run SSA: Job.batch "fetch" is '
        "invalid: spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable")
    containers = cluster.get(("Job", NS, "fetch"))["spec"]["template"]["spec"]["containers"]
    assert containers[0]["image"] == "agent:v1"
    assert read.get_path(observed, "status.atProvider.manifest.metadata.name") == "fetch"


def test_a_changed_ttl_of_a_job_is_applied(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(job(ttl=60))
    provider.apply(job(ttl=120))
    assert synced(provider.observe(job(ttl=120)))["status"] == "True"
    assert cluster.get(("Job", NS, "fetch"))["spec"]["ttlSecondsAfterFinished"] == 120


def test_a_claim_past_the_namespaces_quota_is_refused_with_the_quota_plugins_message(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    cluster.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                   "metadata": {"name": "storage", "namespace": NS},
                   "spec": {"hard": {"requests.storage": "10Gi", "persistentvolumeclaims": "5"}}})
    claim = objects.remote_object("cache", NS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "cache", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}},
        "c")
    provider.apply(claim)
    assert synced(provider.observe(claim))["message"] == (
        'create failed: cannot create object: cannot create object: persistentvolumeclaims '
        '"cache" is forbidden: exceeded quota: storage, requested: requests.storage=20Gi, '
        "used: requests.storage=0, limited: requests.storage=10Gi")


# --- references: Secrets patched in from the control plane ----------------------------------


def docker_config_secret() -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "regcred", "namespace": NS},
            "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}}


def remote_secret(their_key: str = ".dockerconfigjson", our_key: str = "config.json") -> dict:
    ref = job_mounts.SecretRef("regcred", ((their_key, our_key),), "/registry", "spec.source.oci.pullSecretRef")
    return job_mounts.secret_object("pull", "pull", NS, "c", ref, {})


def with_secrets(tmp_path, *secrets: dict) -> tuple[Provider, Cluster]:
    cluster = Cluster("c", tmp_path / "c")
    provider = Provider({"c": cluster}, lambda: list(secrets))
    provider.apply(namespace())
    return provider, cluster


def test_a_secret_key_with_a_period_is_copied_under_the_key_it_names(tmp_path):
    provider, cluster = with_secrets(tmp_path, docker_config_secret())
    provider.apply(remote_secret())
    assert (cluster.get(("Secret", NS, "pull")) or {}).get("data") == {"config.json": "e30="}


def test_a_field_path_with_a_double_period_is_refused_as_crossplane_runtime_parses_it(tmp_path):
    provider, cluster = with_secrets(tmp_path, docker_config_secret())
    obj = remote_secret()
    obj["spec"]["references"][0]["patchesFrom"]["fieldPath"] = "data..dockerconfigjson"
    provider.apply(obj)
    assert synced(provider.observe(obj))["message"] == (
        "observe failed: cannot resolve resource references: cannot patch from referenced "
        "resource: unexpected '.' at position 5")
    assert cluster.get(("Secret", NS, "pull")) is None


def test_a_missing_referenced_secret_leaves_the_object_unsynced_and_nothing_created(tmp_path):
    provider, cluster = with_secrets(tmp_path)
    provider.apply(remote_secret())
    assert synced(provider.observe(remote_secret()))["message"] == (
        "observe failed: cannot resolve resource references: cannot get referenced resource: "
        'secrets "regcred" not found')
    assert cluster.get(("Secret", NS, "pull")) is None


def test_a_key_the_secret_lacks_is_named_in_the_providers_error(tmp_path):
    provider, _ = with_secrets(tmp_path, docker_config_secret())
    obj = remote_secret(their_key="token")
    provider.apply(obj)
    assert synced(provider.observe(obj))["message"].endswith(
        "cannot patch from referenced resource: data.token: no such field")


# --- a remote object that is gone -------------------------------------------------------------


def test_a_deleted_remote_object_is_created_again_by_an_object_that_may_create(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(configmap())
    cluster.delete(("ConfigMap", NS, "record"))
    provider.observe(configmap())
    assert cluster.get(("ConfigMap", NS, "record")) is not None


def test_a_deleted_remote_object_an_object_only_observes_keeps_its_last_observation(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(configmap())
    observing = configmap(management_policies=objects.OBSERVE_DELETE)
    provider.apply(observing)
    cluster.delete(("ConfigMap", NS, "record"))
    observed = provider.observe(observing)
    assert cluster.get(("ConfigMap", NS, "record")) is None
    assert read.get_path(observed, "status.atProvider.manifest.data") == {"phase": "Pending"}


# --- a deleted Object ----------------------------------------------------------------------------


def claim() -> dict:
    manifest = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "cache", "namespace": NS},
                "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}
    return objects.remote_object("cache", NS, manifest, "c")


def engine_mounting_the_claim() -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "engine", "namespace": NS},
            "spec": {"template": {"spec": {"containers": [{"name": "engine"}], "volumes": [
                {"name": "cache", "persistentVolumeClaim": {"claimName": "cache"}}]}}}}


def test_a_deleted_objects_finalizer_waits_while_its_cluster_is_unreachable(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(configmap())
    provider.unreachable.add("c")
    assert provider.delete(configmap()) is False
    assert cluster.get(("ConfigMap", NS, "record")) is not None
    provider.unreachable.clear()
    assert provider.delete(configmap()) is True
    assert cluster.get(("ConfigMap", NS, "record")) is None


def test_an_unreachable_cluster_leaves_its_objects_synced_false(tmp_path):
    provider, _ = plain(tmp_path)
    provider.unreachable.add("c")
    assert synced(provider.observe(namespace()))["status"] == "False"
    assert "unreachable" in synced(provider.observe(namespace()))["message"]


def test_a_pvc_a_pod_uses_stays_terminating_and_keeps_its_objects_finalizer(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(claim())
    cluster.tick(time.monotonic())
    cluster.apply(engine_mounting_the_claim())
    (cluster.volume_dir(NS, "cache") / "model").write_text("weights")
    assert provider.delete(claim()) is False
    cluster.tick(time.monotonic())
    assert "deletionTimestamp" in cluster.get(("PersistentVolumeClaim", NS, "cache"))["metadata"]
    assert (cluster.volume_dir(NS, "cache") / "model").read_text() == "weights"


def test_a_terminating_pvc_goes_with_its_volume_once_no_pod_uses_it(tmp_path):
    provider, cluster = plain(tmp_path)
    provider.apply(namespace())
    provider.apply(claim())
    cluster.tick(time.monotonic())
    cluster.apply(engine_mounting_the_claim())
    provider.delete(claim())
    cluster.tick(time.monotonic())
    assert cluster.get(("PersistentVolumeClaim", NS, "cache")) is not None
    cluster.delete(("Deployment", NS, "engine"))
    cluster.tick(time.monotonic())
    assert cluster.get(("PersistentVolumeClaim", NS, "cache")) is None
    assert not cluster.volume_dir(NS, "cache").exists()


# --- realistic timing ---------------------------------------------------------------------------


def changed_remote(cluster: Cluster) -> None:
    cluster.objects[("ConfigMap", NS, "record")]["data"] = {"phase": "Ready"}


def seen_phase(provider: Provider, obj: dict) -> str:
    return read.get_path(provider.observe(obj), "status.atProvider.manifest.data.phase", "")


def settled(provider: Provider, clock: Clock, obj: dict) -> None:
    """Created, then re-read once after the create's requeue."""
    provider.apply(namespace())
    provider.apply(obj)
    clock.tick()
    provider.observe(obj)


def test_a_ready_object_is_reread_only_after_the_poll_interval(tmp_path):
    provider, cluster, clock = realistic(tmp_path)
    settled(provider, clock, record())
    changed_remote(cluster)
    rounds(clock, 600 * 0.9 - SECONDS_PER_ROUND)
    assert seen_phase(provider, record()) == "Pending"
    rounds(clock, 600 * 0.2)
    assert seen_phase(provider, record()) == "Ready"


def test_an_object_not_ready_is_reread_every_30_seconds(tmp_path):
    provider, cluster, clock = realistic(tmp_path)
    waiting = record(readiness_query="object.data.phase == 'Ready'")
    settled(provider, clock, waiting)
    changed_remote(cluster)
    rounds(clock, 30 * 1.1 + SECONDS_PER_ROUND)
    assert seen_phase(provider, waiting) == "Ready"


def test_with_watches_a_watched_objects_change_is_read_at_once(tmp_path):
    provider, cluster, clock = realistic(tmp_path, enable_watches=True)
    watched = record(watch=True)
    settled(provider, clock, watched)
    changed_remote(cluster)
    assert seen_phase(provider, watched) == "Ready"


def test_without_the_providers_watches_flag_spec_watch_changes_nothing(tmp_path):
    provider, cluster, clock = realistic(tmp_path)
    watched = record(watch=True)
    settled(provider, clock, watched)
    changed_remote(cluster)
    clock.tick()
    assert seen_phase(provider, watched) == "Pending"


def test_a_changed_spec_is_reconciled_at_once(tmp_path):
    provider, cluster, clock = realistic(tmp_path)
    settled(provider, clock, configmap())
    provider.apply(configmap("Changed"))
    assert cluster.get(("ConfigMap", NS, "record"))["data"] == {"phase": "Changed"}


def test_drift_of_an_object_that_may_update_is_undone_at_its_next_reconcile(tmp_path):
    provider, cluster, clock = realistic(tmp_path, enable_watches=True)
    settled(provider, clock, configmap(watch=True))
    changed_remote(cluster)
    assert seen_phase(provider, configmap(watch=True)) == "Pending"
    assert cluster.get(("ConfigMap", NS, "record"))["data"] == {"phase": "Pending"}


def test_a_refused_object_is_retried_with_backoff(tmp_path):
    provider, cluster, clock = realistic(tmp_path)
    provider.apply(configmap())
    provider.apply(namespace())
    provider.observe(configmap())
    assert cluster.get(("ConfigMap", NS, "record")) is None  # the retry is a second away
    clock.tick()
    provider.observe(configmap())
    assert cluster.get(("ConfigMap", NS, "record")) is not None


def test_a_finished_job_is_collected_ttl_seconds_after_it_finished(tmp_path):
    provider, cluster, clock = realistic(tmp_path)
    provider.apply(namespace())
    provider.apply(job(ttl=30))
    deadline = time.monotonic() + 30
    while not read.is_true(cluster.get(("Job", NS, "fetch")), "Failed"):
        assert time.monotonic() < deadline, "the Job never finished"
        clock.tick()
        cluster.tick(time.monotonic())
        time.sleep(0.05)
    rounds(clock, 25)
    cluster.tick(time.monotonic())
    assert cluster.get(("Job", NS, "fetch")) is not None
    rounds(clock, 10)
    cluster.tick(time.monotonic())
    assert cluster.get(("Job", NS, "fetch")) is None
