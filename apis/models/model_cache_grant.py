# Generated from apis/modelcachegrants/definition.yaml by `python -m fleetcache.devtools.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictInt
from typing_extensions import TypeAliasType


class AdmittedFootprint(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    manifest_digest: Annotated[
        str | None,
        Field(alias='manifestDigest', description='The content admitted; empty when it was admitted unresolved.'),
    ] = None
    bytes: Annotated[
        StrictInt | None,
        Field(
            description="What each target's volume holds: the resolved bytes, plus with spec.rollout.waves what the previous commit does not share (the rollout's peak).",
            ge=0,
        ),
    ] = None
    clusters: Annotated[StrictInt | None, Field(description='The target clusters admitted.', ge=0)] = None


class Cache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str, Field(description="The ModelCache's name.")]
    commit: Annotated[str | None, Field(description='Its resolved commit; empty until it resolved.')] = None
    manifest_digest: Annotated[
        str | None, Field(alias='manifestDigest', description='Its resolved content; empty until it resolved.')
    ] = None
    clusters: Annotated[StrictInt | None, Field(description='Its target clusters.', ge=0)] = None
    bytes: Annotated[StrictInt | None, Field(description='Its resolved bytes; 0 until it resolved.', ge=0)] = None
    admitted: Annotated[
        StrictBool | None,
        Field(description='Admitted at its current spec (admittedDigest equals its admission digest).'),
    ] = None
    reason: Annotated[
        Literal['Admitted', 'OutsideGrant', 'PinningNotAllowed', 'PoolNotGranted', 'OverQuota', 'InvalidSpec'] | None,
        Field(
            description='Admitted, or why not: OutsideGrant (a target cluster the grant does not cover), PinningNotAllowed (pinned without spec.allowPinned), PoolNotGranted (a Node cache whose spec.storage.nodePool is not in spec.nodePools), OverQuota (the projection with it passes the budget), InvalidSpec (its placement cannot be evaluated).'
        ),
    ] = None
    message: Annotated[str | None, Field(description='What was decided, with the numbers, and what to do.')] = None
    admitted_digest: Annotated[
        str | None,
        Field(
            alias='admittedDigest',
            description='The admission digest (source, placement, pinned, resolved content) last admitted. A refused edit keeps the earlier one: that footprint keeps serving.',
        ),
    ] = None
    admitted_footprint: Annotated[
        AdmittedFootprint | None,
        Field(
            alias='admittedFootprint',
            description='What the admitted digest holds, counted in the projection while the edit waits.',
        ),
    ] = None


class ClusterName(RootModel[str]):
    root: Annotated[
        str,
        Field(
            description='The name of a FleetCluster.',
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$',
        ),
    ]


