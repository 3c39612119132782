"""How long does a measured Up phase run at worst, and what does Cassini plan with?

A profile measured on the fabric (`cassini profile`) gives each Up phase's mean;
its iterations' spread says how long it runs when it runs long. A paced grid
planned on the mean is overrun whenever it does, so Cassini plans with the Up
phase at its 95th percentile (`with_long_up`); the simulator keeps the mean.
"""

from __future__ import annotations

from dataclasses import replace

from scheduler.workloads.types import Phase, Profile


def up_slack(profile: Profile, up_p95_ms: float, interval_ms: float) -> float:
    """How much longer than `profile`'s one Up phase that phase runs at its 95th
    percentile, read on samples `interval_ms` apart (0 for a profile of other shape).

    (our choice) A phase is read as whole samples above a threshold, so one read as
    140 ms on 10 ms samples lasted up to 150: the resolution is added to the p95.

    >>> p = Profile("v", "v", "data", 4, 260.0, (Phase(120.0, 0.0), Phase(140.0, 45.0)))
    >>> up_slack(p, 142.0, 10.0)
    12.0
    """
    ups = [ph.duration_ms for ph in profile.phases if ph.gbps > 0]
    if len(ups) != 1:
        return 0.0
    return max(up_p95_ms + interval_ms - ups[0], 0.0)


def with_long_up(profile: Profile) -> Profile:
    """`profile` with its one Up phase `up_slack_ms` longer, at its rate, taken from
    the Down phase before it, so the iteration keeps its time: what Cassini plans a
    paced grid with (a profile without slack, or of other shape: as is).

    (our choice) The Up phase at its p95, as the grid period is the iterations' p95
    (`emulation.profile.phases`): a grid held only by the mean Up phase is overrun
    whenever an Up phase runs long. Measured: two VGG19s (Up 139.4 ms mean, 150.1 ms
    p95, on 10 ms samples) on the 285.4 ms grid their means hold re-aligned 42 times a
    minute and ran 361 ms; on 300 ms, none, 303 ms. A profile whose p95 read 140.1 ms
    gave a 280 ms grid: 55 re-alignments a minute, 381 ms.

    >>> p = Profile("v", "v", "data", 4, 260.0, (Phase(120.0, 0.0), Phase(140.0, 45.0)),
    ...             up_slack_ms=10.0)
    >>> [(ph.duration_ms, ph.gbps) for ph in with_long_up(p).phases]
    [(110.0, 0.0), (150.0, 45.0)]
    """
    ups = [i for i, ph in enumerate(profile.phases) if ph.gbps > 0]
    if profile.up_slack_ms <= 0 or len(ups) != 1 or ups[0] == 0:
        return profile
    i = ups[0]
    before, up = profile.phases[i - 1], profile.phases[i]
    grow = min(profile.up_slack_ms, before.duration_ms)
    phases = list(profile.phases)
    phases[i - 1] = Phase(before.duration_ms - grow, 0.0)
    phases[i] = Phase(up.duration_ms + grow, up.gbps)
    return replace(
        profile, phases=tuple(ph for ph in phases if ph.duration_ms > 1e-9), up_slack_ms=0.0
    )
