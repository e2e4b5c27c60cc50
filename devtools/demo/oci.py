"""`fleetcache demo`, a model from an OCI registry, published once for the fleet and mounted
as image volumes (issue 22).

Played last, in its own namespace under its own grant, on three clusters of its own that only
its placement names (no earlier act's selector, count or grant sees them): gpu-oci-1 mounts
volumes only; gpu-oci-2 and gpu-oci-3 declare spec.features.imageVolumes, and their simulated
kubelets pull an artifact and mount each layer's file at its path, as CRI-O does
(fleetcache.devtools.simulation.images). Two docker-registry processes on loopback
(fleetcache.devtools.package.registry) are the origin and the fleet's own registry.
1. a ModelPack artifact (one raw layer per file) is pushed by hand into the origin, and a
   ModelCache names it by tag (spec.source.oci) with spec.distribution.mirror.oci to the
   fleet's registry: it resolves to one digest; gpu-oci-1, first by name, fetches it from the
   origin, verifies it and publishes the commit as a ModelPack artifact, which
   status.resolved.artifact names by digest; the image-volume clusters warm nothing;
2. then a ModelDeployment, one replica per cluster: the two on image-volume clusters mount the
   fleet's artifact by digest (delivery Image), the third its cluster volume (Cache); the files
   under each replica's FLEETCACHE_MODEL hash to the resolved manifest. (Applied once the
   artifact is published, so the replicas start on their final delivery: applied with the
   cache, the image-volume replicas would load from a volume copy read from the mirror until
   the artifact exists, since a cache with an OCI mirror mounts only the fleet's artifact.)
3. the blob bytes the origin served for the fleet (its access log) against the model's size:
   once; and the fleet registry's: one pull per image-volume cluster.

`play` returns what differs from that ending; [] when the fleet converged as it should.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from fleetcache.devtools.demo.sources import model_files
from fleetcache.devtools.demo.stage import Stage, phase_of
from fleetcache.devtools.package.modelpack import Pusher
from fleetcache.devtools.package.registry import blob_bytes_served, loopback_registry
from fleetcache.devtools.simulation import Cluster, kubectl_table, translate
from fleetcache.functions import naming, quantities, read
from fleetcache.manifest import SHA256, Entry, manifest_digest

NAMESPACE = "oci"
GRANT = "oci"
CACHE = "pack-chat"
REPOSITORY, TAG = "models/pack-chat", "v1"  # in the origin registry
FLEET_REPOSITORY = "fleet-models"  # in the fleet's registry
VOLUME_CLUSTER = "gpu-oci-1"
IMAGE_CLUSTERS = ("gpu-oci-2", "gpu-oci-3")
CLUSTERS = (VOLUME_CLUSTER, *IMAGE_CLUSTERS)
DELIVERIES = {VOLUME_CLUSTER: "Cache", **dict.fromkeys(IMAGE_CLUSTERS, "Image")}
SHARE = 0.25  # of the demo model's size
ACT_SECONDS = 180.0  # a hang guard, as the demo's deadlines
ENGINE = {"image": "vllm/vllm-openai:v0.11.0", "args": ["--model=$(FLEETCACHE_MODEL)"]}


# --- what the platform team and the tenant apply --------------------------------------------


def fleet_cluster(name: str) -> dict:
    spec: dict = {"kubeconfigSecretRef": {"namespace": "crossplane-system", "name": f"{name}-kubeconfig"},
                  "cache": {"storageClassName": "fast-rwx"}}
    if name in IMAGE_CLUSTERS:
        spec["features"] = {"imageVolumes": True}
    return {"apiVersion": naming.API_VERSION, "kind": "FleetCluster",
            "metadata": {"name": name, "labels": {"fleetcache.dev/tier": "oci"}}, "spec": spec}


def grant() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCacheGrant",
            "metadata": {"name": GRANT, "namespace": NAMESPACE},
            "spec": {"clusters": {"clusterNames": list(CLUSTERS)}, "quota": {"bytes": "1Gi"}}}


def model_cache(origin: str, fleet_registry: str) -> dict:
    """The ModelCache of the artifact at origin (host:port), published to fleet_registry."""
    return {"apiVersion": naming.API_VERSION, "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"grantRef": {"name": GRANT},
                     "source": {"oci": {"reference": f"{origin}/{REPOSITORY}:{TAG}", "plainHTTP": True}},
                     "distribution": {"mirror": {"oci": {
                         "repository": f"{fleet_registry}/{FLEET_REPOSITORY}", "plainHTTP": True}}},
                     "placement": {"clusterNames": list(CLUSTERS)}}}


def model_deployment() -> dict:
    return {"apiVersion": naming.API_VERSION, "kind": "ModelDeployment",
            "metadata": {"name": CACHE, "namespace": NAMESPACE},
            "spec": {"modelCacheRef": {"name": CACHE}, "replicas": len(CLUSTERS),
                     "maxReplicasPerCluster": 1, "placement": {"clusterNames": list(CLUSTERS)},
                     "engine": ENGINE}}


# --- reading the fleet ----------------------------------------------------------------------


def resolved(stage: Stage) -> dict:
    cache = stage.control.xrs.get(("ModelCache", NAMESPACE, CACHE), {})
    return read.get_path(cache, "status.resolved", {}) or {}


def published(stage: Stage) -> bool:
    """The artifact is latched and every cluster's hydration of the resolved commit is Ready."""
    commit = resolved(stage).get("commit")
    return bool(commit and read.get_path(resolved(stage), "artifact.digest")) and all(
        read.get_path(stage.hydration(CACHE, c), "spec.commit") == commit
        and phase_of(stage.hydration(CACHE, c)) == "Ready" for c in CLUSTERS)


