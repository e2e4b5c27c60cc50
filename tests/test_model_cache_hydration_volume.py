"""compose-model-cache-hydration: the copy goes with its PVC. A PVC deleted (on the cluster, or
with its Object on the control plane) comes back empty from provider-kubernetes under the same
name but another uid; the hydration latches the uid (status.volumeUID), and a PVC with another
uid, or none, drops Ready and the serving commit and fetches again."""

from __future__ import annotations

import copy

from fleetcache import reasons
from fleetcache.functions import protocol
from fleetcache.functions.composers.model_cache_hydration import compose
from fleetcache.functions.k8s.hydration_objects import job_prefix
from fleetcache.functions.views.fleet_cluster import FleetClusterView
from fleetcache.functions.views.hydration import report_of
from fleetcache.functions.views.placement import Target
from tests.support.builders import (
    CLUSTER,
    COMMIT,
    DIGEST,
    GIB,
    NAMESPACE,
    cache_replica,
    composed_key,
    fleet_cluster,
    hydration_request,
    hydration_xr,
    job_complete,
    observe,
    pvc,
    with_status,
)
from tests.support.xrd import assert_valid

JOB_KEY = job_prefix(COMMIT, DIGEST)
KEY = f"{NAMESPACE}/{hydration_xr()['metadata']['name']}"
REPO = "Qwen/Qwen3-0.6B"
VERIFIED_ON = "5b7d3e0c-0f5e-4d5e-9c8b-1f0a6c2d9e41"  # the PVC the copy was verified on
CREATED_AGAIN = "a0c41f7e-2b6d-4a39-8e55-7c9d0b3e6f12"  # its namesake, created again empty
SERVING = {"servingRepo": REPO, "servingCommit": COMMIT, "servingManifestDigest": DIGEST}
READY = {"phase": "Ready", "reason": "Hydrated",
         "resolved": {"commit": COMMIT, "manifestDigest": DIGEST, "bytes": 3 * GIB},
         "progress": {"bytesDone": 3 * GIB, "bytesTotal": 3 * GIB, "filesDone": 5,
                      "filesTotal": 5, "percent": 100},
         "storedCommits": [COMMIT], "usedBytes": 3 * GIB, "capacityBytes": 4 * GIB,
         "usedHuman": "3GiB", "bytesFrom": "Origin", "readyTime": "2026-01-01T00:00:00Z", **SERVING}
RECORD = {"progress": {"phase": "Ready", "commit": COMMIT, "bytesDone": str(3 * GIB),
                       "bytesTotal": str(3 * GIB), "usedBytes": str(3 * GIB),
                       "capacityBytes": str(4 * GIB)}}


def on_pvc(observed: dict, uid: str | None) -> dict:
    """`observed` with the PVC provider-kubernetes last saw carrying `uid` (None: no PVC seen,
    its Object deleted on the control plane)."""
    observed = copy.deepcopy(observed)
    if uid is None:
        del observed["volume"]
    else:
        observed["volume"]["status"]["atProvider"]["manifest"]["metadata"]["uid"] = uid
    return observed


def ready_copy(latched: str | None = VERIFIED_ON) -> dict:
    """A Ready hydration that latched the uid of its PVC (None: a status from before volumeUID)."""
    status = dict(READY) if latched is None else {**READY, "volumeUID": latched}
    return with_status(hydration_xr(), **status)


def call(xr: dict, uid: str | None) -> protocol.Outcome:
    """One call on a Ready copy's Objects (no Job left: it went at Ready) over a PVC of `uid`."""
    observed = observe(compose(hydration_request(xr)), states={"volume": pvc("Bound")}, data=RECORD)
    return compose(hydration_request(xr, observed=on_pvc(observed, uid)))


def next_call(xr: dict, outcome: protocol.Outcome, uid: str) -> protocol.Outcome:
    """The call after `outcome`: its status written, what it composed observed over a PVC of `uid`."""
    after = with_status(xr, **outcome.status)
    observed = observe(outcome, states={"volume": pvc("Bound")})
    return compose(hydration_request(after, observed=on_pvc(observed, uid)))


