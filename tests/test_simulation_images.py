"""The simulated kubelet's engine images, against upstream (design/simulation.md, "Engine
images"): containers' images pulled per node from a real registry (docker-registry on loopback)
in size / bandwidth of the simulation's clock, a failed pull waiting in ErrImagePull then
ImagePullBackOff with the image manager's Events, a command the image cannot run ending in
StartError, a native sidecar gating the next init container on its startup probe, image GC
keeping what a present pod's containers (and image volumes) use, node.status.images, and pulls
from a private registry (htpasswd) with the pod's imagePullSecrets."""

from __future__ import annotations

import base64
import datetime
import json
import time

import pytest

from fleetcache.devtools.simulation import Clock, Cluster
from fleetcache.devtools.simulation.jobs import plain_http_to_loopback
from fleetcache.functions import read
from tests.support.registry import PASSWORD, USER, LoopbackRegistry

NS = "ml"
GiB = 1 << 30
COMMIT = "c" * 40
PAUSE = {"name": "keeper", "image": "registry.k8s.io/pause:3.10"}  # not pulled: stands for present


@pytest.fixture(scope="module")
def registry():
    with LoopbackRegistry() as started:
        yield started


@pytest.fixture(scope="module")
def private() -> str:
    """A private registry (htpasswd: USER, PASSWORD) holding a 1 GiB image; its host."""
    with LoopbackRegistry(users={USER: PASSWORD}) as started:
        started.push_sim_image("engines/private", "v1", size=GiB, executables=["vllm"])
        yield started.host


@pytest.fixture(scope="module")
def engine(registry) -> str:
    """A 10 GiB image that can run vllm and python3, by tag."""
    registry.push_sim_image("engines/vllm", "v1", size=10 * GiB, executables=["vllm", "python3"])
    return f"{registry.host}/engines/vllm:v1"


def daemonset(name: str, init: list[dict], volumes: tuple[dict, ...] = (),
              containers: tuple[dict, ...] = (PAUSE,), pull_secrets: tuple[str, ...] = ()) -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"initContainers": init, "containers": list(containers), "volumes": list(volumes),
                         "imagePullSecrets": [{"name": secret} for secret in pull_secrets]}}}}


def pull_secret(name: str, host: str, password: str = PASSWORD) -> dict:
    """A kubernetes.io/dockerconfigjson Secret with USER's credentials for `host`."""
    auth = base64.b64encode(f"{USER}:{password}".encode()).decode()
    config = json.dumps({"auths": {host: {"auth": auth}}}).encode()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": base64.b64encode(config).decode()}}


def puller(image: str, command: tuple[str, ...] = ("vllm", "--version"), name: str = "pull-0") -> dict:
    return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": list(command)}


class Fleet:
    """One cluster of one node on a compressed clock (1 s a round)."""

    def __init__(self, tmp_path, **node):
        self.clock = Clock(seconds_per_round=1.0)
        self.cluster = Cluster("c", tmp_path / "c", clock=self.clock)
        self.node = self.cluster.add_node("n1", **node)

    def round(self) -> None:
        self.clock.tick()
        self.cluster.tick(time.monotonic())

    def pod(self, owner: str) -> dict:
        pods = self.cluster.pods[("DaemonSet", NS, owner)]
        return self.cluster.objects[("Pod", NS, pods[0].name)]

    def init_status(self, owner: str, name: str) -> dict:
        statuses = self.pod(owner)["status"]["initContainerStatuses"]
        return next(s for s in statuses if s["name"] == name)

    def until(self, predicate, rounds: int = 60) -> int:
        """Rounds played until `predicate()` holds."""
        for played in range(1, rounds + 1):
            self.round()
            if predicate():
                return played
        raise AssertionError(f"not within {rounds} rounds")

    def events(self, reason: str) -> list[dict]:
        return [e for (kind, _, _), e in self.cluster.objects.items() if kind == "Event" and e["reason"] == reason]

    def later(self, seconds: float) -> None:
        self.clock.advance(datetime.timedelta(seconds=seconds))