def replicas(stage: Stage) -> dict[str, dict]:
    """The act's ModelReplicas, by cluster."""
    return {r["spec"]["clusterName"]: r for r in stage.control.of_kind("ModelReplica")
            if r["metadata"]["namespace"] == NAMESPACE}


def serving(stage: Stage) -> bool:
    deployment = stage.control.xrs.get(("ModelDeployment", NAMESPACE, CACHE), {})
    return read.get_path(deployment, "status.replicas.ready") == len(CLUSTERS) and all(
        read.get_path(r, "status.phase") == "Ready" for r in replicas(stage).values()) \
        and len(replicas(stage)) == len(CLUSTERS)


def placements(stage: Stage) -> dict[str, dict]:
    deployment = stage.control.xrs.get(("ModelDeployment", NAMESPACE, CACHE), {})
    return {p.get("cluster"): p for p in read.get_path(deployment, "status.placements", []) or []}


def model_dir(cluster: Cluster) -> tuple[str, Path] | None:
    """FLEETCACHE_MODEL of the cluster's engine Deployment, and the host directory it is
    through the pod's mounts (a claim's directory, or the pulled artifact's)."""
    for (kind, namespace, _), obj in sorted(cluster.objects.items()):
        labels = read.get_path(obj, "metadata.labels", {}) or {}
        if kind != "Deployment" or namespace != NAMESPACE or \
                labels.get(f"{naming.GROUP}/model-deployment") != CACHE:
            continue
        pod = obj["spec"]["template"]["spec"]
        container = pod["containers"][0]
        model = next((e.get("value", "") for e in container.get("env", [])
                      if e["name"] == "FLEETCACHE_MODEL"), "")
        return model, Path(translate(model, cluster.workloads.model_mounts(namespace, pod, container)))
    return None


def digest_of(root: Path) -> tuple[int, str]:
    """The files under root and the manifest digest they hash to."""
    entries = tuple(Entry(str(p.relative_to(root)), p.stat().st_size,
                          hashlib.sha256(p.read_bytes()).hexdigest(), SHA256)
                    for p in sorted(root.rglob("*")) if p.is_file())
    return len(entries), manifest_digest(entries)


# --- the act --------------------------------------------------------------------------------


def play(stage: Stage, root: Path) -> list[str]:
    """The act on `stage`'s control plane (its clusters join the fleet and stop with the act),
    with its own time budget (ACT_SECONDS)."""
    started = time.monotonic()
    act = dataclasses.replace(stage, namespace=NAMESPACE, cache=CACHE, repo=REPOSITORY,
                              healthy=CLUSTERS, rounds=0, deadline=started + ACT_SECONDS)
    try:
        with contextlib.ExitStack() as stack:
            root.mkdir(parents=True, exist_ok=True)
            origin_log, fleet_log = root / "origin-access.log", root / "fleet-access.log"
            origin = stack.enter_context(loopback_registry(access_log=origin_log))
            fleet_registry = stack.enter_context(loopback_registry(access_log=fleet_log))
            stack.callback(stop_clusters, act)
            return play_act(act, root, (origin, origin_log), (fleet_registry, fleet_log))
    except RuntimeError as err:  # docker-registry missing and not installable, or not starting
        return [f"the OCI act's registries: {err}"]
    finally:
        stage.deadline += time.monotonic() - started


def stop_clusters(stage: Stage) -> None:
    for name in CLUSTERS:
        if name in stage.clusters:
            stage.clusters[name].stop()


