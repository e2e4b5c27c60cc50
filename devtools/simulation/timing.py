"""Realistic timing: when provider-kubernetes reconciles an Object next, after upstream
(design/provider-timing.md cites the code). Off by default, when every Object is observed
fresh every round; on, each Object is reconciled when the managed reconciler would:

- at once when it is created or its spec changes (the controller's `DesiredStateChanged`
  event filter lets generation changes through);
- after an error or a create, `Requeue: true`: the per-item exponential backoff of
  crossplane-runtime's `ratelimiter.NewController` (1 s, doubling, at most 60 s);
- otherwise `RequeueAfter` the Object controller's `PollIntervalHook`: 30 s while the Object
  is not Ready, `--poll` (10 minutes) once it is, each ± `--poll-jitter-percentage` (10 %);
- and, with `--enable-watches` and the Object's `spec.watch`, at once when its remote object
  changes (the provider's informers enqueue every Object that manages it).

Time is the compressed clock's (`Clock(seconds_per_round=...)`): the demo and the end-to-end
tests tick it once per round."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from fleetcache.devtools.simulation.clock import Clock

NOT_READY_POLL = 30.0  # internal/controller/namespaced/object/object.go, PollIntervalHook
BACKOFF_BASE = 1.0  # crossplane-runtime pkg/ratelimiter/default.go, NewController
BACKOFF_MAX = 60.0


@dataclass(frozen=True)
class ProviderFlags:
    """provider-kubernetes' flags that set its pace (cmd/provider/main.go), at their defaults."""

    poll: float = 600.0  # --poll 10m
    poll_jitter_percentage: int = 10  # --poll-jitter-percentage
    enable_watches: bool = False  # --enable-watches


@dataclass
class RealisticTiming:
    """The compressed clock and the provider's flags; `seed` fixes the jitter."""

    clock: Clock
    flags: ProviderFlags = ProviderFlags()
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

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
