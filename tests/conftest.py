"""Hypothesis profiles: `make test` runs a few fixed examples per property, quickly and the
same on every machine; `make test-slow` (FLEETCACHE_HYPOTHESIS_PROFILE=slow) runs many;
`make test-random` (FLEETCACHE_HYPOTHESIS_PROFILE=random) as few as `make test`, drawn from
the seed it prints and passes as --hypothesis-seed, so each CI run tries new inputs and a
failure reruns with that seed."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

COMMON = dict(
    derandomize=True,  # the examples follow from the test's code: CI runs are reproducible
    database=None,  # nothing remembered between runs, no .hypothesis directory
    deadline=None,  # work is a property of its own (tests/test_properties.py), counted in calls
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)
settings.register_profile("fast", max_examples=20, **COMMON)
settings.register_profile("slow", max_examples=400, **COMMON)
settings.register_profile("random", max_examples=20, **{**COMMON, "derandomize": False})
settings.load_profile(os.environ.get("FLEETCACHE_HYPOTHESIS_PROFILE", "fast"))