class ClusterSelector(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    match_labels: Annotated[
        dict[str, MatchLabelsAdditionalProperty] | None,
        Field(alias='matchLabels', description='Labels a FleetCluster must carry, each with exactly this value.'),
    ] = None
    match_expressions: Annotated[
        list[MatchExpression] | None,
        Field(
            alias='matchExpressions', description='Label requirements a FleetCluster must all satisfy.', max_length=32
        ),
    ] = None


class Clusters(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    cluster_selector: Annotated[
        ClusterSelector | None,
        Field(
            alias='clusterSelector',
            description='Selects FleetClusters by their labels (Kubernetes label selector semantics). An empty selector selects every FleetCluster.',
        ),
    ] = None
    cluster_names: Annotated[
        list[ClusterName] | None,
        Field(
            alias='clusterNames',
            description='FleetClusters by name; the grant covers exactly these names (a ModelCache naming another cluster is OutsideGrant).',
            max_length=5000,
            min_length=1,
        ),
    ] = None


class MatchExpression(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    key: Annotated[
        str,
        Field(
            description='The label key the requirement applies to.',
            max_length=317,
            min_length=1,
            pattern='^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$',
        ),
    ]
    operator: Annotated[
        Literal['In', 'NotIn', 'Exists', 'DoesNotExist'], Field(description="How the label's value relates to values.")
    ]
    values: Annotated[
        list[Value] | None,
        Field(description='Label values for In and NotIn; must be empty for Exists and DoesNotExist.', max_length=256),
    ] = None


MatchLabelsAdditionalProperty = TypeAliasType(
    "MatchLabelsAdditionalProperty",
    Annotated[str, Field(description='The label value the FleetCluster must carry under this key.', max_length=63)],
)


class ModelCacheGrant(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[Spec, Field(description='The budget, the clusters it covers, and whether caches may pin.')]
    status: Annotated[
        Status | None,
        Field(description='The admission decisions and the accounting, written by compose-model-cache-grant.'),
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description='Kubernetes object metadata.')] = None


class NodePool(RootModel[str]):
    root: Annotated[
        str, Field(description='A pool name.', max_length=63, min_length=1, pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')
    ]


class Quota(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bytes: Annotated[
        str,
        Field(
            description="Bytes the namespace's caches may hold on the grant's clusters, e.g. 10Ti: each content (manifest digest) counts at its full size on every cluster holding it. May only grow: a budget that shrank would put admitted caches over it.",
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ]


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    clusters: Annotated[
        Clusters,
        Field(
            description='The FleetClusters the grant covers: matched by a label selector, or listed by name. Exactly one of clusterSelector or clusterNames. Frozen: a re-pointed grant would strand the accounting of everything admitted before.'
        ),
    ]
    quota: Annotated[Quota, Field(description='The budget.')]
    allow_pinned: Annotated[
        StrictBool | None,
        Field(
            alias='allowPinned',
            description='Whether ModelCaches naming the grant may set spec.retention.pinned. Only turns on: turning it off would strand pinned copies admitted before.',
        ),
    ] = False
    node_pools: Annotated[
        list[NodePool] | None,
        Field(
            alias='nodePools',
            description="The node pools (FleetCluster spec.nodePools[] names; default is spec.nodeCache) whose nodes this namespace's tier-Node caches may fill. Absent: default only, the one pool every grant allowed before pools had names; empty: none. Only grows: a pool taken away would strand node copies admitted in it.",
            max_length=8,
        ),
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None,
        Field(description='Composition selection and resource references, written by Crossplane.'),
    ] = None


class Status(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    quota_bytes: Annotated[
        StrictInt | None, Field(alias='quotaBytes', description='spec.quota.bytes in bytes.', ge=0)
    ] = None
    used_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='usedBytes',
            description='Measured: each content at its full size for every cluster with a hydration of it in this namespace, whatever its state. Absent while any ModelCache naming the grant has not resolved (absent is not measured; zero is a measurement).',
            ge=0,
        ),
    ] = None
    projected_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='projectedBytes',
            description="The admitted caches' projection: per content, resolved bytes times the widest target cluster count asked of it. Unresolved caches add nothing (see unresolvedCaches).",
            ge=0,
        ),
    ] = None
    unresolved_caches: Annotated[
        StrictInt | None,
        Field(
            alias='unresolvedCaches',
            description='Caches naming the grant that have not resolved, so the projection could not count them.',
            ge=0,
        ),
    ] = None
    cache_count: Annotated[
        StrictInt | None,
        Field(alias='cacheCount', description='ModelCaches in this namespace that name the grant.', ge=0),
    ] = None
    admitted_count: Annotated[
        StrictInt | None,
        Field(alias='admittedCount', description='Of those, the ones admitted at their current spec.', ge=0),
    ] = None
    caches_omitted: Annotated[
        StrictInt | None,
        Field(
            alias='cachesOmitted',
            description='Caches not listed in caches (it lists at most 500, in admission order). An unlisted cache has no row to fan out by: it waits (AwaitingGrant) until it is listed; split more caches over several grants.',
            ge=0,
        ),
    ] = None
    caches_summary: Annotated[
        str | None,
        Field(alias='cachesSummary', description='Admitted out of naming caches, e.g. "2/3" (the CACHES column).'),
    ] = None
    budget_human: Annotated[
        str | None, Field(alias='budgetHuman', description='The budget, human readable (the BUDGET column).')
    ] = None
    used_human: Annotated[
        str | None, Field(alias='usedHuman', description='usedBytes, human readable (the USED column).')
    ] = None
    projected_human: Annotated[
        str | None, Field(alias='projectedHuman', description='projectedBytes, human readable (the PROJECTED column).')
    ] = None
    caches: Annotated[
        list[Cache] | None,
        Field(
            description='The decision for each ModelCache naming the grant, in admission order (creation time, then name); at most 500 (cachesOmitted counts the rest). compose-model-cache fans out only when its row is admitted at its current admission digest.',
            max_length=500,
        ),
    ] = None
    conditions: Annotated[list[dict[str, Any]] | None, Field(description='Conditions, written by Crossplane.')] = None
    crossplane: Annotated[dict[str, Any] | None, Field(description="Crossplane's own status.")] = None


class Value(RootModel[str]):
    root: Annotated[str, Field(description='One label value.', max_length=63)]