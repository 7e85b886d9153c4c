"""Settings shared by the hypothesis property tests (test_fuzz_*.py): the hostile-input fuzzers of issue 25.

Profiles, chosen with STEADYTUNE_FUZZ (default `ci`; STEADYTUNE_FUZZ_EXAMPLES=N sets the count in either):
- `ci`: bounded for the suite (every fuzz test together under ~60 s on 2 CPU cores), derandomized: the same
  examples on every run and every machine, so a failure in CI fails the same way on a laptop;
- `long`: many more examples, random each run, for a fuzzing session by hand:
  `STEADYTUNE_FUZZ=long python -m pytest tests/test_fuzz_config.py`.
A failure prints the falsifying example and a `@reproduce_failure(...)` line (print_blob) that replays it exactly.
No example database is written: the suite's outcome depends on nothing left over from an earlier run.

The profiles are passed to each test (`@fuzz(max_examples)`), not loaded globally, so no other hypothesis user in the
suite (schemathesis) has its settings changed.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("STEADYTUNE_FUZZ", "ci")
# Per example, wall clock: far below a hang (the cases fixed took 77 s to forever). The tests that time their work
# check CPU seconds themselves (a loaded machine stretches the wall clock, not the work); 5 s of wall clock flaked
# when eight processes shared two cores.
DEADLINE = timedelta(seconds=20)

settings.register_profile("steadytune-ci", derandomize=True, database=None, deadline=DEADLINE, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("steadytune-long", max_examples=2000, derandomize=False, database=None, deadline=DEADLINE,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(max_examples: int) -> settings:
    """The profile's settings for one test; `max_examples` is this test's share of the CI budget.
    STEADYTUNE_FUZZ_EXAMPLES=N sets the count in either profile (as for serve's schemathesis test)."""
    chosen = settings.get_profile("steadytune-long" if PROFILE == "long" else "steadytune-ci")
    count = os.environ.get("STEADYTUNE_FUZZ_EXAMPLES")
    return settings(chosen, max_examples=int(count) if count else
                    chosen.max_examples if PROFILE == "long" else max_examples)
