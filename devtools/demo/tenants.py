"""`fleetcache demo`, a second tenant: a budget that refuses, then admits.

Played after day two. Namespace team-b gets a ModelCacheGrant over two clusters whose
budget holds one copy of its model but not the two it asks for: the grant refuses the
ModelCache with OverQuota and the numbers (needed against budget), the cache composes
nothing; the platform team grows the budget (a grant's budget may only grow) and the same
cache is admitted, hydrates on both clusters, and the grant's figures equal a hand count.
"""

from __future__ import annotations

from fleetcache.devtools.demo.stage import Stage, phase_of
from fleetcache.devtools.testhub.content import make_model
from fleetcache.functions import naming, quantities, read

TENANT = "team-b"
CLUSTERS = ("gpu-east-2", "gpu-east-3")
CACHE = "big-chat"
SHARE = 0.4  # of the demo model's size


def grant(budget: int) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": TENANT, "namespace": TENANT},
            "spec": {"clusters": {"clusterNames": list(CLUSTERS)},
                     "quota": {"bytes": str(budget)}}}


def cache(endpoint: str) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": TENANT},
            "spec": {"grantRef": {"name": TENANT},
                     "source": {"huggingFace": {"repo": f"fleetcache-demo/{CACHE}",
                                                "endpoint": endpoint}},
                     "placement": {"clusterNames": list(CLUSTERS)}}}


def play(stage: Stage, endpoint: str) -> list[str]:
    model_bytes = int(stage.model_bytes * SHARE)
    stage.hubs[0].add_repo(f"fleetcache-demo/{CACHE}",
                           dict(make_model(model_bytes, shards=2, seed=11)))
    small = model_bytes  # one copy's worth: the two copies asked for cannot fit
    stage.control.apply(grant(small))
    stage.control.apply(cache(endpoint))
    stage.out(f"\ntenant {TENANT}: a ModelCacheGrant of {quantities.human_bytes(small)} over "
              f"{' and '.join(CLUSTERS)}, and ModelCache {CACHE} asking for a "
              f"{quantities.human_bytes(model_bytes)} model on both")

    def admitted() -> dict:
        return read.condition_of(stage.control.xrs.get(("ModelCache", TENANT, CACHE), {}),
                                "Admitted")

    problem = stage.until(lambda: admitted().get("reason") == "OverQuota",
                          f"{CACHE} to be refused with OverQuota")
    if problem:
        return [problem]
    refusal = admitted().get("message", "")
    stage.out(f"  {CACHE}: Admitted=False OverQuota: {refusal}")
    problems = []
    if stage.hydrations(CACHE):
        problems.append(f"{CACHE} composed hydrations although its grant refused it")
    roomy = model_bytes * 3
    stage.control.apply(grant(roomy))
    stage.out(f"  the platform team grows the budget to {quantities.human_bytes(roomy)}")

    def ready_everywhere() -> bool:
        copies = stage.hydrations(CACHE)
        return len(copies) == len(CLUSTERS) and all(phase_of(h) == "Ready" for h in copies)

    problem = stage.until(ready_everywhere, f"{CACHE} to be admitted and Ready on both clusters")
    if problem:
        return problems + [problem]
    status = stage.control.xrs[("ModelCacheGrant", TENANT, TENANT)].get("status", {})
    resolved = read.get_path(stage.control.xrs[("ModelCache", TENANT, CACHE)],
                            "status.resolved.bytes", 0)
    stage.out(f"  {CACHE} is Ready on {' and '.join(CLUSTERS)}; ModelCacheGrant {TENANT}: "
              f"used {status.get('usedHuman')}, projected {status.get('projectedHuman')} of "
              f"{status.get('budgetHuman')} (hand count: {len(CLUSTERS)} x "
              f"{quantities.human_bytes(resolved)})")
    if (status.get("usedBytes"), status.get("projectedBytes")) != (
            len(CLUSTERS) * resolved, len(CLUSTERS) * resolved):
        problems.append(f"ModelCacheGrant {TENANT}: used {status.get('usedBytes')}, projected "
                        f"{status.get('projectedBytes')}, expected {len(CLUSTERS) * resolved}")
    return problems
