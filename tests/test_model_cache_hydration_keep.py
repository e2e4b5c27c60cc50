"""spec.keepCommits: the commits a hydration's volume keeps besides its own and those its
replicas mount (the previous commit of a rollout in waves, which a rollback returns to)."""

from __future__ import annotations

import json

import pytest

from fleetcache.apis import specs
from fleetcache.functions import protocol
from fleetcache.functions.composers.model_cache_hydration import compose
from tests.support.builders import (
    COMMIT,
    DIGEST,
    cache_replica,
    composed_key,
    hydration_request,
    hydration_xr,
    job_complete,
    observe,
    pvc,
    with_status,
)
from tests.support.xrd import xrd_for

NEW_COMMIT = "0" * 39 + "1"
THIRD_COMMIT = "2" * 40
FOURTH_COMMIT = "3" * 40
BOUND = {"volume": pvc("Bound")}
UPDATED = {"phase": "Ready", "resolved": {"commit": NEW_COMMIT, "manifestDigest": DIGEST},
           "servingRepo": "Qwen/Qwen3-0.6B", "servingCommit": NEW_COMMIT,
           "servingManifestDigest": DIGEST, "storedCommits": [COMMIT, NEW_COMMIT, THIRD_COMMIT, FOURTH_COMMIT]}


def updated(replicas: list[dict], *, states: dict | None = None, data: dict | None = None,
            **spec) -> protocol.Outcome:
    """Ready on NEW_COMMIT with COMMIT, THIRD_COMMIT and FOURTH_COMMIT still on the volume."""
    xr = with_status(hydration_xr(commit=NEW_COMMIT, **spec), **UPDATED)
    first = compose(hydration_request(xr, replicas=replicas))
    second = compose(hydration_request(xr, observed=observe(first), replicas=replicas))
    observed = observe(second, states={**BOUND, **(states or {})}, data=data)
    return compose(hydration_request(xr, observed=observed, replicas=replicas))


def prune_job(outcome: protocol.Outcome) -> dict:
    key = composed_key(outcome, "prune-")
    return outcome.desired[key][0]["spec"]["forProvider"]["manifest"]


def kept_by_the_prune_job(outcome: protocol.Outcome) -> list[str]:
    args = prune_job(outcome)["spec"]["template"]["spec"]["containers"][0]["args"]
    return [b for a, b in zip(args, args[1:], strict=False) if a == "--keep"]


def test_a_kept_commit_no_replica_mounts_is_not_pruned():
    assert COMMIT in kept_by_the_prune_job(updated([], keepCommits=[COMMIT]))


def test_the_prune_job_keeps_the_hydrations_commit_the_mounted_ones_and_the_kept_ones():
    outcome = updated([cache_replica(THIRD_COMMIT)], keepCommits=[COMMIT])
    assert kept_by_the_prune_job(outcome) == sorted([COMMIT, NEW_COMMIT, THIRD_COMMIT])


def test_without_keep_commits_the_prune_keeps_only_the_hydrations_and_the_mounted_commits():
    assert kept_by_the_prune_job(updated([])) == [NEW_COMMIT]


def test_nothing_is_pruned_when_every_stored_commit_is_kept():
    outcome = updated([], keepCommits=[COMMIT, THIRD_COMMIT, FOURTH_COMMIT])
    assert not [k for k in outcome.desired if k.startswith("prune-")]
    assert outcome.status["storedCommits"] == sorted([COMMIT, NEW_COMMIT, THIRD_COMMIT,
                                                      FOURTH_COMMIT])


def test_a_kept_commit_stays_in_stored_commits_after_the_prune_ran():
    key = composed_key(updated([], keepCommits=[COMMIT]), "prune-")
    outcome = updated([], keepCommits=[COMMIT], states={key: job_complete()},
                      data={"progress": {"phase": "Pruned",
                                         "prunedCommits": json.dumps([THIRD_COMMIT, COMMIT])}})
    assert (outcome.status["storedCommits"], outcome.status["prunedCommits"]) == (
        sorted([COMMIT, NEW_COMMIT]), sorted([THIRD_COMMIT, FOURTH_COMMIT]))


def test_a_commit_no_longer_kept_is_pruned_by_another_job():
    """The rollout ended: the cache drops keepCommits and the set of kept commits shrinks;
    a Job is immutable, so the prune that removes the previous commit is a new one."""
    while_kept = prune_job(updated([], keepCommits=[COMMIT]))["metadata"]["name"]
    after = updated([])
    assert prune_job(after)["metadata"]["name"] != while_kept
    assert COMMIT not in kept_by_the_prune_job(after)


def test_keep_commits_of_a_hub_and_an_s3_commit_are_schema_valid():
    xr = hydration_xr(keepCommits=[COMMIT, "s3-" + "a" * 40])
    assert xrd_for(xr).violations(xr) == []


@pytest.mark.parametrize("keep, where", [
    (["main"], "spec.keepCommits[0]: 'main' is not a resolved commit: 40 lowercase hex digits"),
    ([COMMIT, COMMIT.upper()], "spec.keepCommits[1]: "),
    ([COMMIT] * 5, "spec.keepCommits: has more than 4 items"),
])
def test_keep_commits_that_are_not_commits_are_refused_naming_the_field(keep, where):
    xr = hydration_xr(keepCommits=keep)
    assert xrd_for(xr).violations(xr)
    with pytest.raises(specs.InputError) as refused:
        compose(hydration_request(xr))
    assert str(refused.value).startswith(where)
    assert "\n" not in str(refused.value)