def terminated(status: dict) -> dict:
    return read.get_path(status, "state.terminated", {}) or {}


def test_a_pull_takes_the_images_size_over_the_nodes_bandwidth(tmp_path, engine):
    fleet = Fleet(tmp_path, pull_bandwidth="1Gi")
    fleet.cluster.apply(daemonset("keep", [puller(engine)]))
    fleet.round()
    assert read.get_path(fleet.init_status("keep", "pull-0"), "state.waiting.reason") == "PodInitializing"
    assert [e["message"] for e in fleet.events("Pulling")] == [f'Pulling image "{engine}"']
    pulled = fleet.until(lambda: fleet.init_status("keep", "pull-0")["imageID"] != "")
    assert pulled == 10  # 10 GiB at 1 GiB/s: ten seconds of the clock


def test_a_command_the_image_can_run_exits_zero(tmp_path, engine):
    fleet = Fleet(tmp_path, pull_bandwidth="100Gi")
    fleet.cluster.apply(daemonset("keep", [puller(engine)]))
    fleet.until(lambda: terminated(fleet.init_status("keep", "pull-0")) != {})
    assert terminated(fleet.init_status("keep", "pull-0"))["exitCode"] == 0


def test_an_unknown_tag_waits_in_err_image_pull_then_image_pull_back_off_with_events(tmp_path, registry, engine):
    fleet = Fleet(tmp_path)
    missing = f"{registry.host}/engines/vllm:v9"
    fleet.cluster.apply(daemonset("keep", [puller(missing)]))
    fleet.round()
    waiting = read.get_path(fleet.init_status("keep", "pull-0"), "state.waiting")
    assert waiting["reason"] == "ErrImagePull"
    assert waiting["message"].startswith(f'failed to pull image "{missing}": 404')
    assert fleet.events("Failed")[0]["message"].startswith(f'Failed to pull image "{missing}": ')
    assert fleet.events("Failed")[0]["involvedObject"]["kind"] == "Pod"
    fleet.round()
    assert read.get_path(fleet.init_status("keep", "pull-0"), "state.waiting") == {
        "reason": "ImagePullBackOff", "message": f'Back-off pulling image "{missing}"'}
    assert [e["message"] for e in fleet.events("BackOff")] == [f'Back-off pulling image "{missing}"']


def test_a_command_whose_executable_the_image_lacks_terminates_128_start_error(tmp_path, engine):
    fleet = Fleet(tmp_path, pull_bandwidth="100Gi")
    fleet.cluster.apply(daemonset("keep", [puller(engine, ("/bin/sh", "-c", "true"))]))
    fleet.until(lambda: fleet.init_status("keep", "pull-0")["imageID"] != "")
    exited = terminated(fleet.init_status("keep", "pull-0")) or \
        read.get_path(fleet.init_status("keep", "pull-0"), "lastState.terminated")
    assert (exited["exitCode"], exited["reason"]) == (128, "StartError")
    assert 'exec: "/bin/sh": executable file not found in $PATH' in exited["message"]


def test_a_sidecar_gates_the_next_init_container_on_its_startup_probe(tmp_path, registry):
    registry.push_sim_image("tools/slot", "v1", size=1 << 20, executables=["slot"])
    fleet = Fleet(tmp_path)
    sidecar = {**puller(f"{registry.host}/tools/slot:v1", ("slot",), name="slot"), "restartPolicy": "Always",
               "volumeMounts": [{"name": "state", "mountPath": "/state"}],
               "startupProbe": {"exec": {"command": ["fleetcache-agent", "node-ready", "--dest", "/state",
                                                     "--commit", COMMIT]}}}
    fleet.cluster.apply(daemonset("keep", [sidecar, puller(f"{registry.host}/tools/slot:v1", ("slot",))],
                                  ({"name": "state", "hostPath": {"path": "/state", "type": "DirectoryOrCreate"}},)))
    for _ in range(5):
        fleet.round()
    assert "running" in fleet.init_status("keep", "slot")["state"]
    assert fleet.init_status("keep", "pull-0")["state"] == {"waiting": {}}
    state = fleet.node.host("/state")
    (state / "hub" / "m" / "snapshots" / COMMIT).mkdir(parents=True)
    (state / ".fleetcache").mkdir()
    (state / ".fleetcache" / "node-ready.json").write_text(json.dumps({"commit": COMMIT}))
    fleet.until(lambda: terminated(fleet.init_status("keep", "pull-0")).get("exitCode") == 0, rounds=10)
    assert "running" in fleet.init_status("keep", "slot")["state"]


