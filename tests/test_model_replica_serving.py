"""The commit a replica's engine serves: status.servingCommit and the Serving condition move
only once its Deployment has rolled out (as `kubectl rollout status` decides), so a replica
moved to a new commit reads Ready on the old one (RollingCommit) while the new pod loads; a
ModelCache's rollout reads them back (views/cache_replicas.py) and counts its bake and its
deadline from the real switch. Composed through the function server and stamped as
Crossplane stamps conditions (devtools/render.py merge_status)."""

from __future__ import annotations

import copy
import datetime

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from fleetcache import reasons
from fleetcache.devtools import render
from fleetcache.functions import naming, protocol, read, server, times
from fleetcache.functions.composers import model_replica as composer
from fleetcache.functions.views import cache_replicas
from fleetcache.functions.views.cache_replicas import Replicas
from fleetcache.functions.views.model_replica import SERVING
from tests.support.deployments import CACHE, CLUSTER, REPLICA_ENGINE, deployment, replica_xr
from tests.support.fleet import COMMIT, fleet_cluster, observed_object

OLD, NEW = COMMIT, "2" * 40
T0 = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)
MINUTE = datetime.timedelta(minutes=1)
REQUIRED = {composer.FLEET_CLUSTER_KEY: [fleet_cluster(CLUSTER)],
            composer.DEPLOYMENT_KEY: [deployment(engine=REPLICA_ENGINE)]}
ROLLED_OUT = {"replicas": 1, "updatedReplicas": 1, "availableReplicas": 1, "readyReplicas": 1,
              "observedGeneration": 2, "conditions": [{"type": "Available", "status": "True"}]}
# maxSurge 1, maxUnavailable 0: the new pod is up, not yet available; the old one serves.
ROLLING = {**ROLLED_OUT, "replicas": 2, "availableReplicas": 1}


def on(commit: str) -> dict:
    """The replica as its deployment writes it, mounting `commit`."""
    xr = replica_xr("Cache")
    xr["spec"]["model"]["commit"] = commit
    xr["spec"]["cache"]["commit"] = commit
    xr["spec"]["cache"]["snapshotPath"] = xr["spec"]["cache"]["snapshotPath"].replace(COMMIT, commit)
    return xr


def engine(commit: str, status: dict) -> dict:
    """The engine's Deployment Object as observed at generation 2: its template on `commit`,
    its status."""
    desired = composer.compose(protocol.Request(composite=on(commit), required=REQUIRED))
    observed = observed_object(desired.desired[composer.ENGINE_KEY][0], remote_status=status)
    observed["status"]["atProvider"]["manifest"]["metadata"]["generation"] = 2
    observed["status"]["conditions"] = [{"type": "Ready", "status": str(read.is_true(
        {"status": status}, "Available"))}]
    return observed


def reconciled(xr: dict, observed: dict, now: datetime.datetime) -> tuple[dict, list[str]]:
    """The replica after one reconcile at `now`: its status as Crossplane leaves it, and the
    Normal events it recorded."""
    req = render.build_request(xr, {composer.ENGINE_KEY: observed}, fnv1.State(), None, None,
                               REQUIRED, tag="serving")
    rsp = server.run(req, now)
    normal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_NORMAL]
    return {**xr, "status": render.merge_status(xr, rsp, now)["status"]}, normal


def serving(xr: dict) -> dict:
    return read.condition_of(xr, SERVING)


def served_on_old() -> dict:
    """A replica whose engine has served OLD since T0."""
    xr, _ = reconciled(on(OLD), engine(OLD, ROLLED_OUT), T0)
    return xr


def moved_to_new(now: datetime.datetime) -> dict:
    """The replica its deployment moved to NEW, reconciled at `now` before the provider applied
    the new template (the observed Deployment still rolled out on OLD)."""
    xr = served_on_old()
    xr["spec"] = on(NEW)["spec"]
    xr, _ = reconciled(xr, engine(OLD, ROLLED_OUT), now)
    return xr


def test_a_rolled_out_deployment_serves_its_templates_commit():
    xr = served_on_old()
    assert xr["status"]["servingCommit"] == OLD
    assert (serving(xr)["status"], serving(xr)["reason"]) == ("True", reasons.CommitServed)
    assert (xr["status"]["phase"], xr["status"]["reason"]) == ("Ready", reasons.Available)


def test_a_replica_moved_to_a_new_commit_is_ready_on_the_old_one_and_says_it_rolls():
    xr = moved_to_new(T0 + 10 * MINUTE)
    assert xr["status"]["servingCommit"] == OLD
    assert (xr["status"]["phase"], xr["status"]["reason"]) == ("Ready", reasons.RollingCommit)
    assert f"rolls to commit {NEW}; commit {OLD} serves meanwhile" in xr["status"]["message"]
    assert (serving(xr)["status"], serving(xr)["reason"]) == ("False", reasons.RollingCommit)


def test_the_old_commit_serves_while_the_new_pod_is_not_available():
    xr = moved_to_new(T0 + 10 * MINUTE)
    xr, _ = reconciled(xr, engine(NEW, ROLLING), T0 + 12 * MINUTE)
    assert xr["status"]["servingCommit"] == OLD
    assert serving(xr)["lastTransitionTime"] == times.format_time(T0 + 10 * MINUTE)


