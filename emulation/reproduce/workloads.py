"""What does a scenario run? Its workloads as plain data, for the simulator and the emulation.

Three shapes cover the paper's experiments:
- `PairWorkload`: two jobs on one shared ToR uplink (a placement given, not
  chosen), each pair run aligned (both on one grid, shift 0) and shifted
  (Cassini's shift for the pair, `scheduler.cassini.plans.plan_link`).
- `TraceWorkload`: a trace placed by schedulers (Poisson, or a busy cluster
  into which jobs arrive), compared base against Cassini variant.
- `SolverWorkload`: the compatibility solver alone, over precisions.
"""

from __future__ import annotations

from dataclasses import dataclass

# Two jobs of 4 workers sharing exactly one directed link of the default
# testbed, tor1->agg1 (the placement of benchmarks/bench_shift_cases.py).
PAIR_TOPOLOGY = "cassini-testbed"
PAIR_SERVERS: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("s01", "s02", "s05", "s06"),
    ("s03", "s04", "s13", "s14"),
)


@dataclass(frozen=True)
class PairWorkload:
    """Pairs of models, each run aligned and shifted on `PAIR_SERVERS`."""

    pairs: tuple[tuple[str, str], ...]
    iterations: int
    drift: float = 0.0  # compute-time jitter sigma (fraction) in the simulator
    topology: str = PAIR_TOPOLOGY
    kind: str = "pair"


@dataclass(frozen=True)
class TraceWorkload:
    """A trace placed by `schedulers`.

    `trace` is `poisson` (`jobs` jobs at each of `loads`) or `arrivals`: the
    `background` jobs (`background_workers` GPUs each, 900-1000 iterations,
    all at t = 0) then the `newcomers` (`newcomer_workers` GPUs each, 1000
    iterations) at `arrive_s`, as `scheduler.workloads.traces.dynamic_trace` builds
    the paper's dynamic case. `iterations_cap` shortens every job (quick runs).
    """

    trace: str
    schedulers: tuple[str, ...]
    topology: str = "cassini-testbed"
    loads: tuple[float, ...] = ()
    jobs: int = 60
    background: tuple[str, ...] = ()
    newcomers: tuple[str, ...] = ()
    background_workers: int = 6
    newcomer_workers: int = 3
    arrive_s: float = 30.0
    iterations_cap: int | None = None
    drift: float = 0.0
    kind: str = "trace"


@dataclass(frozen=True)
class SolverWorkload:
    """The compatibility solver on `mixes` random mixes of `jobs` data/model-parallel jobs
    per seed, at each precision; `reference_deg` is the finest, the accuracy's yardstick."""

    precisions: tuple[float, ...]
    mixes: int
    jobs: int = 2
    reference_deg: float = 1.0
    kind: str = "solver"


@dataclass(frozen=True)
class EmulationWorkload:
    """What one emulation run of a scenario runs on the fabric (`cassini emulate`'s runner).

    Either `pairs` (each aligned and shifted, as `PairWorkload`) or a trace
    (`trace`, as the simulator's `TraceWorkload`) under `schedulers`, every
    job for `iterations` iterations, arrivals `compress` times sooner.

    (our choice) `profile_iterations` > 0: each run first profiles its models
    alone on a fabric of its own (`cassini profile`, that many iterations),
    and Cassini plans (shift, grid period) with the measured profiles, as
    `cassini emulate --profile-first` does. With the derived profiles the
    agents paced a grid shorter than the jobs' own iterations on the fabric
    (two VGG19s: 253 ms against 379 ms run) and re-aligned 79 times a minute;
    the paper's Cassini plans with profiles of the jobs it places.
    """

    iterations: int
    pairs: tuple[tuple[str, str], ...] = ()
    trace: TraceWorkload | None = None
    schedulers: tuple[str, ...] = ()
    compress: float = 1.0
    transport: str = "tcp"  # what the replicas' collectives run over today
    profile_iterations: int = 40  # 0: plan with the derived profiles