def gc_fleet(tmp_path, registry) -> Fleet:
    """A 7 GiB image filesystem holding a 6 GiB image an exited init container of a live pod
    ran and a 0.5 GiB one of a deleted pod: 93 % full, over the 85 % threshold."""
    registry.push_sim_image("engines/kept", "v1", size=6 * GiB, executables=["vllm"])
    registry.push_sim_image("engines/gone", "v1", size=GiB // 2, executables=["vllm"])
    fleet = Fleet(tmp_path, pull_bandwidth="100Gi", imagefs="7Gi")
    fleet.cluster.apply(daemonset("live", [puller(f"{registry.host}/engines/kept:v1")]))
    fleet.cluster.apply(daemonset("old", [puller(f"{registry.host}/engines/gone:v1")]))
    fleet.until(lambda: all(terminated(fleet.init_status(o, "pull-0")) for o in ("live", "old")))
    fleet.cluster.delete(("DaemonSet", NS, "old"))
    fleet.later(200)  # past the 2 minutes' MinAge
    return fleet


def image_names(fleet: Fleet) -> list[str]:
    return [name for image in fleet.node.images.images.values() for name in image.repo_tags]


def test_image_gc_removes_an_image_no_present_container_uses(tmp_path, registry):
    fleet = gc_fleet(tmp_path, registry)
    fleet.cluster.image_gc("n1")
    assert f"{registry.host}/engines/gone:v1" not in image_names(fleet)


def test_image_gc_keeps_the_image_of_an_exited_init_container_of_a_live_pod(tmp_path, registry):
    fleet = gc_fleet(tmp_path, registry)
    fleet.cluster.image_gc("n1")
    assert f"{registry.host}/engines/kept:v1" in image_names(fleet)


def test_image_gc_removes_the_image_once_its_pod_is_deleted(tmp_path, registry):
    fleet = gc_fleet(tmp_path, registry)
    fleet.cluster.image_gc("n1")
    fleet.cluster.delete(("DaemonSet", NS, "live"))
    fleet.later(1)
    fleet.cluster.image_gc("n1")
    assert image_names(fleet) == []


def test_image_gc_cannot_remove_an_image_a_present_pod_mounts_as_a_volume(tmp_path, registry):
    fleet = gc_fleet(tmp_path, registry)
    reference = f"{registry.host}/engines/gone:v1"
    fleet.cluster.apply(daemonset("mount", [], ({"name": "model", "image": {"reference": reference}},),
                                  ({**PAUSE, "volumeMounts": [{"name": "model", "mountPath": "/m"}]},)))
    fleet.round()
    fleet.later(200)
    result = fleet.cluster.image_gc("n1")
    assert reference in image_names(fleet)
    assert result.errors and "image is in use by a container" in result.errors[0]


def test_node_status_lists_the_pulled_images_largest_first(tmp_path, registry):
    fleet = gc_fleet(tmp_path, registry)
    fleet.round()
    images = fleet.cluster.objects[("Node", "", "n1")]["status"]["images"]
    assert [(i["names"][1], i["sizeBytes"]) for i in images] == [
        (f"{registry.host}/engines/kept:v1", 6 * GiB), (f"{registry.host}/engines/gone:v1", GiB // 2)]
    assert images[0]["names"][0].startswith(f"{registry.host}/engines/kept@sha256:")


def test_an_image_volume_the_registry_lacks_is_a_failed_pull_event_on_its_pod(tmp_path, registry):
    fleet = Fleet(tmp_path)
    missing = f"{registry.host}/engines/vllm@sha256:" + "0" * 64
    fleet.cluster.apply(daemonset("mounts", [], volumes=(
        {"name": "image-0", "image": {"reference": missing, "pullPolicy": "IfNotPresent"}},)))
    fleet.round()
    events = [e for (kind, _, _), e in fleet.cluster.objects.items() if kind == "Event"]
    assert [(e["type"], e["reason"]) for e in events] == [("Warning", "Failed")]
    assert events[0]["message"].startswith(f'Failed to pull image "{missing}": failed to pull image "{missing}": 404')


def test_a_resolve_images_job_of_loopback_images_speaks_plain_http():
    loopback = ["resolve-images", "--image", "127.0.0.1:5000/engines/vllm:v1"]
    elsewhere = [*loopback, "--image", "docker.io/vllm/vllm-openai:v1"]
    assert plain_http_to_loopback(loopback) == [*loopback, "--plain-http"]
    assert plain_http_to_loopback(elsewhere) == elsewhere


def test_a_private_image_is_pulled_with_the_dockerconfigjson_secret_the_pod_names(tmp_path, private):
    fleet = Fleet(tmp_path, pull_bandwidth="100Gi")
    fleet.cluster.apply(pull_secret("regcred", private))
    fleet.cluster.apply(daemonset("keep", [puller(f"{private}/engines/private:v1")], pull_secrets=("regcred",)))
    fleet.until(lambda: terminated(fleet.init_status("keep", "pull-0")) != {})
    assert terminated(fleet.init_status("keep", "pull-0"))["exitCode"] == 0
    assert fleet.events("Failed") == []


@pytest.mark.parametrize("password", [None, "wrong"], ids=["no-secret", "wrong-password"])
def test_a_private_image_without_working_credentials_waits_in_err_image_pull_with_401(tmp_path, private, password):
    fleet = Fleet(tmp_path)
    if password:
        fleet.cluster.apply(pull_secret("regcred", private, password))
    image = f"{private}/engines/private:v1"
    fleet.cluster.apply(daemonset("keep", [puller(image)], pull_secrets=("regcred",) if password else ()))
    fleet.round()
    waiting = read.get_path(fleet.init_status("keep", "pull-0"), "state.waiting")
    assert waiting["reason"] == "ErrImagePull"
    assert waiting["message"].startswith(f'failed to pull image "{image}": 401 Unauthorized')


def test_a_pull_secret_that_does_not_exist_is_a_warning_event_and_the_pull_goes_on_anonymous(tmp_path, private):
    fleet = Fleet(tmp_path)
    image = f"{private}/engines/private:v1"
    fleet.cluster.apply(daemonset("keep", [puller(image)], pull_secrets=("missing",)))
    fleet.round()
    assert [(e["type"], e["message"]) for e in fleet.events("FailedToRetrieveImagePullSecret")] == [
        ("Warning", "Unable to retrieve some image pull secrets (missing); attempting to pull the image may not "
                    "succeed.")]
    waiting = read.get_path(fleet.init_status("keep", "pull-0"), "state.waiting")
    assert waiting["reason"] == "ErrImagePull"
    assert waiting["message"].startswith(f'failed to pull image "{image}": 401 Unauthorized')


def test_an_image_volume_from_a_private_registry_mounts_with_the_pods_pull_secret(tmp_path, private):
    fleet = Fleet(tmp_path)
    reference = f"{private}/engines/private:v1"
    fleet.cluster.apply(pull_secret("regcred", private))
    fleet.cluster.apply(daemonset(
        "mounts", [], ({"name": "model", "image": {"reference": reference, "pullPolicy": "IfNotPresent"}},),
        ({**PAUSE, "volumeMounts": [{"name": "model", "mountPath": "/m"}]},), pull_secrets=("regcred",)))
    fleet.round()
    assert fleet.pod("mounts")["status"]["phase"] == "Running"
    assert reference in image_names(fleet)
