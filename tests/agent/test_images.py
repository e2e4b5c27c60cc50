"""The engine images' agent commands: `resolve-images` pins each image to a digest, the keeper pod's
`image-slot` holds a warm slot while the node pulls, `image-keep` says the pulls are done, and
`image-status` summarizes the keeper pods (the summary a table of pure cases).

resolve-images runs against the CNCF distribution registry on loopback (tests/support/registry.py);
the slot and keep commands as the real console script, signalled as the kubelet stops them."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from kubernetes.client import (
    CoreV1Event,
    CoreV1EventList,
    V1Container,
    V1ObjectMeta,
    V1ObjectReference,
    V1Pod,
    V1PodList,
    V1PodSpec,
)

from fleetcache.agent import cli
from fleetcache.agent.errors import AgentError
from fleetcache.agent.hub import RetryPolicy
from fleetcache.agent.image_keeper import DONE_FILE, SLOT_FILE, hold_for_pulls
from fleetcache.agent.image_pins import image_client, image_credentials, image_reference, normalized, pin
from fleetcache.agent.image_summary import summarize
from fleetcache.agent.slots import LeaseSlots
from tests.agent.conftest import AGENT, run_agent
from tests.agent.test_slots import NS, FakeCoordination
from tests.support.registry import PASSWORD, USER, FakeRegistry, LoopbackRegistry, descriptor, sha256

ENV = {"FLEETCACHE_READ_TIMEOUT": "5"}
VLLM = "registry.example.com/vllm/vllm-openai@sha256:" + "a" * 64
TOOLS = "registry.example.com/tools/probe@sha256:" + "b" * 64
IMAGE_LAYER = "application/vnd.oci.image.layer.v1.tar"


# -- the summary: pods and events as the API serves them ---------------------------------------

def waiting(reason: str, message: str = "") -> dict:
    return {"waiting": {"reason": reason, "message": message}}


def terminated(code: int, message: str = "") -> dict:
    return {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}}


RUNNING = {"running": {"startedAt": "2026-12-03T10:00:00Z"}}


def command_pod(node: str | None, *states: dict, ready: bool = False, last: dict | None = None,
                name: str = "") -> dict:
    """A keeper pod of the command shape: pull-<i> init containers, one state each."""
    images = [VLLM, TOOLS][:len(states)]
    statuses = [{"name": f"pull-{i}", "image": image, "state": state, "lastState": last or {}}
                for i, (image, state) in enumerate(zip(images, states, strict=True))]
    return {"metadata": {"name": name or f"keeper-{node}", "uid": f"uid-{node}",
                         "creationTimestamp": "2026-12-03T10:00:00Z"},
            "spec": {**({"nodeName": node} if node else {}),
                     "initContainers": [{"name": "slot", "image": "agent"},
                                        *({"name": f"pull-{i}", "image": image} for i, image in enumerate(images))],
                     "containers": [{"name": "keeper", "image": "agent"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "initContainerStatuses": statuses}}


def volume_pod(node: str, ready: bool = False) -> dict:
    """A keeper pod of the image-volume shape: image-<i> volumes, no container started unless ready."""
    return {"metadata": {"name": f"keeper-{node}", "uid": f"uid-{node}"},
            "spec": {"nodeName": node, "containers": [{"name": "keeper", "image": "agent"}],
                     "volumes": [{"name": "image-0", "image": {"reference": VLLM, "pullPolicy": "IfNotPresent"}},
                                 {"name": "state", "emptyDir": {}}]},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": [{"name": "keeper", "state": RUNNING if ready
                                              else waiting("ContainerCreating")}]}}


def event(node: str, reason: str, message: str, at: str) -> dict:
    return {"metadata": {"name": f"keeper-{node}.{at}"}, "reason": reason, "message": message, "type": "Warning",
            "lastTimestamp": at, "involvedObject": {"kind": "Pod", "name": f"keeper-{node}", "uid": f"uid-{node}"}}


PULL_MESSAGE = f'Failed to pull image "{VLLM}": rpc error: code = NotFound desc = failed to resolve reference'


def test_a_ready_keeper_pod_is_a_ready_node_holding_its_images():
    summary = summarize([command_pod("n1", terminated(0), ready=True)], []).as_dict()
    assert summary == {"desired": 1, "ready": 1, "pulling": 0, "failed": 0,
                       "images": [{"image": VLLM, "readyNodes": 1}], "firstFailure": None}


def test_a_pull_still_running_is_a_pulling_node():
    summary = summarize([command_pod("n1", waiting("PodInitializing"))], []).as_dict()
    assert (summary["pulling"], summary["failed"], summary["images"]) == (1, 0, [{"image": VLLM, "readyNodes": 0}])


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"])
def test_a_pull_waiting_on_a_pull_error_fails_the_node_with_the_kubelets_reason(reason):
    summary = summarize([command_pod("n1", waiting(reason, PULL_MESSAGE))], []).as_dict()
    assert (summary["failed"], summary["pulling"]) == (1, 0)
    assert summary["firstFailure"] == {"node": "n1", "reason": reason, "message": PULL_MESSAGE[:117] + "..."}


def test_a_command_that_exited_non_zero_fails_the_node_naming_the_container_and_image():
    pod = command_pod("n1", terminated(1, "vllm: error: unrecognized arguments"))
    failure = summarize([pod], []).as_dict()["firstFailure"]
    assert failure == {"node": "n1", "reason": "CommandFailed",
                       "message": f"pull-0 ({VLLM}) exited 1: vllm: error: unrecognized arguments"}


def test_a_crash_loop_after_a_non_zero_exit_fails_the_node_with_that_exit_code():
    pod = command_pod("n1", waiting("CrashLoopBackOff", "back-off 40s restarting failed container"),
                      last=terminated(137))
    failure = summarize([pod], []).as_dict()["firstFailure"]
    assert failure["reason"] == "CommandFailed" and failure["message"].startswith(f"pull-0 ({VLLM}) exited 137: ")


def test_an_image_volume_pod_with_a_failed_pull_event_fails_the_node():
    events = [event("n1", "Pulling", f'Pulling image "{VLLM}"', "2026-12-03T10:00:00Z"),
              event("n1", "Failed", PULL_MESSAGE, "2026-12-03T10:00:05Z")]
    failure = summarize([volume_pod("n1")], events).as_dict()["firstFailure"]
    assert failure == {"node": "n1", "reason": "ErrImagePull", "message": PULL_MESSAGE[:117] + "..."}


def test_an_image_volume_pod_in_pull_backoff_fails_the_node_with_image_pull_backoff():
    events = [event("n1", "Failed", PULL_MESSAGE, "2026-12-03T10:00:05Z"),
              event("n1", "BackOff", f'Back-off pulling image "{VLLM}"', "2026-12-03T10:00:20Z")]
    assert summarize([volume_pod("n1")], events).as_dict()["firstFailure"]["reason"] == "ImagePullBackOff"


def test_an_image_volume_pod_whose_newest_pull_event_succeeded_is_still_pulling():
    events = [event("n1", "Failed", PULL_MESSAGE, "2026-12-03T10:00:05Z"),
              event("n1", "Pulling", f'Pulling image "{VLLM}"', "2026-12-03T10:00:30Z")]
    summary = summarize([volume_pod("n1")], events).as_dict()
    assert (summary["pulling"], summary["failed"]) == (1, 0)


def test_a_ready_image_volume_pod_counts_its_volume_images_ready():
    summary = summarize([volume_pod("n1", ready=True), volume_pod("n2")], []).as_dict()
    assert summary["images"] == [{"image": VLLM, "readyNodes": 1}] and (summary["ready"], summary["pulling"]) == (1, 1)


def test_a_pod_not_yet_scheduled_counts_nowhere():
    summary = summarize([command_pod(None, waiting("PodInitializing")), command_pod("n1", terminated(0), ready=True)],
                        []).as_dict()
    assert (summary["desired"], summary["ready"], summary["pulling"]) == (1, 1, 0)


def test_the_first_failure_is_the_failed_node_with_the_smallest_name():
    pods = [command_pod(node, waiting("ErrImagePull", f"on {node}")) for node in ("n3", "n1", "n2")]
    summary = summarize(pods, []).as_dict()
    assert summary["failed"] == 3 and summary["firstFailure"]["node"] == "n1"


def test_each_image_counts_the_nodes_whose_pull_exited_zero():
    pods = [command_pod("n1", terminated(0), terminated(0), ready=True),
            command_pod("n2", terminated(0), RUNNING)]
    assert summarize(pods, []).as_dict()["images"] == [{"image": VLLM, "readyNodes": 2},
                                                       {"image": TOOLS, "readyNodes": 1}]


def test_of_two_pods_on_a_node_the_one_not_being_deleted_speaks_for_it():
    old = command_pod("n1", waiting("ErrImagePull", "old digest"), name="keeper-old")
    old["metadata"]["deletionTimestamp"] = "2026-12-03T10:01:00Z"
    summary = summarize([old, command_pod("n1", terminated(0), ready=True)], []).as_dict()
    assert (summary["desired"], summary["ready"], summary["failed"]) == (1, 1, 0)


def test_malformed_pods_and_events_read_as_absent():
    assert summarize([{"spec": "x"}, 7, {"spec": {"nodeName": "n1"}, "status": []}], [None]).as_dict()["desired"] == 1


# -- image-status, the doing --------------------------------------------------------------------

def test_image_status_once_writes_the_summary_as_the_status_files_one_key(tmp_path):
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"pods": [command_pod("n1", terminated(0), ready=True)], "events": []}))
    status = tmp_path / "status.json"
    result = run_agent("image-status", "--namespace", "team-a", "--selector", "a=b", "--pods-file", str(pods),
                       "--status-file", str(status), "--once")
    assert result.code == 0, result.stderr
    written = json.loads(status.read_text())
    assert list(written) == ["status.json"] and json.loads(written["status.json"])["ready"] == 1


def test_image_status_passes_again_every_interval_of_its_environment(tmp_path):
    pods, status = tmp_path / "pods.json", tmp_path / "status.json"
    pods.write_text(json.dumps({"pods": [], "events": []}))
    proc = subprocess.Popen([AGENT, "image-status", "--namespace", "team-a", "--selector", "a=b",
                             "--pods-file", str(pods), "--status-file", str(status)],
                            env={**os.environ, "FLEETCACHE_IMAGE_STATUS_INTERVAL": "0.1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: status.exists())
        pods.write_text(json.dumps({"pods": [command_pod("n1", RUNNING)], "events": []}))
        assert wait_for(lambda: json.loads(json.loads(status.read_text())["status.json"])["desired"] == 1, 5)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


class KeeperCore:
    """CoreV1Api as image-status calls it: the keeper pods, the namespace's Pod events, one merge patch."""

    def __init__(self):
        self.calls, self.patches = [], []

    def list_namespaced_pod(self, namespace, label_selector):
        self.calls.append(("pods", namespace, label_selector))
        pod = V1Pod(metadata=V1ObjectMeta(name="keeper-n1", uid="uid-n1"),
                    spec=V1PodSpec(node_name="n1", containers=[V1Container(name="keeper", image="agent")],
                                   init_containers=[V1Container(name="pull-0", image=VLLM)]),
                    status={"initContainerStatuses": [{"name": "pull-0", "state": waiting("ErrImagePull", "no")}]})
        return V1PodList(items=[pod])

    def list_namespaced_event(self, namespace, field_selector):
        self.calls.append(("events", namespace, field_selector))
        return CoreV1EventList(items=[CoreV1Event(metadata=V1ObjectMeta(name="e"), reason="Failed", message="pull",
                                                  involved_object=V1ObjectReference(kind="Pod", name="keeper-n1"))])

    def patch_namespaced_config_map(self, name, namespace, body):
        self.patches.append((namespace, name, body))