def test_a_deployment_whose_controller_has_not_seen_the_new_template_serves_the_old_commit():
    xr = moved_to_new(T0 + 10 * MINUTE)
    xr, _ = reconciled(xr, engine(NEW, {**ROLLED_OUT, "observedGeneration": 1}), T0 + 11 * MINUTE)
    assert xr["status"]["servingCommit"] == OLD


def test_the_new_commit_is_served_from_the_reconcile_that_sees_the_rollout_done():
    xr = moved_to_new(T0 + 10 * MINUTE)
    xr, events = reconciled(xr, engine(NEW, ROLLED_OUT), T0 + 15 * MINUTE)
    assert xr["status"]["servingCommit"] == NEW
    assert (serving(xr)["status"], serving(xr)["lastTransitionTime"]) == \
        ("True", times.format_time(T0 + 15 * MINUTE))
    assert (xr["status"]["phase"], xr["status"]["reason"]) == ("Ready", reasons.Available)
    assert events == [f"Deployment {xr['metadata']['name']} on cluster {CLUSTER} serves commit {NEW} (was {OLD})"]


def test_the_served_commit_unchanged_gives_no_event():
    xr = served_on_old()
    _, events = reconciled(xr, engine(OLD, ROLLED_OUT), T0 + MINUTE)
    assert events == []


@pytest.mark.parametrize("status", [
    {**ROLLED_OUT, "observedGeneration": 1},  # the controller has not seen this generation
    {**ROLLED_OUT, "updatedReplicas": 0},  # a replica is not updated
    ROLLING,  # an old replica is left
    {**ROLLED_OUT, "availableReplicas": 0},  # an updated replica is not available
    {**ROLLED_OUT, "conditions": [{"type": "Progressing", "status": "False",
                                   "reason": "ProgressDeadlineExceeded"}]},
    {},
])
def test_a_deployment_is_rolled_out_only_as_kubectl_rollout_status_says(status):
    deployment_ = {"metadata": {"generation": 2}, "spec": {"replicas": 1}, "status": status}
    assert composer.rolled_out(deployment_) is False
    assert composer.rolled_out({**deployment_, "status": ROLLED_OUT}) is True


def test_a_template_naming_no_commit_serves_nothing_new():
    observed = engine(NEW, ROLLED_OUT)
    manifest = observed["status"]["atProvider"]["manifest"]
    manifest["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": composer.MODEL_REVISION_ENV, "value": "x" * 5000}]
    assert composer.serving_commit(observed, OLD) == OLD


@pytest.mark.parametrize("delivery", ["Wait", "Fail"])
def test_a_replica_that_runs_no_engine_serves_nothing(delivery):
    outcome = composer.compose(protocol.Request(composite=replica_xr(delivery), required=REQUIRED))
    assert "servingCommit" not in outcome.status
    assert [(c.type, c.status, c.reason) for c in outcome.conditions] == \
        [(SERVING, "False", reasons.NotServing)]


# --- as a ModelCache's rollout reads it (views/cache_replicas.py) ---------------------------


def read_back(xr: dict, now: datetime.datetime) -> Replicas | None:
    labelled = copy.deepcopy(xr)
    labelled["metadata"]["labels"] = {naming.LABEL_MODEL_CACHE: CACHE}
    return cache_replicas.by_cluster([labelled], CACHE, NEW, now.timestamp()).get(CLUSTER)


def test_a_replica_ready_on_its_old_pod_is_not_ready_on_the_new_commit_and_counts_from_the_move():
    xr = moved_to_new(T0 + 10 * MINUTE)
    assert read_back(xr, T0 + 50 * MINUTE) == \
        Replicas(None, (T0 + 10 * MINUTE).timestamp(), reasons.RollingCommit)


def test_a_replica_is_ready_on_the_new_commit_from_the_switch_not_from_its_ready_condition():
    xr = moved_to_new(T0 + 10 * MINUTE)
    xr, _ = reconciled(xr, engine(NEW, ROLLED_OUT), T0 + 15 * MINUTE)
    assert read.condition_of(xr, "Ready")["lastTransitionTime"] == times.format_time(T0)
    assert read_back(xr, T0 + 20 * MINUTE) == Replicas((T0 + 15 * MINUTE).timestamp(), None)


def test_a_replica_moved_but_not_yet_reconciled_has_no_time_of_its_own():
    xr = served_on_old()
    xr["spec"] = on(NEW)["spec"]
    now = T0 + 90 * MINUTE
    assert read_back(xr, now) == Replicas(None, now.timestamp(), reasons.Available)


def test_a_replica_serving_the_new_commit_whose_engine_went_down_counts_from_ready():
    xr = moved_to_new(T0 + 10 * MINUTE)
    xr, _ = reconciled(xr, engine(NEW, ROLLED_OUT), T0 + 15 * MINUTE)
    down = {**ROLLED_OUT, "availableReplicas": 0, "conditions": [{"type": "Available", "status": "False"}]}
    xr, _ = reconciled(xr, engine(NEW, down), T0 + 30 * MINUTE)
    assert read_back(xr, T0 + 40 * MINUTE) == \
        Replicas(None, (T0 + 30 * MINUTE).timestamp(), reasons.Starting)