def hydrated(outcome: protocol.Outcome) -> protocol.Condition:
    return next(c for c in outcome.conditions if c.type == "Hydrated")


# --- the uid changed: the copy is gone --------------------------------------------------


def test_a_ready_copy_on_a_pvc_with_another_uid_is_no_longer_ready():
    outcome = call(ready_copy(), CREATED_AGAIN)
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "VolumeReplaced")
    assert outcome.composite_ready is False
    assert (hydrated(outcome).status, hydrated(outcome).reason) == ("False", "VolumeReplaced")


def test_a_replaced_pvc_drops_the_serving_commit():
    outcome = call(ready_copy(), CREATED_AGAIN)
    assert {k: outcome.status[k] for k in SERVING} == {k: "" for k in SERVING}


def test_the_message_names_the_pvc_both_uids_and_the_remedy():
    message = call(ready_copy(), CREATED_AGAIN).status["message"]
    assert VERIFIED_ON in message and CREATED_AGAIN in message
    assert reasons.VolumeReplaced.remedy in message


def test_a_replaced_pvc_is_told_in_a_warning_event():
    outcome = call(ready_copy(), CREATED_AGAIN)
    assert len(outcome.warnings) == 1
    assert CREATED_AGAIN in outcome.warnings[0] and "fetching it again" in outcome.warnings[0]


def test_the_new_pvcs_uid_is_latched():
    assert call(ready_copy(), CREATED_AGAIN).status["volumeUID"] == CREATED_AGAIN


def test_a_replaced_pvc_forgets_what_was_stored_fetched_and_measured_on_the_old_one():
    status = call(ready_copy(), CREATED_AGAIN).status
    assert status["storedCommits"] == [] and status["prunedCommits"] == []
    assert status["progress"]["bytesDone"] == 0 and status["progress"]["percent"] == 0
    assert not {"usedBytes", "capacityBytes", "usedHuman", "bytesFrom"} & set(status)


def test_the_old_pvcs_progress_record_is_deleted_so_it_is_created_afresh():
    outcome = call(ready_copy(), CREATED_AGAIN)
    assert "progress" not in outcome.desired
    assert "volume" in outcome.desired and "service-account" in outcome.desired


def test_a_replaced_pvc_is_fetched_again():
    first = call(ready_copy(), CREATED_AGAIN)
    second = next_call(ready_copy(), first, CREATED_AGAIN)
    third = next_call(ready_copy(), second, CREATED_AGAIN)
    assert "progress" in second.desired
    assert composed_key(third, JOB_KEY)
    assert (third.status["phase"], third.status["reason"]) == ("Pending", "JobNotStarted")


def test_a_ready_copy_whose_pvc_is_gone_is_no_longer_ready():
    outcome = call(ready_copy(), None)
    assert (outcome.status["phase"], outcome.status["reason"]) == ("Pending", "VolumeReplaced")
    assert outcome.status["servingCommit"] == ""
    assert "volume" in outcome.desired  # composed again: provider-kubernetes creates it


def test_a_gone_pvc_latches_no_uid_until_the_new_one_is_seen():
    outcome = call(ready_copy(), None)
    assert outcome.status["volumeUID"] == ""
    assert next_call(ready_copy(), outcome, CREATED_AGAIN).status["volumeUID"] == CREATED_AGAIN


def test_a_job_complete_on_the_replaced_pvc_does_not_make_the_new_one_ready():
    xr = with_status(hydration_xr(), phase="Hydrating", reason="Hydrating", volumeUID=VERIFIED_ON)
    first = compose(hydration_request(xr))
    second = compose(hydration_request(xr, observed=observe(first)))
    observed = observe(second, states={JOB_KEY: job_complete(), "volume": pvc("Bound")})
    outcome = compose(hydration_request(xr, observed=on_pvc(observed, CREATED_AGAIN)))
    assert outcome.status["phase"] == "Pending"
    assert not composed_key(outcome, JOB_KEY)  # Crossplane deletes it; the next call makes another


