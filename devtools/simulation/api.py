"""A simulated cluster's API objects: plain dicts keyed by (kind, namespace, name).

`Objects` is a cluster's store, what its API server holds; the controllers read it and
write the status of what they run. The control plane keys its composites the same way.
"""

from __future__ import annotations

import copy
import itertools

Key = tuple[str, str, str]  # kind, namespace, name


def key_of(resource: dict) -> Key:
    meta = resource.get("metadata", {})
    return resource.get("kind", ""), meta.get("namespace", ""), meta.get("name", "")


class Objects(dict[Key, dict]):
    """A cluster's API objects by key."""

    def __init__(self) -> None:
        super().__init__()
        self.uids = itertools.count(1)

    def apply(self, manifest: dict) -> None:
        """provider-kubernetes' apply: the manifest replaces the stored object, whose status
        (the controllers' to write) is kept, and whose metadata.generation counts the
        changes of its spec as the API server's does (controllers report the one they saw as
        status.observedGeneration). A new object gets a uid of its own, which it keeps: a
        namesake created after a deletion has another (the API server fills metadata.uid at
        create, k8s.io/apiserver pkg/registry/rest/create.go FillObjectMetaSystemFields)."""
        key = key_of(manifest)
        current = self.get(key)
        applied = copy.deepcopy(manifest)
        metadata = applied.setdefault("metadata", {})
        generation = (current or {}).get("metadata", {}).get("generation", 0)
        if current is None or current.get("spec") != applied.get("spec"):
            generation += 1
        metadata["generation"] = generation
        metadata["uid"] = (current or {}).get("metadata", {}).get("uid") or f"uid-{next(self.uids)}"
        if current is not None and "status" in current:
            applied["status"] = current["status"]
        self[key] = applied
