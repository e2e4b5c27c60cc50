"""Records of departed nodes: one warmer at a time (the pruner Lease) deletes the records of nodes
that no longer run a warmer pod, so a deleted or unlabelled node stops counting."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from kubernetes.client import V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from fleetcache.agent.node_plan import stale_records
from fleetcache.agent.node_warm import RecordPruner
from fleetcache.agent.slots import NamedLease
from tests.agent.test_slots import T0, Clock, FakeCoordination

NS = "team-a"
STATUS = "llama-node-status"
SELECTOR = "app.kubernetes.io/component=node-warmer,fleetcache.dev/model-cache=llama"


class FakeCore:
    """The status ConfigMap (merge patch: None deletes a key) and the warmer pods by node."""

    def __init__(self, data, nodes):
        self.data = dict(data)
        self.nodes = nodes
        self.patches = []

    def read_namespaced_config_map(self, name, namespace):
        assert (name, namespace) == (STATUS, NS)
        return SimpleNamespace(data=dict(self.data))

    def list_namespaced_pod(self, namespace, label_selector):
        assert (namespace, label_selector) == (NS, SELECTOR)
        return SimpleNamespace(items=[SimpleNamespace(spec=SimpleNamespace(node_name=n)) for n in self.nodes])

    def patch_namespaced_config_map(self, name, namespace, body):
        self.patches.append(body)
        for key, value in body["data"].items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value


class LeaseApi(FakeCoordination):
    """The fake API server with create for the pruner's named Lease."""

    def __init__(self):
        super().__init__(0)

    def create_namespaced_lease(self, namespace, body):
        if body.metadata.name in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        self._store(body)


def pruner(core, api, holder="team-a/llama/gpu-1", clock=None):
    lease = NamedLease(api, NS, "llama-node-pruner", holder, 900, clock=clock or Clock())
    return RecordPruner(core, lease, NS, STATUS, SELECTOR)


def test_records_of_nodes_without_a_warmer_pod_are_deleted():
    core = FakeCore({"gpu-1": "{}", "gpu-2": "{}", "gone": "{}"}, nodes=["gpu-1", "gpu-2", None])
    assert pruner(core, LeaseApi()).prune_once() == ["gone"]
    assert core.data == {"gpu-1": "{}", "gpu-2": "{}"}
    assert core.patches == [{"data": {"gone": None}}]


def test_nothing_is_patched_when_every_record_has_its_warmer():
    core = FakeCore({"gpu-1": "{}"}, nodes=["gpu-1", "gpu-3"])
    assert pruner(core, LeaseApi()).prune_once() == [] and core.patches == []


def test_the_first_pruner_creates_the_lease_and_holds_it():
    api = LeaseApi()
    pruner(FakeCore({}, []), api).prune_once()
    assert api.holder("llama-node-pruner") == "team-a/llama/gpu-1"


def test_only_the_lease_holder_prunes():
    api = LeaseApi()
    core = FakeCore({"gone": "{}"}, nodes=[])
    clock = Clock()
    pruner(FakeCore({}, []), api, holder="team-a/llama/gpu-2", clock=clock).prune_once()
    assert pruner(core, api, clock=clock).prune_once() == [] and core.data == {"gone": "{}"}


def test_an_expired_pruner_lease_is_taken_over():
    api = LeaseApi()
    clock = Clock()
    pruner(FakeCore({}, []), api, holder="team-a/llama/gpu-2", clock=clock).prune_once()
    clock.now = T0 + timedelta(seconds=901)
    core = FakeCore({"gone": "{}"}, nodes=[])
    assert pruner(core, api, clock=clock).prune_once() == ["gone"]


def test_two_warmers_creating_the_lease_at_once_one_wins():
    api = LeaseApi()
    read = api.read_namespaced_lease

    def read_while_another_creates(name, namespace):
        try:
            return read(name, namespace)  # 404: not there yet
        finally:  # the other warmer's create lands before this one's
            if name not in api.leases:
                api.create_namespaced_lease(namespace, V1Lease(
                    metadata=V1ObjectMeta(name=name, namespace=NS),
                    spec=V1LeaseSpec(holder_identity="team-a/llama/gpu-2", renew_time=T0,
                                     lease_duration_seconds=900)))

    api.read_namespaced_lease = read_while_another_creates
    lease = NamedLease(api, NS, "llama-node-pruner", "team-a/llama/gpu-1", 900, clock=Clock())
    assert lease.try_take() is False
    assert api.holder("llama-node-pruner") == "team-a/llama/gpu-2"


def test_stale_records_are_the_keys_without_a_warmer():
    assert stale_records(["b", "a", "c"], {"a"}) == ["b", "c"]


def test_pruning_flags_come_together_with_the_status_configmap(tmp_path):
    from tests.agent.conftest import run_agent
    from tests.agent.node_support import COMMIT, REPO

    result = run_agent("node-warm", "--source", str(tmp_path), "--dest", str(tmp_path / "node"), "--repo", REPO,
                       "--commit", COMMIT, "--manifest-digest", "a" * 64, "--node", "gpu-1",
                       "--prune-selector", SELECTOR, "--once")
    assert result.code == 15 and "--prune-selector" in result.stderr
