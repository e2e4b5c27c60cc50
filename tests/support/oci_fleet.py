"""What the OCI end-to-end tests play on (tests/test_oci_e2e.py, test_oci_mirror_e2e.py,
test_image_volume_e2e.py): a small ModelPack's files, the XRs they apply (FleetClusters, an OCI
ModelCache under the sources act's grant, a ModelDeployment, a Docker config Secret as
`kubectl create secret docker-registry` makes it) and the fleet itself: the real function server,
simulated clusters and one demo `Stage` to play rounds on."""

from __future__ import annotations

import base64
import contextlib
import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fleetcache.devtools import render as rendering
from fleetcache.devtools.demo import sources as act
from fleetcache.devtools.demo.stage import Stage
from fleetcache.devtools.simulation import Clock, Cluster, translate
from fleetcache.functions import naming, read
from tests.support.plane import control_plane
from tests.support.registry import LoopbackRegistry

REPOSITORY = "models/tiny"
ENGINE = {"image": "vllm/vllm-openai:v0.11.0", "args": ["--model=$(FLEETCACHE_MODEL)"]}


def model_files(seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {"config.json": json.dumps({"model_type": "tiny", "seed": seed}).encode(),
            "model.safetensors": rng.randbytes(200_003),
            "tokenizer/vocab.json": json.dumps(list(range(seed, seed + 50))).encode()}


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def fleet_cluster(name: str, **spec: object) -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster", "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "crossplane-system", "name": f"{name}-kubeconfig"},
                     **spec}}


def oci_cache(name: str, registry: LoopbackRegistry, clusters: Iterable[str], *, spec: dict | None = None,
              **oci: object) -> dict:
    """A ModelCache of `<registry>/models/tiny:v1` over plain HTTP; `oci` adds source fields, `spec` others."""
    source = {"oci": {"reference": f"{registry.host}/{REPOSITORY}:v1", "plainHTTP": True, **oci}}
    return act.cache(name, source, clusters, **(spec or {}))


def docker_config_secret(name: str, host: str, user: str, password: str) -> dict:
    """What `kubectl create secret docker-registry` makes."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = json.dumps({"auths": {host: {"username": user, "password": password, "auth": auth}}})
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": act.NAMESPACE},
            "data": {".dockerconfigjson": base64.b64encode(config.encode()).decode()}}


def model_deployment(name: str, cache: str, clusters: Iterable[str]) -> dict:
    placed = list(clusters)
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": act.NAMESPACE},
            "spec": {"modelCacheRef": {"name": cache}, "replicas": len(placed), "maxReplicasPerCluster": 1,
                     "placement": {"clusterNames": placed}, "engine": ENGINE}}


@contextlib.contextmanager
def simulated_fleet(root: Path, names: tuple[str, ...], deadline: float,
                    clusters_spec: dict[str, dict] | None = None) -> Iterator[Stage]:
    """Clusters `names` under `root`, their FleetClusters (`clusters_spec` adds spec fields by name)
    and the sources act's grant applied, on the real function server; `deadline` seconds guard the
    whole story against a hang."""
    with rendering.function_process() as address, rendering.channel_to(address) as channel:
        clusters = {name: Cluster(name, root / name) for name in names}
        control = control_plane(channel, clusters)
        stage = Stage(control, clusters, (), Clock(), act.NAMESPACE, "", "", 0, names, 0.05,
                      time.monotonic() + deadline, lambda line: None)
        try:
            for name in names:
                control.apply(fleet_cluster(name, **(clusters_spec or {}).get(name, {})))
            control.apply(act.grant(names))
            yield stage
        finally:
            for cluster in clusters.values():
                cluster.stop()


@dataclass
class Engine:
    """A replica's engine Deployment on its cluster, and what its FLEETCACHE_MODEL holds."""

    cluster: str
    pod: dict  # the pod template's spec
    env: dict[str, str]
    files: dict[str, bytes]  # under FLEETCACHE_MODEL, through the pod's claims and image volumes


def engines(stage: Stage, deployment: str) -> dict[str, Engine]:
    """By cluster, the engine Deployments a ModelDeployment's replicas composed."""
    found = {}
    for name, cluster in sorted(stage.clusters.items()):
        for (kind, namespace, _), obj in cluster.objects.items():
            labels = read.get_path(obj, "metadata.labels", {}) or {}
            if kind != "Deployment" or labels.get(f"{naming.GROUP}/model-deployment") != deployment:
                continue
            pod = obj["spec"]["template"]["spec"]
            container = pod["containers"][0]
            env = {e["name"]: e.get("value", "") for e in container["env"]}
            mounts = cluster.workloads.model_mounts(namespace, pod, container)
            found[name] = Engine(name, pod, env, files_under(Path(translate(env["FLEETCACHE_MODEL"], mounts))))
    return found