def test_the_model_cache_reads_a_replaced_copy_as_not_ready_and_serving_nothing():
    outcome = call(ready_copy(), CREATED_AGAIN)
    observed = with_status(ready_copy(), **outcome.status)
    row = report_of(Target(CLUSTER, FleetClusterView.of(fleet_cluster(CLUSTER))), observed,
                    3 * GIB, {"commit": COMMIT, "manifestDigest": DIGEST}, REPO)
    assert (row.phase, row.reason, row.serving_commit) == ("Pending", "VolumeReplaced", "")


def test_a_replaced_copys_status_validates_against_the_xrd():
    assert_valid(with_status(hydration_xr(), **call(ready_copy(), CREATED_AGAIN).status))


# --- the uid unchanged: the copy stands -------------------------------------------------


def test_a_ready_copy_on_the_pvc_it_latched_stays_ready_and_serving():
    outcome = call(ready_copy(), VERIFIED_ON)
    assert (outcome.status["phase"], outcome.status["servingCommit"]) == ("Ready", COMMIT)
    assert outcome.status["volumeUID"] == VERIFIED_ON
    assert outcome.warnings == []


def test_a_hydration_latches_the_uid_of_the_pvc_it_fetches_into():
    xr = hydration_xr()
    first = compose(hydration_request(xr))
    observed = on_pvc(observe(first, states={"volume": pvc("Bound")}), VERIFIED_ON)
    assert compose(hydration_request(xr, observed=observed)).status["volumeUID"] == VERIFIED_ON


# --- a status written before volumeUID (the upgrade) ------------------------------------


def test_a_ready_status_without_a_latched_uid_stays_ready_and_latches_the_pvcs():
    outcome = call(ready_copy(latched=None), VERIFIED_ON)
    assert (outcome.status["phase"], outcome.status["volumeUID"]) == ("Ready", VERIFIED_ON)
    assert outcome.warnings == []


def test_a_ready_status_without_a_latched_uid_does_not_flap_on_the_next_call():
    first = call(ready_copy(latched=None), VERIFIED_ON)
    assert next_call(ready_copy(latched=None), first, VERIFIED_ON).status["phase"] == "Ready"


def test_a_ready_status_without_a_latched_uid_stays_ready_when_no_pvc_is_seen():
    outcome = call(ready_copy(latched=None), None)
    assert outcome.status["phase"] == "Ready"
    assert outcome.status["volumeUID"] == ""


def test_a_pvc_seen_without_a_uid_keeps_the_latched_one():
    observed = observe(compose(hydration_request(ready_copy())), states={"volume": pvc("Bound")})
    outcome = compose(hydration_request(ready_copy(), observed=observed))
    assert (outcome.status["phase"], outcome.status["volumeUID"]) == ("Ready", VERIFIED_ON)


# --- volumes whose loss is no replacement -----------------------------------------------


def test_an_evicted_copys_deleted_pvc_is_no_replacement_nor_is_its_new_one():
    full = fleet_cluster(CLUSTER, cache={"capacity": "100Gi", "highWatermark": 80, "lowWatermark": 70})
    full["status"]["cache"] = {"capacityBytes": 100 * GIB, "usedBytes": 90 * GIB, "reservedBytes": 0,
                               "admitted": [], "evicted": [KEY]}
    xr = with_status(ready_copy(), **{**ready_copy()["status"], "pinned": False, "mountedBy": 0,
                                      "placedReplicas": 0})
    observed = on_pvc(observe(compose(hydration_request(xr))), VERIFIED_ON)
    evicted = compose(hydration_request(xr, observed=observed, cluster=full, replicas=[]))
    warmed = compose(hydration_request(with_status(xr, **evicted.status), cluster=fleet_cluster(CLUSTER),
                                       replicas=[cache_replica(COMMIT, delivery="Source")]))
    assert (evicted.status["phase"], evicted.status["volumeUID"]) == ("Evicted", "")
    assert (warmed.status["phase"], "volume" in warmed.desired) == ("Pending", True)
    assert evicted.warnings == warmed.warnings == []


def test_an_existing_volume_latches_no_uid():
    xr = hydration_xr(source={"volume": {"claimName": "weights", "subPath": "llama-8b"}})
    assert "volumeUID" not in compose(hydration_request(xr)).status
