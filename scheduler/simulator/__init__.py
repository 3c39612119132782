"""How long does every iteration take under a scheduler? The fluid simulator.

Event-driven, not time-stepped. Each running job cycles through its profile's
phases. In an Up phase every flow of the job (src -> dst server pair, routed
over directed links) must send `gbps x duration` Mbit; flows share links
max-min fairly (`scheduler.workloads.max_min.max_min_rates`), each capped at its phase's line-rate
demand, so a phase lasts until its slowest flow has sent its bytes and
contention stretches iterations. Down phases last their profile time.
With a sharing model (`scheduler.workloads.sharing_model`, measured on the fabric) a
link n jobs send through offers capacity x factor(n) instead of all of it.
Between two events every rate is constant, so time jumps from event to event.

Independence: jobs that share no link cannot slow each other, so running jobs
are grouped into components (connected through shared links) that simulate
independently; a scheduler decision rebuilds only the components it touches.
Inside a component the same holds at each instant for flows joined by links
whose offered demand reaches capacity, so an event re-solves max-min only for
the group of flows it changed (exact). The event loop itself is compiled
(`fluid_events`); Python handles what happens once per iteration.

GPU time-sharing: an allocation's `sharing` groups run on the same GPU
slots. Each member runs the profile `scheduler.cassini.timeshare.share` lays out for
its place in the group's stage order (its compute stage, stretched to the
stage, then its transfers), paced by its agent on the group's cycle with its
stage offset, so one member computes while the previous one communicates.
The GPU's one-compute-at-a-time rule holds as long as contention does not
stretch a transfer past its stage (a late member then starts at once, as
any paced agent does). A job whose group changes restarts its in-flight
iteration on its new profile; a group that stays the same keeps its grid.
A member's recorded ideal is its own iteration alone, so its slowdown is its
sharing factor.

The package, one question per module:

- `results`: what a run measures (`SimSettings`, `JobResult`, `LinkSeries`, `SimResult`).
- `jobrun`: what the simulator keeps about a job across components (`JobRun`,
  `Carry`, `Member`).
- `fastforward`: when a component may skip whole steady-state windows.
- `component`: how jobs that share links advance together (`Component`, the
  per-component state machine: phases, agents, snapshots for rewinding).
- `playout`: how a trace plays out under a scheduler (`simulate`, the loop over
  arrivals, decisions and completions).
- `fluid_events`: the compiled event loop (phases, max-min rates, link counters).
- `experiment`: several schedulers over one trace, summarised as the paper reports them.
- `decisions`: which placement and time-shifts each scheduler chose, decision by decision.
- `report`: the files a `cassini simulate` run leaves behind.
"""

from __future__ import annotations

from .playout import DecisionHook, EventHook, ProgressHook, first_grid_points, simulate
from .results import JobResult, LinkSeries, SimResult, SimSettings

__all__ = [
    "DecisionHook",
    "EventHook",
    "JobResult",
    "LinkSeries",
    "ProgressHook",
    "SimResult",
    "SimSettings",
    "first_grid_points",
    "simulate",
]
