"""What the warmers of one hydration are called and where they work: the fixed names they
share with the node agent (the system namespace, the slot Role, the node label prefix), the
paths of both PVCs in a warmer's pod (and a Node replica's), the control-plane keys of the
node tier's Objects, and the names of those Objects on the cluster, derived from the cache
and the pool."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from fleetcache.functions import naming
from fleetcache.functions.node_tier.warmer_inputs import Hydration

SYSTEM_NAMESPACE = "fleetcache-system"
SLOTS_ROLE = "fleetcache-node-warm-slots"
STORAGE_CLASS = "fleetcache-node"
CLAIM_LABEL = f"{naming.GROUP}/node-cache-claim"
NODE_LABEL_PREFIX = "node-cache.fleetcache.dev/"
# The agent's roots, as fetch writes one (agent/layout.py): the HF cache in hub/, the
# manifests it verifies against in .fleetcache/ beside it; node-warm writes the node copy in
# the same layout, node-ready.json last.
VOLUME_MOUNT = "/var/cache/fleetcache-volume"  # the cluster PVC, read-only
NODE_MOUNT = "/var/cache/fleetcache-node"  # the node PVC: this node's copy

# Control-plane keys of the node tier's Objects; every one starts with "node-".
PV_KEY = "node-pv"
CLAIM_KEY = "node-claim"
STATUS_KEY = "node-status"
WARMER_KEY = "node-warmer"
ACCESS_KEYS = ("node-service-account", "node-role", "node-role-binding", "node-slots-binding")
KEYS = (PV_KEY, CLAIM_KEY, STATUS_KEY, *ACCESS_KEYS, WARMER_KEY)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pool_hash(pool: Mapping) -> str:
    """First 8 hex of sha256 of the pool's canonical JSON: PV nodeAffinity is immutable, so a
    new pool is a new PV and PVC."""
    return sha(json.dumps(naming.canonical(pool), sort_keys=True, separators=(",", ":")))[:8]


def label_key(namespace: str, cache: str) -> str:
    """The node label a warm node carries for this cache; its value is the commit."""
    return NODE_LABEL_PREFIX + sha(f"{namespace}/{cache}")[:16]


@dataclass(frozen=True)
class Names:
    hydration: Hydration
    pool_hash: str

    @property
    def volume(self) -> str:
        return f"fleetcache-node-{sha(f'{self.hydration.key}/{self.pool_hash}')[:16]}"

    @property
    def claim(self) -> str:
        return f"{self.hydration.cache}-node-{self.pool_hash}"

    @property
    def warmer(self) -> str:
        """DaemonSet, ServiceAccount, Role and RoleBinding."""
        return f"{self.hydration.cache}-node-warmer"

    @property
    def status(self) -> str:
        return f"{self.hydration.cache}-node-status"

    @property
    def pruner(self) -> str:
        return f"{self.hydration.cache}-node-pruner"

    @property
    def slots_binding(self) -> str:
        return f"{self.hydration.namespace}-{self.hydration.cache}-node-warm-slots"

    def object(self, key: str) -> str:
        return naming.child_name(self.hydration.name, key)
