"""A control plane and a fleet of clusters on one machine, for the demo and the end-to-end
tests; design/simulation.md says exactly where each part differs from the real thing.

- `control_plane`: `ControlPlane`, the API server and Crossplane (composites defaulted from
  their XRDs, each one's Composition pipeline run against the real function server, required
  resources answered, what comes back applied, what no longer does deleted in the
  foreground, Synced set, a failed compose's conditions Unknown; with realistic timing, each
  composite reconciled only when Crossplane's watches or requeues would); `step`, one round
  of it and of the clusters. `deletion`: its API server's
  deletions (finalizers, foreground and background), the garbage collector and Crossplane's
  Usage webhook and controller.
- `provider`: `Provider`, provider-kubernetes (Objects applied under their management
  policies, patched from control-plane Secrets, refused where the API server refuses,
  observed with their readiness policy); `admission`, what a cluster's API server refuses.
- `timing`: `RealisticTiming`, when the provider reconciles an Object (poll intervals,
  backoff, watches) and when Crossplane reconciles a composite (`crossplane`: "v2.0-2.3",
  required resources unwatched, or "v2.4") on a compressed `Clock`; off, every Object is
  observed and every composite reconciled every round.
- `cluster`: `Cluster`, one cluster's API and controllers, delegating to:
  `api` (its object store), `storage` (PVCs bound to directories), `jobs` (the Job
  controller: each attempt a real `fleetcache-agent` process), `workloads` (the Deployment
  and DaemonSet controllers), `scheduling` (node affinity, taints, volume binding),
  `kubelet` (pods on nodes: volumes, init containers, restarts, readiness probes),
  `standins` (the in-cluster APIs the node agents call, as files), `nodes` and `pods`.
- `clock`: the composers' `Clock` (compressed with `seconds_per_round`) and the in-process
  `function_server` that reads it.
- `kubectl`: tables as `kubectl get` prints them.
- `faults`: faults at random over a tiny fleet, seed by seed; `invariants`: what must hold
  after every round of it (design/simulation.md, "Faults at random").
"""

from fleetcache.devtools.simulation.api import Key, Objects, key_of
from fleetcache.devtools.simulation.clock import Clock, function_server
from fleetcache.devtools.simulation.cluster import Cluster
from fleetcache.devtools.simulation.control_plane import XR_KINDS, ControlPlane, Event, step
from fleetcache.devtools.simulation.jobs import fail_job_rule
from fleetcache.devtools.simulation.kubectl import all_text, kubectl_table
from fleetcache.devtools.simulation.nodes import CONTROL_PLANE_ROLE, Node
from fleetcache.devtools.simulation.pods import Container, NodePod
from fleetcache.devtools.simulation.provider import Provider
from fleetcache.devtools.simulation.storage import files_bytes, translate
from fleetcache.devtools.simulation.timing import ProviderFlags, RealisticTiming

__all__ = [
    "CONTROL_PLANE_ROLE", "XR_KINDS", "Clock", "Cluster", "Container", "ControlPlane", "Event",
    "Key", "Node", "NodePod", "Objects", "Provider", "ProviderFlags", "RealisticTiming",
    "all_text", "fail_job_rule", "files_bytes",
    "function_server", "key_of", "kubectl_table", "step", "translate",
]
