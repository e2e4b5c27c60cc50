# Generated from apis/modelcaches/definition.yaml by `python -m fleetcache.devtools.apigen` (make models)
# with datamodel-code-generator 0.89.0. Do not edit: edit the XRD and regenerate.

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, RootModel, StrictBool, StrictInt
from typing_extensions import TypeAliasType


class Agent(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    concurrency: Annotated[
        StrictInt | None, Field(description='Files the agent downloads in parallel on each cluster.', ge=1, le=64)
    ] = 8
    bandwidth: Annotated[
        str | None,
        Field(
            description='Bytes per second the agent may use on each cluster, e.g. 200Mi; empty means unlimited.',
            max_length=32,
            pattern='^$|^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ] = None


class AllowPattern(RootModel[str]):
    root: Annotated[
        str, Field(description='A glob over repository paths, e.g. "*.safetensors".', max_length=256, min_length=1)
    ]


class Arg(RootModel[str]):
    root: Annotated[str, Field(description='One argument.', max_length=1024)]


class Artifact(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    reference: Annotated[
        str | None,
        Field(description='The artifact pinned by digest (host/repository@sha256:<64 hex>).', max_length=1024),
    ] = None
    digest: Annotated[
        str | None, Field(description="The artifact manifest's digest (sha256:<64 hex>).", max_length=71)
    ] = None


class Cluster(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str, Field(description="The FleetCluster's name.")]
    phase: Annotated[
        Literal['Pending', 'Hydrating', 'Ready', 'Failed', 'Evicted'] | None,
        Field(
            description='Pending, Hydrating, Ready, Failed or Evicted, for the resolved commit: a cluster still on an older commit, waiting for a rollout slot, is Pending; Evicted when its FleetCluster evicted the copy to free room.'
        ),
    ] = None
    bytes_done: Annotated[
        StrictInt | None, Field(alias='bytesDone', description='Bytes verified and on disk on this cluster.', ge=0)
    ] = None
    bytes_total: Annotated[
        StrictInt | None, Field(alias='bytesTotal', description='Bytes this cluster has to fetch in total.', ge=0)
    ] = None
    reason: Annotated[
        str | None, Field(description='Machine-readable reason of the phase, e.g. ClusterNotReady or AuthFailed.')
    ] = None
    message: Annotated[str | None, Field(description='What happened on this cluster and what to do about it.')] = None
    lapsed: Annotated[
        StrictBool | None,
        Field(
            description='The copy lapsed (spec.retention.ttlAfterLastUse passed with no replica mounting it); it stays so until a replica is placed on this cluster again.'
        ),
    ] = None
    bytes_from: Annotated[
        Literal['Origin', 'Mirror', 'Volume'] | None,
        Field(
            alias='bytesFrom',
            description="Where this cluster's bytes came from (Origin, the fleet Mirror, or an existing Volume).",
        ),
    ] = None
    serving_commit: Annotated[
        str | None,
        Field(
            alias='servingCommit',
            description="The last commit of this repository that reached Ready on the cluster's volume (its hydration's servingCommit); empty when none has. While the resolved commit is not Ready there, ModelDeployments keep mounting this one.",
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


class ClusterSelector1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    match_labels: Annotated[
        dict[str, MatchLabelsAdditionalProperty] | None,
        Field(alias='matchLabels', description='Labels a FleetCluster must carry, each with exactly this value.'),
    ] = None
    match_expressions: Annotated[
        list[MatchExpression1] | None,
        Field(
            alias='matchExpressions', description='Label requirements a FleetCluster must all satisfy.', max_length=32
        ),
    ] = None


class CommandItem(RootModel[str]):
    root: Annotated[str, Field(description='One word of the command.', max_length=1024)]


class ComparedItem(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    commit: Annotated[str | None, Field(description='A commit the clusters served.')] = None
    bytes: Annotated[StrictInt | None, Field(description='Total bytes of the selected files at that commit.', ge=0)] = (
        None
    )
    files: Annotated[StrictInt | None, Field(description='Number of selected files at that commit.', ge=0)] = None
    shared_bytes: Annotated[
        StrictInt | None,
        Field(
            alias='sharedBytes',
            description='Bytes of the resolved commit whose content that commit also has (stored once on a volume).',
            ge=0,
        ),
    ] = None
    missing: Annotated[
        StrictBool | None, Field(description='The hub no longer has that commit; its counts are zero.')
    ] = None


class CredentialsSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    access_key_id_key: Annotated[
        str | None,
        Field(
            alias='accessKeyIdKey',
            description="Key in the Secret's data that holds the access key id.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'AWS_ACCESS_KEY_ID'
    secret_access_key_key: Annotated[
        str | None,
        Field(
            alias='secretAccessKeyKey',
            description="Key in the Secret's data that holds the secret access key.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'AWS_SECRET_ACCESS_KEY'


class Distribution(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    mirror: Annotated[
        Mirror | None,
        Field(
            description='Fleet mirrors in S3-compatible buckets, one per region: in each group of clusters sharing a mirror the first cluster by name fetches each commit from the origin and publishes it; the others wait for it and read the mirror, so the origin is read once per mirror. A cluster uses the regions[] entry matching its FleetCluster label regionLabel, else s3, else reads the origin.'
        ),
    ] = None


class GrantRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the ModelCacheGrant, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]


class Group(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    region: Annotated[
        str | None,
        Field(description='The regions[] entry\'s region; "" for the default mirror (spec.distribution.mirror.s3).'),
    ] = None
    bucket: Annotated[str | None, Field(description='The mirror\'s bucket; "" for the OCI mirror.')] = None
    repository: Annotated[
        str | None, Field(description="The OCI mirror's repository (spec.distribution.mirror.oci.repository).")
    ] = None
    publisher: Annotated[
        str | None,
        Field(description='The group\'s cluster that fetches from the origin and publishes; "" when none can.'),
    ] = None
    published: Annotated[
        StrictBool | None,
        Field(description="The group's publisher was Ready on the resolved commit (latched per commit)."),
    ] = None
    clusters: Annotated[StrictInt | None, Field(description='How many target clusters use this mirror.', ge=0)] = None


class HuggingFace(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[
        str,
        Field(
            description='Repository id in the shape org/name, e.g. Qwen/Qwen3-0.6B.',
            max_length=200,
            min_length=3,
            pattern='^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$',
        ),
    ]
    revision: Annotated[
        str | None,
        Field(
            description='Branch, tag or commit to warm. It is resolved once to a commit for the whole fleet (status.resolved.commit); every cluster fetches that commit.',
            max_length=255,
            min_length=1,
            pattern='^\\S+$',
        ),
    ] = 'main'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of the Hub or of a mirror with the same API. The token is only ever sent to this host.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = 'https://huggingface.co'
    token_secret_ref: Annotated[
        TokenSecretRef | None,
        Field(
            alias='tokenSecretRef',
            description='Optional Secret in this namespace holding a Hugging Face token, for private or gated repositories. It is copied to a cluster only while a Job there needs it and never appears in any status.',
        ),
    ] = None


class HuggingFace1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[
        str,
        Field(
            description='Repository id in the shape org/name, e.g. Qwen/Qwen3-0.6B.',
            max_length=200,
            min_length=3,
            pattern='^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$',
        ),
    ]
    revision: Annotated[
        str | None,
        Field(
            description='Branch, tag or commit to warm. It is resolved once to a commit for the whole fleet (status.resolved.commit); every cluster fetches that commit.',
            max_length=255,
            min_length=1,
            pattern='^\\S+$',
        ),
    ] = 'main'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of the Hub or of a mirror with the same API. The token is only ever sent to this host.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = 'https://huggingface.co'
    token_secret_ref: Annotated[
        TokenSecretRef | None,
        Field(
            alias='tokenSecretRef',
            description='Optional Secret in this namespace holding a Hugging Face token, for private or gated repositories. It is copied to a cluster only while a Job there needs it and never appears in any status.',
        ),
    ] = None


class IgnorePattern(RootModel[str]):
    root: Annotated[
        str, Field(description='A glob over repository paths, e.g. "original/*".', max_length=256, min_length=1)
    ]


class Image(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[
        str,
        Field(
            description='The image by tag or digest, with its registry, e.g. docker.io/vllm/vllm-openai:v0.11.0 or ...@sha256:<64 hex>.',
            max_length=512,
            min_length=1,
            pattern='^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$',
        ),
    ]
    pull_policy: Annotated[
        Literal['IfNotPresent', 'Always', 'Never'] | None,
        Field(alias='pullPolicy', description="The kubelet's imagePullPolicy for the pinned digest on each node."),
    ] = 'IfNotPresent'
    pull_secret_ref: Annotated[
        PullSecretRef | None,
        Field(
            alias='pullSecretRef',
            description="Optional Secret in this namespace with the registry's credentials in Docker config JSON (a kubernetes.io/dockerconfigjson Secret, as kubectl create secret docker-registry makes): the resolve-images Job asks the registry for the digest with it, and each target cluster gets a copy the keeper pods pull with (imagePullSecrets). It never appears in any status. Unset: anonymous, or the nodes' own credentials.",
        ),
    ] = None
    command: Annotated[
        list[CommandItem] | None,
        Field(
            description='A safe command that exits 0 (e.g. [vllm, serve, --help=all]), run once per node on clusters without image volumes; needed there (ImageCommandRequired).',
            max_length=32,
        ),
    ] = None
    args: Annotated[list[Arg] | None, Field(description='Arguments of the command.', max_length=64)] = None


class Image1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    image: Annotated[str, Field(description='The image as spec.images[].image names it.', max_length=512)]
    digest: Annotated[
        str | None,
        Field(
            description='The manifest digest every node pulls (sha256:<64 hex>); absent until resolved.', max_length=71
        ),
    ] = None
    ready_nodes: Annotated[
        StrictInt | None, Field(alias='readyNodes', description='Pool nodes that hold this digest, kept.', ge=0)
    ] = None
    desired_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='desiredNodes', description='Opted-in pool nodes of the target clusters that should hold it.', ge=0
        ),
    ] = None


class Job(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    backoff_limit: Annotated[
        StrictInt | None,
        Field(
            alias='backoffLimit',
            description='Retries of a failed agent pod before the Job fails (permanent exit codes fail it at once).',
            ge=0,
            le=100,
        ),
    ] = 3
    active_deadline_seconds: Annotated[
        StrictInt | None,
        Field(
            alias='activeDeadlineSeconds',
            description='Seconds an agent Job may run before Kubernetes stops it (reason DeadlineExceeded).',
            ge=60,
            le=604800,
        ),
    ] = 21600
    ttl_seconds_after_finished: Annotated[
        StrictInt | None,
        Field(
            alias='ttlSecondsAfterFinished',
            description='Seconds a finished agent Job is kept for inspection before Kubernetes deletes it.',
            ge=0,
            le=604800,
        ),
    ] = 3600


class Manifest(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    hugging_face: Annotated[
        HuggingFace1 | None,
        Field(
            alias='huggingFace',
            description='A model repository on the Hugging Face Hub or on a mirror that speaks the same HTTP API.',
        ),
    ] = None
    file: Annotated[
        str | None,
        Field(
            description="Path of the manifest file inside the volume (relative to the volume's root).",
            max_length=1024,
            min_length=1,
            pattern='^[^/\\s]\\S*$',
        ),
    ] = None


class ManifestItem(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    path: Annotated[str, Field(description='Path below the prefix (or subPath).', max_length=1024)]
    size: Annotated[StrictInt, Field(description='Bytes.', ge=0)]
    sha256: Annotated[str, Field(description="The file's sha256 (hex).", max_length=64)]
    version_id: Annotated[
        str | None,
        Field(alias='versionId', description='The pinned S3 object version (versioned buckets).', max_length=1024),
    ] = None
    etag: Annotated[
        str | None, Field(description='The pinned S3 ETag (unversioned buckets; sent as If-Match).', max_length=1024)
    ] = None
    blob: Annotated[
        str | None,
        Field(
            description="OCI: the registry blob that holds the file (sha256:<64 hex>), read by digest from the reference's repository.",
            max_length=71,
            pattern='^sha256:[0-9a-f]{64}$',
        ),
    ] = None
    offset: Annotated[
        StrictInt | None, Field(description='OCI, a file inside a tar layer; where its bytes start in the blob.', ge=0)
    ] = None
    blob_size: Annotated[
        StrictInt | None,
        Field(alias='blobSize', description="OCI, a file inside a tar layer; the blob's size in bytes.", ge=0),
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


class MatchExpression1(BaseModel):
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


class Mirror(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    oci: Annotated[
        Oci1 | None,
        Field(
            description="The fleet's own OCI registry: the first Ready target cluster by name publishes the verified commit once as a ModelPack artifact (one raw layer per file, pushed by digest and tagged with the manifest digest) to <repository>/<the source's repository name>; the others read it, every byte verified against the manifest digest latched at resolve. status.resolved.artifact names it by digest once published."
        ),
    ] = None
    s3: Annotated[
        S31 | None,
        Field(
            description='The default mirror bucket, for clusters of no regions[] entry (optional when regions is set). Blobs are stored content-addressed (<prefix>/blobs/sha256/<hex>) and a manifest last, so a copy is complete only once its manifest exists; every byte read from it is verified against the manifest digest latched at resolve.'
        ),
    ] = None
    region_label: Annotated[
        str | None,
        Field(
            alias='regionLabel',
            description="The FleetCluster label (metadata.labels) whose value selects a cluster's regions[] entry.",
            max_length=317,
            pattern='^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$',
        ),
    ] = 'topology.kubernetes.io/region'
    regions: Annotated[
        list[Region] | None,
        Field(
            description="A mirror per region: clusters whose regionLabel value equals an entry's region use its bucket, with a publisher of their own; clusters of no listed region use s3, or the origin without it.",
            max_length=32,
        ),
    ] = None
    on_missing: Annotated[
        Literal['Origin', 'Fail'] | None,
        Field(
            alias='onMissing',
            description='What a reader does with a blob missing or corrupt in the mirror: Origin fetches that file from the source and re-publishes it; Fail ends the hydration with MirrorIncomplete.',
        ),
    ] = 'Origin'


class Mirror1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    publisher: Annotated[
        str | None,
        Field(
            description='The publisher of the default mirror\'s group, else of the first group by region; "" when none can publish.'
        ),
    ] = None
    published: Annotated[
        StrictBool | None,
        Field(description="Every group's mirror holds the resolved commit complete (its publisher was Ready on it)."),
    ] = None
    commit: Annotated[str | None, Field(description='The commit the mirror state speaks of.')] = None
    groups: Annotated[
        list[Group] | None,
        Field(
            description='One row per mirror that target clusters use, by region ("" for the default mirror, s3): its bucket, its publisher, whether it holds the commit, and how many targets read it.',
            max_length=33,
        ),
    ] = None


class ModelCache(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    spec: Annotated[Spec, Field(description='What to warm and where.')]
    status: Annotated[
        Status | None, Field(description='Where the cache stands across the fleet, written by compose-model-cache.')
    ] = None
    api_version: Annotated[str | None, Field(alias='apiVersion')] = None
    kind: str | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description='Kubernetes object metadata.')] = None


class NodeTier(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    desired_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='desiredNodes',
            description='Eligible pool nodes (opted in, not control plane) over the target clusters.',
            ge=0,
        ),
    ] = None
    ready_nodes: Annotated[
        StrictInt | None,
        Field(alias='readyNodes', description='Nodes holding the verified commit whose warmer pod is Ready.', ge=0),
    ] = None
    downloading_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='downloadingNodes',
            description="Nodes waiting for a copy slot or copying from their cluster's volume.",
            ge=0,
        ),
    ] = None
    failed_nodes: Annotated[
        StrictInt | None,
        Field(
            alias='failedNodes',
            description="Nodes whose copy failed (see the hydrations' status.nodeTier.firstFailure).",
            ge=0,
        ),
    ] = None
    ready_clusters: Annotated[
        StrictInt | None,
        Field(
            alias='readyClusters',
            description='Target clusters whose node tier is Ready (every eligible node warm).',
            ge=0,
        ),
    ] = None
    summary: Annotated[
        str | None, Field(description='readyNodes out of desiredNodes, e.g. "3/4" (the NODES column).')
    ] = None


class Oci(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    reference: Annotated[
        str,
        Field(
            description='The artifact, registry host first, by tag or by digest: registry.example.com/models/qwen3:v1 or registry.example.com/models/qwen3@sha256:<64 hex>. Docker Hub is docker.io/<namespace>/<name>; no tag means no default: "latest" is not assumed.',
            max_length=1024,
            min_length=5,
            pattern='^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?:[0-9]{1,5})/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$',
        ),
    ]
    pull_secret_ref: Annotated[
        PullSecretRef | None,
        Field(
            alias='pullSecretRef',
            description='Optional Secret in this namespace with registry credentials in Docker config JSON (a kubernetes.io/dockerconfigjson Secret, as kubectl create secret docker-registry makes). It is copied to a cluster only while a Job there needs it, mounted as a file, and never appears in any status. Unset: anonymous.',
        ),
    ] = None
    plain_http: Annotated[
        StrictBool | None,
        Field(
            alias='plainHTTP',
            description='Speak plain HTTP to the registry instead of HTTPS (a registry on a trusted private network only: credentials would cross the network in the clear).',
        ),
    ] = False
    layout: Annotated[
        Literal['HfCache', 'Flat'] | None,
        Field(
            description='HfCache (default) stores the files like a Hub repo named oci/<host>/<repository> (the engine gets the snapshot directory in FLEETCACHE_MODEL); Flat keeps plain files, each commit in its own directory commits/<commit> on the volume (FLEETCACHE_MODEL), current -> the latest.'
        ),
    ] = 'HfCache'


class Oci1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repository: Annotated[
        str,
        Field(
            description='Where artifacts go, registry host first, without tag or digest: registry.example.com/fleet-models.',
            max_length=512,
            min_length=3,
            pattern='^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)+(:[0-9]{1,5})?|localhost(:[0-9]{1,5})?|[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?:[0-9]{1,5})/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*(/[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*)*$',
        ),
    ]
    push_secret_ref: Annotated[
        PushSecretRef | None,
        Field(
            alias='pushSecretRef',
            description='Optional Secret in this namespace with credentials in Docker config JSON that may push to the repository (a kubernetes.io/dockerconfigjson Secret). It is copied only to the publishing cluster while its Job runs, mounted as a file, and never appears in any status. Readers read the registry anonymously. Unset: anonymous pushes.',
        ),
    ] = None
    plain_http: Annotated[
        StrictBool | None,
        Field(
            alias='plainHTTP',
            description='Speak plain HTTP to the mirror registry instead of HTTPS (a registry on a trusted private network only).',
        ),
    ] = False


class Placement(BaseModel):
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
            description='FleetClusters by name. A name with no FleetCluster shows up as Pending with reason ClusterNotFound.',
            max_length=5000,
            min_length=1,
        ),
    ] = None


class PullSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the Docker config JSON.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = '.dockerconfigjson'


class PushSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the Docker config JSON.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = '.dockerconfigjson'


class Region(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    region: Annotated[
        str,
        Field(
            description='The value of the FleetCluster label regionLabel this mirror serves, e.g. eu-west-1.',
            max_length=63,
            min_length=1,
            pattern='^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$',
        ),
    ]
    s3: Annotated[
        S32,
        Field(
            description='The mirror bucket. Blobs are stored content-addressed (<prefix>/blobs/sha256/<hex>) and a manifest last, so a copy is complete only once its manifest exists; every byte read from it is verified against the manifest digest latched at resolve.'
        ),
    ]


class Resolved(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    repo: Annotated[str | None, Field(description='The repository that was resolved.')] = None
    revision: Annotated[str | None, Field(description='The revision (branch, tag or commit) that was resolved.')] = None
    commit: Annotated[str | None, Field(description='The full commit the revision resolved to.')] = None
    bytes: Annotated[StrictInt | None, Field(description='Total bytes of the selected files at that commit.', ge=0)] = (
        None
    )
    files: Annotated[StrictInt | None, Field(description='Number of selected files at that commit.', ge=0)] = None
    manifest_digest: Annotated[
        str | None,
        Field(
            alias='manifestDigest',
            description='Digest of the resolved file list (paths, sizes, hashes); identical on every cluster.',
        ),
    ] = None
    source_digest: Annotated[
        str | None,
        Field(
            alias='sourceDigest',
            description='Digest of spec.source when it was resolved; a changed source no longer matches and resolves again.',
        ),
    ] = None
    reference: Annotated[
        str | None,
        Field(
            description="OCI sources only: the reference pinned by digest (host/repository@sha256:<64 hex>), the manifest every cluster's bytes come from; a tag moved later changes nothing.",
            max_length=1024,
        ),
    ] = None
    artifact: Annotated[
        Artifact | None,
        Field(
            description="With spec.distribution.mirror.oci, once the publisher pushed the resolved commit: the ModelPack artifact in the fleet's registry, by digest."
        ),
    ] = None
    manifest: Annotated[
        list[ManifestItem] | None,
        Field(
            description='S3, OCI and existing-volume sources only: the pinned file list every cluster fetches or verifies against (sorted by path, at most 2,000 files); plan.manifest_digest of it (path, size and sha256 only) is manifestDigest.',
            max_length=2000,
        ),
    ] = None
    compared: Annotated[
        list[ComparedItem] | None,
        Field(
            description='What the resolved commit shares with each commit the clusters served when it was resolved (at most 8, by commit); a cluster serving one of them gets a volume for both commits.',
            max_length=8,
        ),
    ] = None


class RetainedItem(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    cluster: Annotated[str, Field(description="The FleetCluster's name.")]
    since: Annotated[
        AwareDatetime | None,
        Field(description='When the cluster was first seen outside the placement (RFC 3339; latched).'),
    ] = None
    until: Annotated[
        AwareDatetime | None,
        Field(
            description='When the copy is removed unless a replica mounts it or it is pinned: the later of since and its last use, plus spec.retention.afterRemoval (RFC 3339).'
        ),
    ] = None
    reason: Annotated[
        Literal['Mounted', 'Pinned', 'AfterRemoval', 'StatusUnknown'] | None,
        Field(
            description='Why it is still there: Mounted (a replica there mounts it), Pinned (spec.retention.pinned and not lapsed), AfterRemoval (until has not passed) or StatusUnknown (its hydration does not say whether a replica mounts it, so it is kept).'
        ),
    ] = None


class Retention(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    pinned: Annotated[
        StrictBool | None,
        Field(
            description="Keeps every copy of this cache against eviction when a cluster's cache storage passes its high watermark (a pinned copy still counts toward the storage's usage)."
        ),
    ] = False
    ttl_after_last_use: Annotated[
        str | None,
        Field(
            alias='ttlAfterLastUse',
            description='Hours after the last replica stopped mounting a copy (or after it became Ready, if later) until that copy lapses, e.g. 168h: it is then unpinned, evicted first when room is needed, and not re-warmed until a replica is placed on that cluster again. Whole hours only (uses are recorded per hour). Unset: copies never lapse.',
            max_length=7,
            pattern='^[1-9][0-9]{0,5}h$',
        ),
    ] = None
    after_removal: Annotated[
        str | None,
        Field(
            alias='afterRemoval',
            description='How long a cluster that left the placement keeps its copy once no replica there mounts it (and it is not pinned), counted from when it left or from its last use, if later, e.g. 1h or 30m; 0h removes it as soon as nothing mounts it.',
            max_length=7,
            pattern='^[0-9]{1,6}[hm]$',
        ),
    ] = '1h'


class Rollout(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    max_concurrent: Annotated[
        StrictInt | None,
        Field(
            alias='maxConcurrent',
            description='At most this many clusters hydrate at once (hydrations that are not yet Ready), taken in cluster-name order; with waves, inside the waves started.',
            ge=1,
            le=10000,
        ),
    ] = 10
    waves: Annotated[
        list[Wave] | None,
        Field(
            description='The waves a new commit goes out in, in order: a wave starts once the one before is done (every cluster Ready on the new commit and the replicas there Ready on it for bakeTime) and, if that one pauses, promoted. Clusters in no wave form a last implicit wave named rest. A cluster in two waves belongs to the first. Unset: every target at once, as maxConcurrent allows.',
            max_length=20,
        ),
    ] = None
    bake_time: Annotated[
        str | None,
        Field(
            alias='bakeTime',
            description='How long the replicas serving this cache in a wave must have been Ready on the new commit before the wave is done, in whole hours or minutes, e.g. 10m; 0m: as soon as they are Ready. A cluster without such replicas waits for its cache alone.',
            max_length=7,
            pattern='^[0-9]{1,6}[hm]$',
        ),
    ] = '0m'
    progress_deadline: Annotated[
        str | None,
        Field(
            alias='progressDeadline',
            description='How long a replica on the new commit in the current wave may stay not Ready before the wave fails, in whole hours or minutes, e.g. 30m.',
            max_length=7,
            pattern='^[0-9]{1,6}[hm]$',
        ),
    ] = '30m'
    on_failure: Annotated[
        Literal['Halt', 'Rollback'] | None,
        Field(
            alias='onFailure',
            description='What a failed wave does: Halt stops the rollout (no further wave starts, clusters keep what they have); Rollback also returns every cluster on the new commit to status.rollout.previousCommit (Halt when there is none).',
        ),
    ] = 'Halt'
    promote: Annotated[
        str | None,
        Field(
            description='The name of the paused wave to go on from. A value set before the rollout started belongs to an earlier one and is ignored until it changes.',
            max_length=63,
        ),
    ] = None
    restarted_at: Annotated[
        AwareDatetime | None,
        Field(
            alias='restartedAt',
            description='Set to a new time (RFC 3339, e.g. 2026-05-01T12:00:00Z) to resume a halted rollout from its wave, or a rolled-back one from the first wave, once the cause is fixed.',
        ),
    ] = None


class Rollout1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    commit: Annotated[
        str | None,
        Field(description='The commit the rollout moves the fleet to (status.resolved.commit when it started).'),
    ] = None
    manifest_digest: Annotated[
        str | None,
        Field(
            alias='manifestDigest',
            description="The manifest digest of that commit's selected files; other patterns on the same commit are another rollout.",
        ),
    ] = None
    previous_commit: Annotated[
        str | None,
        Field(
            alias='previousCommit',
            description='The commit most target clusters served when the rollout started, which spec.rollout.onFailure Rollback returns to; empty when there was none.',
        ),
    ] = None
    previous_manifest_digest: Annotated[
        str | None,
        Field(
            alias='previousManifestDigest',
            description='The manifest digest a target hydration pinned to previousCommit had when the rollout started: with previousBytes, the content a Rollback composes again; empty when unknown (a Rollback then halts).',
        ),
    ] = None
    previous_bytes: Annotated[
        StrictInt | None,
        Field(alias='previousBytes', description='The bytes of that previous content (0 when unknown).', ge=0),
    ] = None
    phase: Annotated[
        Literal['Progressing', 'Paused', 'Halted', 'RolledBack', 'Complete'] | None,
        Field(
            description='Progressing (a wave is under way), Paused (a wave with pause is done and waits for spec.rollout.promote), Halted (a wave failed; no further wave starts), RolledBack (a wave failed and the clusters on the new commit return to previousCommit) or Complete (every wave done).'
        ),
    ] = None
    wave: Annotated[
        str | None,
        Field(
            description="The current wave's name (the one under way, paused, failed, or the last one once Complete)."
        ),
    ] = None
    waves: Annotated[
        list[Wave1] | None,
        Field(description='Every wave in order, the implicit rest last, with its clusters counted.', max_length=21),
    ] = None
    started_time: Annotated[
        AwareDatetime | None,
        Field(alias='startedTime', description='When the rollout of this commit started (RFC 3339).'),
    ] = None
    resumed_time: Annotated[
        AwareDatetime | None,
        Field(
            alias='resumedTime',
            description='When spec.rollout.restartedAt last resumed it (RFC 3339); failures from before are not counted again.',
        ),
    ] = None
    completed_time: Annotated[
        AwareDatetime | None,
        Field(
            alias='completedTime',
            description='When the last wave was done (RFC 3339); the volumes keep previousCommit until spec.retention.afterRemoval after it.',
        ),
    ] = None
    restarted_at: Annotated[
        str | None,
        Field(
            alias='restartedAt',
            description='The spec.rollout.restartedAt last seen; a different one resumes a halted or rolled-back rollout.',
        ),
    ] = None
    stale_promote: Annotated[
        str | None,
        Field(
            alias='stalePromote',
            description='spec.rollout.promote as it stood when this rollout started, ignored (it was given for an earlier rollout) until it changes; empty once it has.',
        ),
    ] = None
    summary: Annotated[
        str | None,
        Field(
            description='The rollout in a few words (the ROLLOUT column): "wave 2/4", "paused at canary", "halted at canary", "rolled back" or "complete".'
        ),
    ] = None
    message: Annotated[
        str | None,
        Field(
            description="What the rollout waits for or why it stopped: the wave, its clusters and the first failure's reason, and what to do."
        ),
    ] = None


class S3(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bucket: Annotated[
        str,
        Field(
            description="The bucket's name.", max_length=63, min_length=3, pattern='^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
        ),
    ]
    prefix: Annotated[
        str | None,
        Field(
            description='Folder in the bucket, without a leading "/"; empty means the whole bucket.',
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = ''
    region: Annotated[
        str | None,
        Field(description="The bucket's region.", max_length=64, min_length=1, pattern='^[a-z0-9][-a-z0-9]{0,62}$'),
    ] = 'us-east-1'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of an S3-compatible store (MinIO, Ceph, R2, ...); unset means AWS S3. Requests to it use path-style addressing.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = None
    credentials_secret_ref: Annotated[
        CredentialsSecretRef | None,
        Field(
            alias='credentialsSecretRef',
            description="Optional Secret in this namespace with the access key pair. It is copied to a cluster only while a Job there needs it, mounted as files, and never appears in any status. Unset: the cluster's own identity (IRSA, instance profile), or anonymous for a public bucket.",
        ),
    ] = None
    layout: Annotated[
        Literal['HfCache', 'Flat'] | None,
        Field(
            description='HfCache (default) stores the files like a Hub repo named s3/<bucket>/<prefix> (the engine gets the snapshot directory in FLEETCACHE_MODEL); Flat keeps plain files, each commit in its own directory commits/<commit> on the volume (FLEETCACHE_MODEL), current -> the latest.'
        ),
    ] = 'HfCache'


class S31(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bucket: Annotated[
        str,
        Field(
            description="The bucket's name.", max_length=63, min_length=3, pattern='^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
        ),
    ]
    prefix: Annotated[
        str | None,
        Field(
            description="Folder in the bucket for the mirror's blobs and manifests.",
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = 'fleetcache'
    region: Annotated[
        str | None,
        Field(description="The bucket's region.", max_length=64, min_length=1, pattern='^[a-z0-9][-a-z0-9]{0,62}$'),
    ] = 'us-east-1'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of an S3-compatible store (MinIO, Ceph, R2, ...); unset means AWS S3. Requests to it use path-style addressing.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = None
    credentials_secret_ref: Annotated[
        CredentialsSecretRef | None,
        Field(
            alias='credentialsSecretRef',
            description="Optional Secret in this namespace with the access key pair. It is copied to a cluster only while a Job there needs it, mounted as files, and never appears in any status. Unset: the cluster's own identity (IRSA, instance profile), or anonymous for a public bucket.",
        ),
    ] = None


class S32(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    bucket: Annotated[
        str,
        Field(
            description="The bucket's name.", max_length=63, min_length=3, pattern='^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'
        ),
    ]
    prefix: Annotated[
        str | None,
        Field(
            description="Folder in the bucket for the mirror's blobs and manifests.",
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = 'fleetcache'
    region: Annotated[
        str | None,
        Field(description="The bucket's region.", max_length=64, min_length=1, pattern='^[a-z0-9][-a-z0-9]{0,62}$'),
    ] = 'us-east-1'
    endpoint: Annotated[
        str | None,
        Field(
            description='Base URL of an S3-compatible store (MinIO, Ceph, R2, ...); unset means AWS S3. Requests to it use path-style addressing.',
            max_length=2048,
            pattern='^https?://[^\\s/?#]+(/[^\\s?#]*)?$',
        ),
    ] = None
    credentials_secret_ref: Annotated[
        CredentialsSecretRef | None,
        Field(
            alias='credentialsSecretRef',
            description="Optional Secret in this namespace with the access key pair. It is copied to a cluster only while a Job there needs it, mounted as files, and never appears in any status. Unset: the cluster's own identity (IRSA, instance profile), or anonymous for a public bucket.",
        ),
    ] = None


class Source(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    hugging_face: Annotated[
        HuggingFace | None,
        Field(
            alias='huggingFace',
            description='A model repository on the Hugging Face Hub or on a mirror that speaks the same HTTP API.',
        ),
    ] = None
    s3: Annotated[
        S3 | None,
        Field(
            description="Objects under a prefix of an S3 bucket (or of an S3-compatible store). Resolve pins each object once for the fleet (versionId, else ETag, and a sha256 from S3's checksum or read once); every cluster fetches exactly those versions and verifies every byte."
        ),
    ] = None
    oci: Annotated[
        Oci | None,
        Field(
            description="A model in an OCI registry: a ModelPack artifact (application/vnd.cncf.model.* media types, or the older vnd.cnai.model.*) or an image whose layers hold the model's files. Resolve pins the manifest digest once for the fleet (a tag resolves like a branch) and each file's sha256 from the layer descriptors; every cluster fetches exactly those blobs and verifies every byte."
        ),
    ] = None
    volume: Annotated[
        Volume | None,
        Field(
            description='An existing PVC of this name, filled by someone else, on every target cluster. Nothing is downloaded: the agent verifies its files against a manifest and the cluster is Ready only if every byte matches. fleetcache never creates, resizes or deletes the claim.'
        ),
    ] = None
    allow_patterns: Annotated[
        list[AllowPattern] | None,
        Field(
            alias='allowPatterns',
            description='Only files matching at least one of these globs are fetched (huggingface_hub allow_patterns semantics). Empty or unset means every file.',
            max_length=64,
        ),
    ] = None
    ignore_patterns: Annotated[
        list[IgnorePattern] | None,
        Field(
            alias='ignorePatterns',
            description='Files matching any of these globs are skipped, even if an allow pattern matches (huggingface_hub ignore_patterns semantics).',
            max_length=64,
        ),
    ] = None


class Spec(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    grant_ref: Annotated[
        GrantRef,
        Field(
            alias='grantRef',
            description='The ModelCacheGrant in this namespace that admits this cache: its clusters must cover the placement, its budget the projected bytes, and pinning needs its allowPinned. Nothing is fanned out until the grant admits the cache at its current spec; an edit the grant refuses keeps the copies admitted before.',
        ),
    ]
    source: Annotated[Source, Field(description='Where the weights come from and which files to take.')]
    placement: Annotated[
        Placement,
        Field(
            description='The target clusters: FleetClusters matched by a label selector, or listed by name. Exactly one of clusterSelector or clusterNames.'
        ),
    ]
    storage: Annotated[
        Storage | None,
        Field(
            description="The cache volume on each target cluster. Every field is optional: the size defaults to the resolved bytes plus 10 %, rounded up to whole GiB; class and access mode default to the FleetCluster's spec.cache."
        ),
    ] = None
    images: Annotated[
        list[Image] | None,
        Field(
            description='Engine images to keep warm beside the weights: each is resolved once for the fleet to one digest (status.images) and pulled at that digest on every opted-in node of spec.storage.nodePool on every target cluster that declares the pool, whatever spec.storage.tier, at most maxConcurrentNodes nodes at once. Where the FleetCluster sets spec.features.imageVolumes the image is mounted as an image volume and nothing of it runs; elsewhere its command runs once per node and must exit 0. The images stay on the nodes while the cache keeps them.',
            max_length=8,
        ),
    ] = None
    distribution: Annotated[
        Distribution | None, Field(description='How copies reach the clusters beyond each one reading the source.')
    ] = None
    rollout: Annotated[
        Rollout | None,
        Field(
            description='How a commit goes out across the fleet: at most maxConcurrent clusters hydrating at once and, with waves, wave by wave, each gated on its clusters and their replicas serving the new commit (design/rollouts.md). Without waves every target is one wave and nothing is gated.',
            validate_default=True,
        ),
    ] = {}
    min_ready: Annotated[
        StrictInt | None,
        Field(
            alias='minReady',
            description='The cache is Available once this many target clusters are Ready; 0 means all target clusters.',
            ge=0,
            le=10000,
        ),
    ] = 0
    job: Annotated[
        Job | None,
        Field(
            description='Limits of the agent Jobs (resolve and hydrate) on the target clusters.', validate_default=True
        ),
    ] = {}
    retention: Annotated[
        Retention | None,
        Field(
            description='How long each cluster keeps its copy: against eviction when its storage fills up (pinned, ttlAfterLastUse), and after the cluster leaves the placement (afterRemoval). Copied into every ModelCacheHydration.',
            validate_default=True,
        ),
    ] = {}
    agent: Annotated[
        Agent | None, Field(description='Optional tuning of the fetching agent, copied into every ModelCacheHydration.')
    ] = None
    crossplane: Annotated[
        dict[str, Any] | None,
        Field(description='Composition selection and resource references, written by Crossplane.'),
    ] = None


class Status(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    resolved: Annotated[
        Resolved | None, Field(description='The one commit the whole fleet fetches, latched from the resolve step.')
    ] = None
    desired_clusters: Annotated[
        StrictInt | None, Field(alias='desiredClusters', description='Number of target clusters.', ge=0)
    ] = None
    ready_clusters: Annotated[
        StrictInt | None,
        Field(alias='readyClusters', description='Target clusters whose cache is Ready on the resolved commit.', ge=0),
    ] = None
    hydrating_clusters: Annotated[
        StrictInt | None, Field(alias='hydratingClusters', description='Target clusters currently fetching.', ge=0)
    ] = None
    failed_clusters: Annotated[
        StrictInt | None,
        Field(alias='failedClusters', description='Target clusters whose hydration failed permanently.', ge=0),
    ] = None
    pending_clusters: Annotated[
        StrictInt | None,
        Field(
            alias='pendingClusters',
            description='Target clusters waiting (not Ready yet, not found, or held back by rollout.maxConcurrent).',
            ge=0,
        ),
    ] = None
    lapsed_clusters: Annotated[
        StrictInt | None,
        Field(
            alias='lapsedClusters',
            description='Target clusters whose copy lapsed (spec.retention.ttlAfterLastUse passed with no replica mounting it): unpinned, evicted first, not re-warmed until a replica is placed there again (the LAPSED column).',
            ge=0,
        ),
    ] = None
    evicted_clusters: Annotated[
        StrictInt | None,
        Field(
            alias='evictedClusters',
            description='Target clusters whose copy their FleetCluster evicted to get its cache storage under the low watermark; re-warmed when a replica is placed there again.',
            ge=0,
        ),
    ] = None
    retained_clusters: Annotated[
        StrictInt | None,
        Field(
            alias='retainedClusters',
            description='Clusters that left the placement but still keep a copy (see retained).',
            ge=0,
        ),
    ] = None
    mounted_replicas: Annotated[
        StrictInt | None,
        Field(
            alias='mountedReplicas',
            description="Replicas that mount a copy of this cache, over every cluster (the sum of the hydrations' mountedBy). Each holds the ModelCache against deletion with a Crossplane Usage.",
            ge=0,
        ),
    ] = None
    retained: Annotated[
        list[RetainedItem] | None,
        Field(
            description='At most 100 clusters that left the placement but keep their copy, in name order (retainedClusters counts them all): why, and until when. A cluster that comes back into the placement is a normal target again.',
            max_length=100,
        ),
    ] = None
    images: Annotated[
        list[Image1] | None,
        Field(
            description="spec.images as the fleet runs them: each image's digest, resolved once (a new tag or image resolves again; an unchanged one keeps its digest), and the pool nodes holding it, summed over the target clusters.",
            max_length=8,
        ),
    ] = None
    images_summary: Annotated[
        str | None,
        Field(
            alias='imagesSummary',
            description='The IMAGES column: pool nodes holding every image of spec.images out of the nodes that should, e.g. "2 images 9/10"; "resolving" until the digests are pinned, "resolve failed (AuthFailed)" while the resolve Job failed (the cache\'s events say why).',
            max_length=64,
        ),
    ] = None
    node_tier: Annotated[
        NodeTier | None,
        Field(
            alias='nodeTier',
            description="Tier Node only (absent for Volume): each target hydration's status.nodeTier summed; the per-node detail stays on the hydrations.",
        ),
    ] = None
    summary: Annotated[
        str | None, Field(description='Ready out of desired clusters, e.g. "2/3" (the CLUSTERS column).')
    ] = None
    reason: Annotated[
        str | None,
        Field(
            description="Why the cache stands where it does, in one word (the REASON column): the reason of the first failed cluster in status.clusters (e.g. AuthFailed), else the Degraded condition's (ClusterNotFound), else the Progressing condition's (e.g. Hydrating, Complete, OverQuota, AwaitingGrant)."
        ),
    ] = None
    progress_percent: Annotated[
        StrictInt | None,
        Field(
            alias='progressPercent',
            description='Fleet-wide bytesDone / bytesTotal as a whole percent, 0 to 100 (the PROGRESS column).',
            ge=0,
            le=100,
        ),
    ] = None
    clusters_omitted: Annotated[
        StrictInt | None,
        Field(
            alias='clustersOmitted',
            description='Target clusters not listed in clusters (it lists at most 100); see everyCluster.',
            ge=0,
        ),
    ] = None
    every_cluster: Annotated[
        str | None,
        Field(
            alias='everyCluster',
            description="The command listing every target cluster's ModelCacheHydration, e.g. kubectl get modelcachehydrations -n ml -l fleetcache.dev/model-cache=qwen.",
        ),
    ] = None
    size_human: Annotated[
        str | None,
        Field(alias='sizeHuman', description='Resolved bytes, human readable, e.g. "1.2GiB" (the SIZE column).'),
    ] = None
    commit_short: Annotated[
        str | None,
        Field(alias='commitShort', description='First 8 characters of the resolved commit (the COMMIT column).'),
    ] = None
    mirror: Annotated[
        Mirror1 | None,
        Field(description="The fleet mirrors' state for the resolved commit (spec.distribution.mirror)."),
    ] = None
    rollout: Annotated[
        Rollout1 | None,
        Field(
            description='Where the rollout of the resolved commit stands, wave by wave; absent without spec.rollout.waves (design/rollouts.md).'
        ),
    ] = None
    clusters: Annotated[
        list[Cluster] | None,
        Field(
            description="At most 100 target clusters, those that need attention first: Failed, then Hydrating, Pending and Ready, each in name order (clustersOmitted counts the rest). Every cluster's state is in its ModelCacheHydration; everyCluster is the command that lists them all.",
            max_length=100,
        ),
    ] = None
    conditions: Annotated[list[dict[str, Any]] | None, Field(description='Conditions, written by Crossplane.')] = None
    crossplane: Annotated[dict[str, Any] | None, Field(description="Crossplane's own status.")] = None


class Storage(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    size: Annotated[
        str | None,
        Field(
            description='Requested size of the cache volume on every target cluster, e.g. 20Gi.',
            max_length=32,
            pattern='^([1-9][0-9]*(\\.[0-9]+)?|0\\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$',
        ),
    ] = None
    storage_class_name: Annotated[
        str | None,
        Field(
            alias='storageClassName',
            description="StorageClass of the cache volume; overrides the FleetCluster's spec.cache.storageClassName.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ] = None
    access_mode: Annotated[
        Literal['ReadWriteMany', 'ReadWriteOnce'] | None,
        Field(
            alias='accessMode',
            description="Access mode of the cache volume; overrides the FleetCluster's spec.cache.accessMode.",
        ),
    ] = None
    tier: Annotated[
        Literal['Volume', 'Node'] | None,
        Field(
            description="Volume keeps the model on each cluster's volume. Node also copies it from that verified volume onto the local disk of every opted-in pool node of clusters whose FleetCluster sets spec.nodeCache (the volume stays: it is the in-cluster source and the in-pod fallback); elsewhere the cache stays Volume."
        ),
    ] = 'Volume'
    node_pool: Annotated[
        str | None,
        Field(
            alias='nodePool',
            description="The node pool of every target cluster a Node tier warms: a FleetCluster's spec.nodePools[] name, or default (its spec.nodeCache). The grant must name it in spec.nodePools (else PoolNotGranted); a cluster without the pool keeps the cache on its volume (NodeTierNotConfigured).",
            max_length=63,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
        ),
    ] = 'default'


class TokenSecretRef(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="Name of the Secret, in the ModelCache's own namespace.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    key: Annotated[
        str | None,
        Field(
            description="Key in the Secret's data that holds the token.",
            max_length=253,
            min_length=1,
            pattern='^[-._a-zA-Z0-9]+$',
        ),
    ] = 'HF_TOKEN'


class Value(RootModel[str]):
    root: Annotated[str, Field(description='One label value.', max_length=63)]


class Volume(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    claim_name: Annotated[
        str,
        Field(
            alias='claimName',
            description="Name of the PVC, in the namespace named like the ModelCache's on each cluster.",
            max_length=253,
            min_length=1,
            pattern='^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$',
        ),
    ]
    sub_path: Annotated[
        str | None,
        Field(
            alias='subPath',
            description="Directory inside the volume that holds the model's files; empty means its root.",
            max_length=1024,
            pattern='^$|^[^/\\s]\\S*$',
        ),
    ] = ''
    manifest: Annotated[
        Manifest | None,
        Field(
            description='What the files must be: the Hub listing of a pinned repo revision (huggingFace), or a manifest file shipped in the volume (file: a JSON list of {path, size, sha256} relative to subPath). Unset means file .fleetcache/manifest.json.'
        ),
    ] = None


class Wave(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[
        str,
        Field(
            description="The wave's name, a DNS label (e.g. canary); spec.rollout.promote names it.",
            max_length=63,
            min_length=1,
        ),
    ]
    cluster_names: Annotated[
        list[ClusterName] | None,
        Field(
            alias='clusterNames',
            description='Target clusters by FleetCluster name. A name outside spec.placement is reported in status.rollout.message and skipped.',
            max_length=5000,
            min_length=1,
        ),
    ] = None
    cluster_selector: Annotated[
        ClusterSelector1 | None,
        Field(
            alias='clusterSelector',
            description="Selects target clusters by their FleetCluster's labels (Kubernetes label selector semantics); an empty selector takes every target left.",
        ),
    ] = None
    percent: Annotated[
        StrictInt | None,
        Field(
            description='This percentage of the targets no earlier wave took, rounded up, in cluster-name order (e.g. 10 of 25 left: 3 clusters).',
            ge=1,
            le=100,
        ),
    ] = None
    pause: Annotated[
        StrictBool | None,
        Field(
            description='Once this wave is done, wait for spec.rollout.promote to name it before the next wave starts.'
        ),
    ] = False


class Wave1(BaseModel):
    model_config = ConfigDict(
        extra='forbid',
    )
    name: Annotated[str | None, Field(description="The wave's name (rest for the clusters in no wave).")] = None
    clusters: Annotated[StrictInt | None, Field(description='Target clusters in this wave.', ge=0)] = None
    ready: Annotated[StrictInt | None, Field(description='Of those, clusters Ready on the new commit.', ge=0)] = None
    failed: Annotated[
        StrictInt | None,
        Field(
            description='Of those, clusters whose hydration failed on the new commit or whose replicas on it stayed not Ready past spec.rollout.progressDeadline.',
            ge=0,
        ),
    ] = None