"""Realistic timing: when provider-kubernetes reconciles an Object next, and when Crossplane
reconciles a composite, after upstream (design/provider-timing.md and design/simulation.md
cite the code). Off by default, when every Object is observed fresh and every composite
reconciled every round; on, each Object is reconciled when the managed reconciler would:

- at once when it is created or its spec changes (the controller's `DesiredStateChanged`
  event filter lets generation changes through);
- after an error or a create, `Requeue: true`: the per-item exponential backoff of
  crossplane-runtime's `ratelimiter.NewController` (1 s, doubling, at most 60 s);
- otherwise `RequeueAfter` the Object controller's `PollIntervalHook`: 30 s while the Object
  is not Ready, `--poll` (10 minutes) once it is, each ± `--poll-jitter-percentage` (10 %);
- and, with `--enable-watches` and the Object's `spec.watch`, at once when its remote object
  changes (the provider's informers enqueue every Object that manages it).

and each composite when Crossplane's composite controller would (`crossplane`, the version):
at once when it, or a resource it composed, changed (realtime compositions, on by default
since v2.0); on v2.4 (crossplane#7572) also when a resource its functions required
changed; otherwise once the shortest TTL its pipeline returned has passed (± 10 %), or after
a failed reconcile the controller's backoff (1 s doubling, at most 30 s).

Time is the compressed clock's (`Clock(seconds_per_round=...)`): the demo and the end-to-end
tests tick it once per round."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fleetcache.devtools.simulation.clock import Clock

NOT_READY_POLL = 30.0  # internal/controller/namespaced/object/object.go, PollIntervalHook
BACKOFF_BASE = 1.0  # crossplane-runtime pkg/ratelimiter/default.go, NewController
BACKOFF_MAX = 60.0
# Crossplane's composite controller (internal/controller/apiextensions/definition/reconciler.go:
# NewTypedItemExponentialFailureRateLimiter(1s, 30s); composite/reconciler.go: jitter ±10 %).
COMPOSITE_BACKOFF_MAX = 30.0
COMPOSITE_JITTER = 0.1
REQUIRED_UNWATCHED = "v2.0-2.3"  # a required resource's change waits for the TTL
REQUIRED_WATCHED = "v2.4"  # crossplane#7572: it reconciles the composites that required it
CROSSPLANE_VERSIONS = (REQUIRED_UNWATCHED, REQUIRED_WATCHED)


@dataclass(frozen=True)
class ProviderFlags:
    """provider-kubernetes' flags that set its pace (cmd/provider/main.go), at their defaults."""

    poll: float = 600.0  # --poll 10m
    poll_jitter_percentage: int = 10  # --poll-jitter-percentage
    enable_watches: bool = False  # --enable-watches


@dataclass
class RealisticTiming:
    """The compressed clock, the provider's flags and the Crossplane version the composites
    are paced by; `seed` fixes the jitter, drawn apart for the provider and for Crossplane so
    that neither's pace moves the other's."""

    clock: Clock
    flags: ProviderFlags = ProviderFlags()
    seed: int = 0
    crossplane: str = REQUIRED_UNWATCHED
    rng: random.Random = field(init=False)
    composite_rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        if self.crossplane not in CROSSPLANE_VERSIONS:
            raise ValueError(f"crossplane: {self.crossplane!r} is not a version the simulation "
                             f"paces; use {' or '.join(map(repr, CROSSPLANE_VERSIONS))}")
        self.rng = random.Random(self.seed)
        self.composite_rng = random.Random(f"{self.seed}/composites")

    @property
    def watches_required(self) -> bool:
        """Whether a change of a required resource reconciles the composites that required it."""
        return self.crossplane == REQUIRED_WATCHED

    def now(self) -> float:
        return self.clock.seconds()

    def poll_after(self, ready: bool) -> float:
        """The PollIntervalHook: 30 s while not Ready, else --poll; jitter either way."""
        interval = self.flags.poll if ready else NOT_READY_POLL
        jitter = interval * self.flags.poll_jitter_percentage / 100
        return interval + (self.rng.random() - 0.5) * 2 * jitter

    @staticmethod
    def backoff(failures: int) -> float:
        """The rate limiter's delay before the `failures`-th consecutive requeue."""
        return min(BACKOFF_BASE * 2 ** max(failures - 1, 0), BACKOFF_MAX)

    def ttl_after(self, ttl: float) -> float:
        """A composite's `RequeueAfter: jitter(res.TTL)`."""
        return ttl + (self.composite_rng.random() - 0.5) * 2 * ttl * COMPOSITE_JITTER

    @staticmethod
    def composite_backoff(failures: int) -> float:
        """The composite controller's delay before the `failures`-th failed reconcile's retry."""
        return min(BACKOFF_BASE * 2 ** max(failures - 1, 0), COMPOSITE_BACKOFF_MAX)
