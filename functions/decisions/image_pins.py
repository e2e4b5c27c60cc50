"""Which digest each engine image of a ModelCache runs at (spec.images; design/engine-images.md):
resolved once for the fleet, like the revision, so every node of every cluster pulls the same
bytes.

An image named by digest pins itself. An image by tag keeps the digest latched in
status.images while it stays in spec.images; a new one is asked of its registry by one
`fleetcache-agent resolve-images` Job (compose-model-cache composes it while any is
unpinned) and latched from its record. An image that leaves spec.images leaves
status.images, and so the hydrations: its keeper pods go with it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fleetcache import shapes
from fleetcache.functions import naming, read
from fleetcache.functions.k8s.job_mounts import DOCKER_CONFIG_KEY

SUMMARY_RESOLVING = "resolving"


@dataclass(frozen=True)
class Pins:
    digests: dict[str, str]  # image -> digest, for every image of spec.images that has one
    unresolved: tuple[str, ...]  # images of spec.images by tag with no digest yet, in spec order
    failure: str = ""  # the reason the resolve-images Job of the unresolved failed with, if it did

    def step_digest(self, secrets: list[tuple[str, str]]) -> str:
        """Names the resolve Job of exactly these images and pull secrets: another set is
        another Job (a Job's pod is immutable, so a pull secret added after an AuthFailed
        resolve needs a new one)."""
        return naming.short_digest("\n".join([*self.unresolved, *(f"{n}/{k}" for n, k in secrets)]), length=40)


def own_digest(image: str) -> str | None:
    """The digest an image names itself (…@sha256:<hex>), else None."""
    digest = image.rpartition("@")[2] if "@" in image else ""
    return digest if shapes.is_oci_digest(digest) else None


def latched(status_images: Any) -> dict[str, str]:
    """image -> digest as status.images latched them (garbage skipped: resolved again)."""
    return {entry["image"]: entry["digest"] for entry in status_images or ()
            if isinstance(entry, dict) and isinstance(entry.get("image"), str)
            and shapes.is_oci_digest(entry.get("digest"))} if isinstance(status_images, list) else {}


def recorded(record: Any) -> dict[str, str]:
    """image -> digest from a resolve-images record that says Resolved ({} otherwise)."""
    if read.get_path(record, "phase") != "Resolved":
        return {}
    text = read.get_path(record, "images")
    try:
        entries = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return {}
    return latched(entries)


def pins_of(spec_images: list[dict], status_images: Any, record: Any) -> Pins:
    """Each image's digest: its own, the one latched, or the one the record resolved."""
    kept, fresh = latched(status_images), recorded(record)
    digests: dict[str, str] = {}
    for entry in spec_images:
        image = entry["image"]
        digest = own_digest(image) or kept.get(image) or fresh.get(image)
        if digest:
            digests[image] = digest
    return Pins(digests, tuple(e["image"] for e in spec_images if e["image"] not in digests))


def hydration_images(spec_images: list[dict], pins: Pins) -> list[dict]:
    """spec.images of each hydration: the pinned entries, in spec order."""
    return [{"image": e["image"], "digest": pins.digests[e["image"]],
             "pullPolicy": e.get("pullPolicy", "IfNotPresent"),
             **({"command": list(e["command"])} if e.get("command") else {}),
             **({"args": list(e["args"])} if e.get("args") else {}),
             **({"pullSecretRef": dict(e["pullSecretRef"])} if e.get("pullSecretRef") else {})}
            for e in spec_images if e["image"] in pins.digests]


def pull_secrets(spec_images: list[dict], images: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, key) of each Secret the given images name in spec.images[].pullSecretRef, once
    each, in spec order: what a Job or a pod that pulls them mounts or names."""
    return list(dict.fromkeys((e["pullSecretRef"]["name"], e["pullSecretRef"].get("key", DOCKER_CONFIG_KEY))
                              for e in spec_images if e["image"] in images and e.get("pullSecretRef")))


def fleet_images(spec_images: list[dict], pins: Pins, hydrations: list[Any]) -> tuple[list[dict], str]:
    """status.images and the IMAGES column: per image its digest and the pool nodes holding
    it over the target hydrations; "resolving" until every image is pinned ("resolve failed
    (<reason>)" while its Job failed), else
    "<n> images <ready>/<desired>" (nodes holding every image), and how many failed."""
    rows: list[dict] = []
    reports = [read.mapping_at(h, "status.images") for h in hydrations]

    def total(field: str) -> int:
        return sum(r[field] for r in reports if isinstance(r.get(field), int) and r[field] > 0)

    ready, desired, failed = total("ready"), total("desired"), total("failed")
    for entry in spec_images:
        image = entry["image"]
        row: dict = {"image": image}
        if image in pins.digests:
            row["digest"] = pins.digests[image]
            row["readyNodes"] = sum(
                held.get("readyNodes", 0) for report in reports for held in report.get("images") or ()
                if isinstance(held, dict) and held.get("image") == image
                and held.get("digest") == row["digest"] and isinstance(held.get("readyNodes"), int))
            row["desiredNodes"] = desired
        rows.append(row)
    if pins.unresolved:
        return rows, f"resolve failed ({pins.failure})" if pins.failure else SUMMARY_RESOLVING
    count = len(spec_images)
    return rows, f"{count} image{'s' if count != 1 else ''} {ready}/{desired}" + \
        (f" ({failed} failed)" if failed else "")