def test_image_status_lists_the_keeper_pods_and_their_events_and_patches_the_configmap():
    core = KeeperCore()
    argv = ["image-status", "--namespace", "team-a", "--selector", "fleetcache.dev/model-cache=qwen",
            "--configmap", "team-a/qwen-images-status", "--once"]
    assert cli.main(argv, configmap_api=lambda: core) == 0
    assert core.calls == [("pods", "team-a", "fleetcache.dev/model-cache=qwen"),
                          ("events", "team-a", "involvedObject.kind=Pod")]
    namespace, name, body = core.patches[0]
    assert (namespace, name, list(body["data"])) == ("team-a", "qwen-images-status", ["status.json"])
    assert json.loads(body["data"]["status.json"])["firstFailure"] == {"node": "n1", "reason": "ErrImagePull",
                                                                       "message": "no"}


def test_image_status_wants_one_place_to_write(tmp_path):
    result = run_agent("image-status", "--namespace", "a", "--selector", "a=b", "--pods-file", str(tmp_path / "p"),
                       "--once")
    assert result.code == 15 and "--configmap" in result.stderr


# -- image-slot and image-keep ------------------------------------------------------------------

def wait_for(condition, timeout=20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    return False


def slot_sidecar(tmp_path: Path, *extra: str) -> subprocess.Popen:
    (tmp_path / "slots").mkdir(exist_ok=True)
    (tmp_path / "slots/slot-0").touch()
    return subprocess.Popen([AGENT, "image-slot", "--state", str(tmp_path / "state"), "--slots-dir",
                             str(tmp_path / "slots"), "--holder", "team-a/qwen/n1", *extra],
                            env={**os.environ, "FLEETCACHE_NODE_SLOT_POLL_SECONDS": "0.05"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def probe(tmp_path: Path) -> int:
    return run_agent("image-slot", "--state", str(tmp_path / "state"), "--held").code


def slot_holder(tmp_path: Path) -> str:
    return (tmp_path / "slots/slot-0").read_text()


def test_the_probe_fails_until_a_slot_is_held_or_the_pulls_are_done(tmp_path):
    (tmp_path / "state").mkdir()
    assert probe(tmp_path) == 1
    (tmp_path / "state" / DONE_FILE).write_text("{}")
    assert probe(tmp_path) == 0


def test_the_sidecar_holds_a_slot_until_the_keeper_says_done_then_idles_until_stopped(tmp_path):
    proc = slot_sidecar(tmp_path)
    try:
        assert wait_for(lambda: probe(tmp_path) == 0 and slot_holder(tmp_path) == "team-a/qwen/n1")
        keep = subprocess.Popen([AGENT, "image-keep", "--state", str(tmp_path / "state")])
        assert wait_for(lambda: slot_holder(tmp_path) == "")
        assert proc.poll() is None and keep.poll() is None
        keep.send_signal(signal.SIGTERM)
        assert keep.wait(10) == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_the_sidecar_waits_while_every_slot_is_held(tmp_path):
    (tmp_path / "slots").mkdir()
    with open(tmp_path / "slots/slot-0", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        proc = slot_sidecar(tmp_path)
        try:
            assert wait_for(lambda: (tmp_path / "state").is_dir())
            time.sleep(0.3)
            assert probe(tmp_path) == 1
            fcntl.flock(other, fcntl.LOCK_UN)
            assert wait_for(lambda: probe(tmp_path) == 0)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0


def test_the_sidecar_releases_its_slot_after_the_pull_deadline(tmp_path):
    proc = slot_sidecar(tmp_path, "--pull-deadline", "1")
    try:
        assert wait_for(lambda: slot_holder(tmp_path) == "team-a/qwen/n1")
        assert wait_for(lambda: slot_holder(tmp_path) == "", 10)
        assert not (tmp_path / "state" / DONE_FILE).exists() and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_a_sidecar_stopped_while_waiting_for_a_slot_exits_zero(tmp_path):
    (tmp_path / "slots").mkdir()
    with open(tmp_path / "slots/slot-0", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        proc = slot_sidecar(tmp_path)
        assert wait_for(lambda: (tmp_path / "state").is_dir())  # started: its flags are read
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_the_sidecar_takes_one_of_the_clusters_warm_slot_leases_and_clears_it_when_done(tmp_path):
    api = FakeCoordination(2)
    state = tmp_path / "state"
    state.mkdir()
    seen = []
    threading.Timer(0.3, lambda: (seen.append(api.holder("node-warm-slot-0")),
                                  (state / DONE_FILE).write_text("{}"))).start()
    ended = hold_for_pulls(state, LeaseSlots(api, NS, "team-a/qwen/n1"), deadline=30, poll=0.05)
    assert (ended, seen, api.holder("node-warm-slot-0")) == ("done", ["team-a/qwen/n1"], None)
    assert json.loads((state / SLOT_FILE).read_text()) == {"slot": "node-warm-slot-0", "holder": "team-a/qwen/n1"}


def test_a_sidecar_restarted_after_the_pulls_takes_no_slot(tmp_path):
    api = FakeCoordination(1)
    (tmp_path / DONE_FILE).write_text("{}")
    assert hold_for_pulls(tmp_path, LeaseSlots(api, NS, "team-a/qwen/n1"), deadline=30, poll=0.05) == "done before"
    assert api.holder("node-warm-slot-0") is None


@pytest.mark.parametrize("args,flag", [
    (["--holder", "h"], "--slots-namespace"),
    (["--slots-dir", "d", "--slots-namespace", "ns", "--holder", "h"], "--slots-namespace"),
    (["--slots-dir", "d"], "--holder"),
    (["--slots-dir", "d", "--holder", "h", "--pull-deadline", "0"], "--pull-deadline"),
    (["--held", "--holder", "h"], "--holder"),
])
def test_image_slot_refuses_a_bad_flag_by_name(tmp_path, args, flag):
    result = run_agent("image-slot", "--state", str(tmp_path / "state"), *args)
    assert result.code == 15 and f"{flag}:" in result.stderr


def test_image_keep_writes_done_and_exits_zero_when_stopped(tmp_path):
    keep = subprocess.Popen([AGENT, "image-keep", "--state", str(tmp_path / "state")], stderr=subprocess.PIPE)
    assert wait_for(lambda: (tmp_path / "state" / DONE_FILE).exists())
    keep.send_signal(signal.SIGTERM)
    assert keep.wait(10) == 0


# -- resolve-images against docker-registry on loopback ----------------------------------------

def push_engine(registry: LoopbackRegistry, repository: str, tag: str, seed: bytes = b"vllm") -> str:
    layer = seed * 100
    return registry.push_image(repository, tag, [(descriptor(IMAGE_LAYER, layer), layer)])


def resolve_images(*images: str, extra: tuple[str, ...] = ()):
    return run_agent("resolve-images", *(arg for image in images for arg in ("--image", image)), "--plain-http",
                     *extra, env=ENV)


def test_a_tag_resolves_to_the_digest_of_the_manifest_the_registry_serves(registry):
    digest = push_engine(registry, "vllm/vllm-openai", "v0.11.0")
    result = resolve_images(f"{registry.host}/vllm/vllm-openai:v0.11.0")
    assert result.code == 0, result.stderr
    assert result.json == {"images": [{"image": f"{registry.host}/vllm/vllm-openai:v0.11.0", "digest": digest}]}


def test_a_reference_by_digest_is_kept_once_the_registry_holds_it(registry):
    digest = push_engine(registry, "tools/probe", "v1", b"probe")
    image = f"{registry.host}/tools/probe@{digest}"
    assert resolve_images(image).json["images"] == [{"image": image, "digest": digest}]


def test_images_are_recorded_in_the_order_given_as_resolved_records(registry, tmp_path):
    first, second = push_engine(registry, "a/one", "v1", b"one"), push_engine(registry, "a/two", "v1", b"two")
    progress = tmp_path / "progress.json"
    result = resolve_images(f"{registry.host}/a/two:v1", f"{registry.host}/a/one:v1",
                            extra=("--progress-file", str(progress)))
    assert [i["digest"] for i in result.json["images"]] == [second, first]
    assert json.loads(progress.read_text()) == {"phase": "Resolved", "images": result.json["images"],
                                                "reason": None, "message": None}


def test_the_progress_configmap_holds_the_images_as_json_text(registry):
    digest = push_engine(registry, "vllm/vllm-openai", "cm")
    core = KeeperCore()
    core.patch_namespaced_config_map = lambda name, namespace, body: core.patches.append((namespace, name, body))
    argv = ["resolve-images", "--image", f"{registry.host}/vllm/vllm-openai:cm", "--plain-http",
            "--progress-configmap", "team-a/qwen-images-resolve"]
    assert cli.main(argv, configmap_api=lambda: core) == 0
    data = core.patches[-1][2]["data"]
    assert data["phase"] == "Resolved"
    assert json.loads(data["images"]) == [{"image": f"{registry.host}/vllm/vllm-openai:cm", "digest": digest}]


def test_a_missing_tag_is_source_not_found_naming_the_image_and_the_field(registry, tmp_path):
    progress = tmp_path / "progress.json"
    result = resolve_images(f"{registry.host}/vllm/vllm-openai:nope", extra=("--progress-file", str(progress)))
    record = json.loads(progress.read_text())
    assert (result.code, record["phase"], record["reason"]) == (11, "Failed", "SourceNotFound")
    assert f"image {registry.host}/vllm/vllm-openai:nope" in record["message"]
    assert "spec.images[].image" in record["message"]


def test_a_malformed_image_is_refused_naming_the_flag(registry):
    result = resolve_images(f"{registry.host}/vllm/vllm-openai")
    assert result.code == 15 and "--image:" in result.stderr and "neither a tag nor a digest" in result.stderr


def docker_config(tmp_path: Path, host: str, password: str = PASSWORD) -> Path:
    config = tmp_path / "dockerconfig.json"
    config.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{USER}:{password}".encode()).decode()}}}))
    return config


def test_a_private_registry_is_resolved_with_the_docker_configs_basic_credentials(private_registry, tmp_path):
    digest = push_engine(private_registry, "vllm/vllm-openai", "private")
    config = docker_config(tmp_path, private_registry.host)
    result = resolve_images(f"{private_registry.host}/vllm/vllm-openai:private",
                            extra=("--registry-config", str(config)))
    assert result.code == 0, result.stderr
    assert result.json["images"][0]["digest"] == digest and PASSWORD not in result.stderr


def test_each_image_is_resolved_with_the_first_registry_config_holding_its_host(private_registry, registry, tmp_path):
    private = push_engine(private_registry, "vllm/vllm-openai", "two-configs")
    public = push_engine(registry, "sglang/sglang", "two-configs", seed=b"sglang")
    (tmp_path / "other").mkdir()
    elsewhere = docker_config(tmp_path / "other", "registry.example.com", password="not-this-one")
    config = docker_config(tmp_path, private_registry.host)
    result = resolve_images(f"{private_registry.host}/vllm/vllm-openai:two-configs",
                            f"{registry.host}/sglang/sglang:two-configs",
                            extra=("--registry-config", str(elsewhere), "--registry-config", str(config)))
    assert result.code == 0, result.stderr
    assert [i["digest"] for i in result.json["images"]] == [private, public]


def test_a_private_registry_without_credentials_is_auth_failed(private_registry):
    push_engine(private_registry, "vllm/vllm-openai", "anon")
    result = resolve_images(f"{private_registry.host}/vllm/vllm-openai:anon")
    assert result.code == 10 and "AuthFailed" in result.stderr and "--registry-config" in result.stderr


def test_a_bearer_token_registry_is_resolved_and_its_token_never_logged(tmp_path):
    with FakeRegistry("vllm/vllm-openai", token_users={USER: PASSWORD}) as fake:
        digest = fake.add_image("v1", [(descriptor(IMAGE_LAYER, b"layer"), b"layer")], (IMAGE_LAYER, b"{}"))
        config = docker_config(tmp_path, fake.host)
        result = resolve_images(f"{fake.host}/vllm/vllm-openai:v1", extra=("--registry-config", str(config)))
    assert result.code == 0, result.stderr
    assert result.json["images"][0]["digest"] == digest
    assert fake.token not in result.stderr + result.stdout and PASSWORD not in result.stderr


def test_an_index_is_pinned_as_the_index_so_each_node_picks_its_platform():
    with FakeRegistry("vllm/vllm-openai") as fake:
        child = fake.add_image("amd64", [(descriptor(IMAGE_LAYER, b"layer"), b"layer")], (IMAGE_LAYER, b"{}"))
        index = fake.add_index("v1", [child])
        result = resolve_images(f"{fake.host}/vllm/vllm-openai:v1")
    assert result.json["images"][0]["digest"] == index != child


class Answer:
    def __init__(self, data: bytes, headers: dict):
        self.data, self.headers = data, headers


class SilentRegistry:
    """A registry client whose answers name no digest (HEAD) or a wrong one (GET)."""

    def __init__(self, body: bytes, said_on_get: str = ""):
        self.body, self.said_on_get, self.asked = body, said_on_get, []

    def request(self, method, url, headers=None):
        self.asked.append(method)
        return Answer(b"" if method == "HEAD" else self.body,
                      {"Docker-Content-Digest": self.said_on_get} if method == "GET" and self.said_on_get else {})


def silent_client(stub: SilentRegistry):
    client = image_client("registry.example.com/vllm/vllm-openai:v1", (), False, RetryPolicy(attempts=1), 5,
                          lambda secrets: None)
    client.request = stub.request  # type: ignore[method-assign]
    return client


def test_a_registry_that_names_no_digest_has_the_manifest_hashed():
    stub = SilentRegistry(b'{"schemaVersion": 2}')
    assert pin("registry.example.com/vllm/vllm-openai:v1", silent_client(stub)).digest == sha256(stub.body)
    assert stub.asked == ["HEAD", "GET"]


def test_a_manifest_whose_bytes_differ_from_the_digest_said_is_a_digest_mismatch():
    stub = SilentRegistry(b'{"schemaVersion": 2}', said_on_get="sha256:" + "d" * 64)
    with pytest.raises(AgentError) as err:
        pin("registry.example.com/vllm/vllm-openai:v1", silent_client(stub))
    assert err.value.reason == "DigestMismatch" and "spec.images[].image" in err.value.message


# -- references read as the runtimes read them --------------------------------------------------

@pytest.mark.parametrize("image,read_as", [
    ("vllm/vllm-openai:v0.11.0", "docker.io/vllm/vllm-openai:v0.11.0"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("index.docker.io/vllm/vllm-openai:v1", "docker.io/vllm/vllm-openai:v1"),
    ("localhost:5000/a:v1", "localhost:5000/a:v1"),
    ("registry.example.com/a@sha256:" + "c" * 64, "registry.example.com/a@sha256:" + "c" * 64),
])
def test_an_image_is_read_with_the_registry_and_repository_the_runtimes_give_it(image, read_as):
    assert normalized(image) == read_as


def test_docker_hub_images_are_asked_of_its_api_host():
    assert image_reference("vllm/vllm-openai:v0.11.0").registry == "registry-1.docker.io"


def test_docker_hub_credentials_are_found_under_the_docker_clis_key(tmp_path):
    config = tmp_path / "dockerconfig.json"
    config.write_text(json.dumps({"auths": {"https://index.docker.io/v1/": {"username": USER, "password": PASSWORD}}}))
    credentials = image_credentials([str(config)], image_reference("vllm/vllm-openai:v0.11.0"))
    assert credentials is not None and (credentials.username, credentials.password) == (USER, PASSWORD)