def play_act(stage: Stage, root: Path, origin: tuple[str, Path], fleet: tuple[str, Path]) -> list[str]:
    for name in CLUSTERS:
        stage.clusters[name] = Cluster(name, root / name)
        stage.control.apply(fleet_cluster(name))
    files = model_files(max(1 << 20, int(stage.model_bytes * SHARE)), seed=41)
    size = sum(map(len, files.values()))
    Pusher(origin[0]).push_modelpack(REPOSITORY, TAG, files)
    stage.control.apply(grant())
    stage.control.apply(model_cache(origin[0], fleet[0]))
    stage.out(f"\noci: a ModelPack of {len(files)} raw layers ({quantities.human_bytes(size)}) pushed "
              f"by hand to {origin[0]}/{REPOSITORY}:{TAG} (docker-registry, the origin); ModelCache "
              f"{CACHE} from it, spec.distribution.mirror.oci {fleet[0]}/{FLEET_REPOSITORY} (the "
              f"fleet's registry), on {', '.join(CLUSTERS)}; {' and '.join(IMAGE_CLUSTERS)} "
              "declare spec.features.imageVolumes")
    problem = until(stage, lambda: published(stage), f"{CACHE} to be published to the fleet's registry")
    if problem:
        return [problem]
    pinned = resolved(stage)
    stage.out(f"  resolved {pinned.get('commit', '')[:16]} ({pinned.get('reference')}); published "
              f"once as {pinned['artifact']['reference']}")
    show_hydrations(stage)

    stage.control.apply(model_deployment())
    stage.out(f"\noci: ModelDeployment {CACHE}, one replica per cluster")
    problem = until(stage, lambda: serving(stage), "every replica to be Ready")
    if problem:
        return [problem]
    problems = show_replicas(stage, pinned)
    return problems + origin_bytes(stage, size, origin[1], fleet[1])


def until(stage: Stage, done: Callable[[], bool], what: str) -> str:
    started = stage.rounds
    problem = stage.until(done, what)
    if not problem:
        stage.out(f"  after {stage.rounds - started} rounds:")
    return problem


def show_hydrations(stage: Stage) -> None:
    rows = [["CLUSTER", "ROLE", "PHASE", "REASON", "BYTES FROM"]]
    for cluster in CLUSTERS:
        hydration = stage.hydration(CACHE, cluster)
        rows.append([cluster, read.get_path(hydration, "spec.mirror.role", "") or "-", phase_of(hydration),
                     read.get_path(hydration, "status.reason", "") or "",
                     read.get_path(hydration, "status.bytesFrom", "") or "-"])
    for line in kubectl_table(rows):
        stage.out(line)


def shortened(path: str) -> str:
    """A long FLEETCACHE_MODEL as a table shows it: its mount, then its last folder, cut."""
    parts = path.split("/")
    return path if len(parts) <= 6 else "/".join([*parts[:4], "…", parts[-1][:14]])


def show_replicas(stage: Stage, pinned: dict) -> list[str]:
    """The replicas as `kubectl get` shows them, with the reason for their delivery, and what
    each one's FLEETCACHE_MODEL holds; the problems: a delivery other than the act's, or files
    that do not hash to the resolved manifest."""
    found, placed = replicas(stage), placements(stage)
    stage.out(f"  $ kubectl get modelreplicas -n {NAMESPACE}")
    rows = [["CLUSTER", "DELIVERY", "PHASE", "REASON", "FLEETCACHE_MODEL", "FILES", "MANIFEST"]]
    problems = []
    for cluster in CLUSTERS:
        replica = found.get(cluster, {})
        delivery = read.get_path(replica, "spec.delivery", "") or ""
        model = model_dir(stage.clusters[cluster])
        count, digest = digest_of(model[1]) if model else (0, "")
        rows.append([cluster, delivery, read.get_path(replica, "status.phase", "") or "",
                     placed.get(cluster, {}).get("reason", ""), shortened(model[0]) if model else "-", str(count),
                     digest[:12]])
        if delivery != DELIVERIES[cluster]:
            problems.append(f"replica on {cluster}: delivery {delivery}, expected {DELIVERIES[cluster]}")
        if digest != pinned.get("manifestDigest"):
            problems.append(f"replica on {cluster}: FLEETCACHE_MODEL ({model[0] if model else 'none'}) "
                            f"hashes to {digest or 'nothing'}, the resolved manifest is "
                            f"{pinned.get('manifestDigest')}")
    for line in kubectl_table(rows):
        stage.out(line)
    image = read.get_path(found.get(IMAGE_CLUSTERS[0], {}), "spec.image.reference", "")
    if image != read.get_path(pinned, "artifact.reference"):
        problems.append(f"the Image replicas mount {image}, not the published artifact")
    return problems


def origin_bytes(stage: Stage, size: int, origin_log: Path, fleet_log: Path) -> list[str]:
    served, mirrored = blob_bytes_served(origin_log), blob_bytes_served(fleet_log)
    stage.out(f"\noci: the origin registry served {served:,} B of blobs for the fleet of {len(CLUSTERS)} "
              f"clusters: {served / size:.2f}x the model ({size:,} B); the fleet's registry served "
              f"{mirrored:,} B ({mirrored / size:.2f}x: one pull per image-volume cluster)")
    if served != size:
        return [f"the origin registry served {served} bytes of blobs, expected the model once ({size})"]
    return []
