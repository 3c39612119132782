"""How does a trace play out under a scheduler? The run loop.

Arrivals, completions and the scheduler's ticks are the decision points; in
between, every component runs on its own (`component`). A decision rebuilds
only the components it touches, rewinding them to the decision time first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from scheduler.cassini.timeshare import SharedGroup, share, slots_in_use
from scheduler.simulator.fluid_events import DONE as _DONE
from scheduler.simulator.fluid_events import TOL_MS as _TOL_MS
from scheduler.simulator.fluid_events import WAIT as _WAIT
from scheduler.workloads.sharing_model import IDENTITY, SharingModel
from scheduler.workloads.traces import TraceJob, check_fits
from scheduler.workloads.traffic import JobRouter
from scheduler.workloads.types import Profile
from topologies.model import DirectedLink, Topology

from ..baselines.base import Allocation, ClusterView, JobStatus, ProfileBook, Scheduler, slots_used
from ..policies.base import NetworkPolicy, flow_classes
from .component import Component
from .jobrun import JobRun, Member
from .results import JobResult, LinkStats, SimResult, SimSettings

EventHook = Callable[[float, Mapping[str, int], Mapping[str, int]], None]
ProgressHook = Callable[[int, int], None]
# Called with (now in s, the view the scheduler saw, its answer) after every
# decision, so a caller can replay the same decisions elsewhere (the emulator).
DecisionHook = Callable[[float, ClusterView, Allocation], None]


class _Run:
    """One simulation: the trace, the cluster, the scheduler and their state."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        topology: Topology,
        scheduler: Scheduler,
        settings: SimSettings,
        router: JobRouter | None,
        on_event: EventHook | None,
        progress: ProgressHook | None,
        book: ProfileBook | None = None,
        on_decision: DecisionHook | None = None,
        policy: NetworkPolicy | None = None,
        sharing: SharingModel = IDENTITY,
    ) -> None:
        check_fits(trace, topology.total_gpus())
        self.trace = sorted(trace, key=lambda j: (j.arrival_s, j.name))
        self.topology = topology
        self.scheduler = scheduler
        self.settings = settings
        self.router = router or JobRouter(topology)
        caps = topology.capacity_gbps()
        self.links: tuple[DirectedLink, ...] = tuple(sorted(caps))
        self.link_id = {lk: i for i, lk in enumerate(self.links)}
        self.capacity = np.array([caps[lk] for lk in self.links])
        self.gpus = {s.name: s.gpus for s in topology.servers}
        self.stats = LinkStats(len(self.links))
        # Sum over running jobs of their peak demand per link. Only links whose
        # sum can exceed capacity ("coupling" links) can make jobs slow each
        # other down, so only they join jobs into one component: elsewhere the
        # max-min allocation never binds and jobs are independent exactly.
        self.peak_load = np.zeros(len(self.links))
        self.link_sharing = sharing  # capacity under load (`scheduler.workloads.sharing_model`)
        self.on_event = on_event
        self.progress = progress
        self.on_decision = on_decision
        self.runs = {j.name: JobRun(j) for j in self.trace}
        self.live: list[str] = []
        self.finished: set[str] = set()
        self.comps: list[Component] = []
        self.book = book or ProfileBook(nic_gbps=topology.nic_gbps())
        self.flow_cache: dict[tuple[tuple[str, ...], str], list[list[int]]] = {}
        # GPU time-sharing (`scheduler.cassini.timeshare`): each shared job's group as last applied
        self.sharing: dict[str, tuple[str, ...]] = {}
        self.shared_cache: dict[tuple[tuple[str, str, int, int | None], ...], SharedGroup] = {}
        # A network policy's strict-priority class per flow, by job, as last applied
        self.policy = policy
        self.classes: dict[str, tuple[int, ...]] = {}
        self.decisions = 0
        self.events_retired = 0
        self.ff_retired = 0.0

    def profile(self, model: str, workers: int, batch: int | None) -> Profile:
        return self.book.get(model, workers, batch)

    def flows(self, servers: tuple[str, ...], parallelism: str) -> list[list[int]]:
        key = (servers, parallelism)
        cached = self.flow_cache.get(key)
        if cached is None:
            cached = [
                [self.link_id[lk] for lk in self.router.path_links(self.router.path(src, dst))]
                for src, dst in self.router.job_flows(servers, parallelism)
            ]
            self.flow_cache[key] = cached
        return cached

    # -- the loop
    def execute(self) -> SimResult:
        now = 0.0
        ai = 0
        n = len(self.trace)
        horizon = self.settings.horizon_s * 1e3
        tick = math.inf
        while len(self.finished) < n:
            next_arrival = self.trace[ai].arrival_s * 1e3 if ai < n else math.inf
            grid = (math.floor(now / horizon) + 1) * horizon
            t_ext = min(next_arrival, tick, grid)
            if now > self.settings.max_sim_s * 1e3:
                raise RuntimeError(
                    f"simulation passed {self.settings.max_sim_s} s without finishing"
                )
            self._run_components(now, t_ext)
            completions = sorted(
                (t, comp.runs[j].trace.name)
                for comp in self.comps
                for t, j in comp.completions
                if comp.runs[j].trace.name not in self.finished
            )
            t_next = min(t_ext, completions[0][0]) if completions else t_ext
            now = t_next
            reason = ""
            for t, name in completions:
                if t <= now + _TOL_MS:
                    self._finish(name, t)
                    reason = reason or "departure"
            while ai < n and self.trace[ai].arrival_s * 1e3 <= now + _TOL_MS:
                self.live.append(self.trace[ai].name)
                ai += 1
                reason = "arrival"
            if tick <= now + _TOL_MS:
                reason = reason or "tick"
            if not reason:
                continue
            view = self._view(now, reason)
            alloc = self.scheduler.decide(view)
            self.decisions += 1
            if self.on_decision is not None:
                self.on_decision(now / 1e3, view, alloc)
            self._apply(alloc, now)
            tick = self.scheduler.next_tick(now / 1e3, self._view(now, "tick")) * 1e3
            if tick <= now + _TOL_MS:
                tick = math.inf
            if self.progress is not None:
                self.progress(len(self.finished), n)
            if not self.comps and ai >= n and len(self.finished) < n and tick == math.inf:
                waiting = [j for j in self.live if j not in self.finished]
                raise RuntimeError(
                    f"scheduler {self.scheduler.name} left jobs waiting forever: {waiting[:5]}"
                )
        for comp in self.comps:
            self._retire(comp)
        return self._result(now)

    def _run_components(self, now: float, t_ext: float) -> None:
        """Bring every component up to the next decision: `t_ext` or the first job end.

        Each component stops at its first job end, which lowers the bound for
        the ones after it. Components go in order of the earliest time one of
        their jobs could end, so the ones most likely to end first set the
        bound early, and the others do not run past a decision that may rewind
        them (a component that cannot end before the bound runs straight to it).
        """
        bound = t_ext
        for comp in self.comps:
            for t, j in comp.completions:  # found in an earlier step, not yet decided on
                if comp.runs[j].trace.name not in self.finished:
                    bound = min(bound, t)
        ends = [comp.earliest_end() for comp in self.comps]
        for i in sorted(range(len(self.comps)), key=ends.__getitem__):
            comp = self.comps[i]
            if comp.clock < bound:
                if comp.clock <= now + _TOL_MS:
                    # Past the last component that could end before the bound,
                    # the bound is final: a component stops exactly at the
                    # decision and needs a snapshot only if it skips past it.
                    if ends[i] < bound:
                        comp.take_snapshot()
                    else:
                        comp.snapshot = None
                        comp.snap_before_jump = True
                n_done = len(comp.completions)
                comp.run_until(bound, stop_at_completion=True)
                if len(comp.completions) > n_done:
                    bound = min(bound, comp.completions[n_done][0])

    def _finish(self, name: str, t: float) -> None:
        run = self.runs[name]
        run.finish_ms = t
        self.finished.add(name)
        self.live.remove(name)
        run.servers = ()
        self._set_load(run, None)

    def _set_load(self, run: JobRun, prof: Profile | None) -> None:
        """Replace a job's contribution to the per-link peak demand."""
        np.subtract.at(self.peak_load, run.load_links, run.load_gbps)
        if prof is None or not run.servers:
            run.load_links = np.zeros(0, dtype=np.int64)
            run.load_gbps = 0.0
            return
        flows = self.flows(run.servers, prof.parallelism)
        run.load_links = np.array([lk for f in flows for lk in f], dtype=np.int64)
        run.load_gbps = prof.peak_gbps
        np.add.at(self.peak_load, run.load_links, run.load_gbps)

    def coupling(self) -> npt.NDArray[np.bool_]:
        return self.peak_load > self.capacity * self.link_sharing.lowest() * (1 + 1e-9)

    def live_sharing(self) -> tuple[tuple[str, ...], ...]:
        """The sharing groups as applied, restricted to jobs still placed (two or more)."""
        out: list[tuple[str, ...]] = []
        for group in dict.fromkeys(self.sharing.values()):
            left = tuple(n for n in group if n in self.runs and self.runs[n].servers)
            if len(left) > 1:
                out.append(left)
        return tuple(out)

    def shared_group(self, group: tuple[str, ...]) -> SharedGroup:
        """The layout of one sharing group (cycle, offsets, profiles), from the jobs' own profiles."""
        key = tuple(
            (n, self.runs[n].trace.model, len(self.runs[n].servers), self.runs[n].trace.batch_size)
            for n in group
        )
        laid = self.shared_cache.get(key)
        if laid is None:
            profiles = {n: self.profile(m, w, b) for n, m, w, b in key}
            laid = share(profiles, order=group)
            self.shared_cache[key] = laid
        return laid

    def _view(self, now: float, reason: str) -> ClusterView:
        placed = {n: self.runs[n].servers for n in self.live}
        sharing = self.live_sharing()
        used = slots_in_use(placed, sharing) if sharing else slots_used(placed)
        free = {s: g - used.get(s, 0) for s, g in self.gpus.items()}
        jobs = []
        for name in self.live:
            run = self.runs[name]
            tj = run.trace
            jobs.append(
                JobStatus(
                    name=name,
                    model=tj.model,
                    requested=tj.workers,
                    iterations=tj.iterations,
                    arrival_s=tj.arrival_s,
                    work_done=min(run.work_done, float(tj.iterations)),
                    servers=run.servers,
                    since_s=run.since_s,
                    ideal_iteration_ms=self.profile(
                        tj.model, tj.workers, tj.batch_size
                    ).iteration_ms,
                    batch_size=tj.batch_size,
                )
            )
        return ClusterView(now / 1e3, self.gpus, free, tuple(jobs), reason, sharing)

    def _apply(self, alloc: Allocation, now: float) -> None:
        placement = {k: tuple(v) for k, v in alloc.placement.items() if v}
        for name in placement:
            if name not in self.runs or name not in self.live:
                raise RuntimeError(f"scheduler placed unknown or finished job {name}")
        new_sharing = {n: tuple(g) for g in alloc.sharing if len(g) > 1 for n in g}
        unplaced = sorted(n for n in new_sharing if n not in placement)
        if unplaced:
            raise RuntimeError(
                f"scheduler {self.scheduler.name} shares GPUs of unplaced {unplaced}"
            )
        used = slots_in_use(placement, alloc.sharing) if alloc.sharing else slots_used(placement)
        if not self.scheduler.dedicated:
            over = {s: u for s, u in used.items() if u > self.gpus.get(s, 0)}
            if over:
                raise RuntimeError(f"scheduler {self.scheduler.name} over-allocated servers {over}")
        if self.on_event is not None:
            self.on_event(now / 1e3, used, self.gpus)
        changed: set[str] = set()
        resync: set[str] = set()
        # Time-sharing: a job whose group changed runs a new profile (its in-flight
        # iteration restarts, our choice); one whose group is unchanged keeps its grid.
        reshaped: set[str] = set()
        steady: set[str] = set()
        for name in self.live:
            run = self.runs[name]
            new = placement.get(name, ())
            if sorted(new) != sorted(run.servers):
                changed.add(name)
            elif new and new_sharing.get(name, ()) != self.sharing.get(name, ()):
                reshaped.add(name)
            elif new and name in new_sharing:
                steady.add(name)
            paced_now = not math.isnan(run.grid_period)
            if (
                new
                and alloc.new_schedule
                and (name in alloc.periods_ms or paced_now)
                and name not in steady
            ):
                resync.add(name)
        self.sharing = new_sharing
        new_classes = self._policy_classes(placement, now)
        reclassed = {
            n for n in self.live if new_classes.get(n, ()) != self.classes.get(n, ())
        } - changed
        self.classes = new_classes
        if not changed and not resync and not reshaped and not reclassed:
            return
        new_links: set[int] = set()
        for name in changed:
            run = self.runs[name]
            servers = placement.get(name, ())
            tj = run.trace
            prof = self.profile(tj.model, len(servers), tj.batch_size) if servers else None
            old_servers = run.servers
            run.servers = servers
            self._set_load(run, prof)
            run.servers = old_servers
            if prof is not None:
                new_links.update(lk for f in self.flows(servers, prof.parallelism) for lk in f)
        hot = self.coupling()
        hot_new = {lk for lk in new_links if hot[lk]}
        touched = []
        for comp in self.comps:
            names = {r.trace.name for r in comp.runs}
            if names & (changed | resync | reshaped | reclassed) or (
                not self.scheduler.dedicated and hot_new.intersection(comp.global_links.tolist())
            ):
                touched.append(comp)
        regroup: list[str] = []
        for comp in touched:
            self._rewind(comp, now)
            for j, run in enumerate(comp.runs):
                name = run.trace.name
                if name in self.finished:
                    continue
                run.carry = None if name in changed or name in reshaped else comp.carry_out(j)
                regroup.append(name)
            self._retire(comp)
            self.comps.remove(comp)
        migration_ms = self.scheduler.migration_s * 1e3
        for name in changed:
            run = self.runs[name]
            new = placement.get(name, ())
            if run.servers or run.starts:
                # moved, preempted or resumed: the in-flight iteration is lost
                run.migrations += 1
                run.resume_ms = now + migration_ms
            else:
                run.resume_ms = now
            run.carry = None
            run.servers = new
            run.since_s = now / 1e3
            if name not in regroup:
                regroup.append(name)
        members: list[Member] = []
        first_dues = (
            self._first_dues(alloc, [n for n in regroup if n not in steady], now)
            if alloc.new_schedule
            else {}
        )
        for name in regroup:
            run = self.runs[name]
            if not run.servers:
                continue
            run.work_per_iter = float(alloc.work_per_iteration.get(name, 1.0))
            tj = run.trace
            prof = self.profile(tj.model, len(run.servers), tj.batch_size)
            alone_ms = 0.0
            if name in new_sharing:
                alone_ms = prof.iteration_ms
                prof = self.shared_group(new_sharing[name]).profiles[name]
            first_due = math.nan
            new_grid = alloc.new_schedule or run.carry is None
            if name in steady:
                new_grid = run.carry is None  # the group's grid goes on
            elif alloc.new_schedule:
                run.grid_period = float(alloc.periods_ms.get(name, math.nan))
                first_due = first_dues.get(name, math.nan)
            elif run.carry is None:
                run.grid_period = math.nan  # moved without a schedule: runs free
            members.append(
                Member(
                    run,
                    prof,
                    self.flows(run.servers, prof.parallelism),
                    first_due,
                    new_grid,
                    alone_ms,
                    new_classes.get(name, ()),
                )
            )
        for group in self._groups(members):
            comp = Component(
                group, self.capacity, self.settings, now, self.stats,
                self.scheduler.dedicated, self.link_sharing,
            )  # fmt: skip
            comp.take_snapshot()
            self.comps.append(comp)

    def _policy_classes(
        self, placement: Mapping[str, tuple[str, ...]], now: float
    ) -> dict[str, tuple[int, ...]]:
        """Each placed job's flow classes under the network policy (none: {})."""
        if self.policy is None:
            return {}
        profiles = {
            n: self.profile(self.runs[n].trace.model, len(s), self.runs[n].trace.batch_size)
            for n, s in placement.items()
        }
        return flow_classes(self.policy, self.topology, placement, profiles, now, self.router)

    def _first_dues(self, alloc: Allocation, names: list[str], now: float) -> dict[str, float]:
        """First grid point of every paced job of a new schedule (see `first_grid_points`)."""
        ready: dict[str, float] = {}
        for name in names:
            run = self.runs[name]
            if name not in alloc.periods_ms or not run.servers:
                continue
            carry = run.carry
            if carry is None:  # new, moved or resumed
                ready[name] = max(now, run.resume_ms)
            elif carry.mode == _WAIT:
                ready[name] = now
            else:  # the in-flight iteration should end about one iteration after it began
                tj = run.trace
                own = self.profile(tj.model, len(run.servers), tj.batch_size).iteration_ms
                ready[name] = max(now, carry.iter_start + own)
        groups = alloc.groups or (tuple(sorted(ready)),)  # no groups: all shifts relative
        return first_grid_points(groups, alloc.shifts_ms, alloc.periods_ms, ready, now)

    def _groups(self, members: list[Member]) -> list[list[Member]]:
        """Connected components of jobs through shared links (union-find)."""
        if self.scheduler.dedicated:
            return [[m] for m in members]
        parent = list(range(len(members)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        hot = self.coupling()
        for i, m in enumerate(members):
            for f in m.flows:
                for lk in f:
                    if not hot[lk]:
                        continue
                    if lk in owner:
                        a, b = root(owner[lk]), root(i)
                        if a != b:
                            parent[a] = b
                    else:
                        owner[lk] = i
        groups: dict[int, list[Member]] = {}
        for i, m in enumerate(members):
            groups.setdefault(root(i), []).append(m)
        return list(groups.values())

    def _rewind(self, comp: Component, now: float) -> None:
        if comp.clock > now + _TOL_MS:
            comp.restore()
        if comp.clock < now - _TOL_MS:
            comp.run_until(now, exact_stop=True)
        # keep the component consistent with completions already processed
        for j, run in enumerate(comp.runs):
            if run.trace.name in self.finished and comp.mode[j] != _DONE:
                comp.mode[j] = _DONE
                comp.flow_on[comp.job_flows[j]] = False

    def _retire(self, comp: Component) -> None:
        comp.commit_stats()
        self.events_retired += comp.events
        self.ff_retired += comp.ff_ms

    def _result(self, now: float) -> SimResult:
        jobs = []
        for name, run in self.runs.items():
            tj = run.trace
            jobs.append(
                JobResult(
                    name=name,
                    model=tj.model,
                    workers=tj.workers,
                    arrival_s=tj.arrival_s,
                    finish_s=(run.finish_ms or now) / 1e3,
                    iteration_start_ms=np.array(run.starts),
                    iteration_end_ms=np.array(run.ends),
                    ideal_iteration_ms=np.array(run.ideal),
                    adjustments=run.adjustments,
                    migrations=run.migrations,
                    marked_mbit=run.marked_mbit,
                )
            )
        return SimResult(
            scheduler=self.scheduler.name,
            jobs=tuple(jobs),
            links=self.stats.series(self.links, self.capacity, self.settings.bucket_s),
            events=self.events_retired,
            decisions=self.decisions,
            simulated_ms=now,
            fast_forwarded_ms=self.ff_retired,
            metadata={"settings": self.settings.__dict__.copy(), "topology": self.topology.name},
        )


def first_grid_points(
    groups: Sequence[Sequence[str]],
    shifts_ms: Mapping[str, float],
    periods_ms: Mapping[str, float],
    ready_ms: Mapping[str, float],
    now: float,
) -> dict[str, float]:
    """When each job of a new schedule starts its first aligned iteration.

    Job j's grid is now + shift_j + c + k x Q_j; it starts at the first grid
    point at or after it is ready. Shifts within a group are relative, so
    (our choice, as agents reporting their phase would allow) each group
    takes the one offset c that makes its jobs wait least in total, trying
    the offsets that let one job start the moment it is ready.

    b should run 50 ms after a; a is ready at 130, b now. Moving the group by
    50 ms lets b start at once and a wait 20 ms (the cheapest of the offsets):

    >>> first_grid_points([("a", "b")], {"a": 0.0, "b": 50.0}, {"a": 100.0, "b": 100.0},
    ...                   {"a": 130.0, "b": 0.0}, 0.0)
    {'a': 150.0, 'b': 0.0}
    """
    out: dict[str, float] = {}
    for group in groups:
        jobs = [j for j in group if j in ready_ms and j in periods_ms]
        if not jobs:
            continue

        def grid_points(c: float, jobs: list[str] = jobs) -> dict[str, float]:
            points = {}
            for j in jobs:
                q, base = periods_ms[j], now + shifts_ms.get(j, 0.0) + c
                points[j] = base + math.ceil((ready_ms[j] - base) / q - 1e-9) * q
            return points

        offsets = [0.0] + [
            (ready_ms[j] - now - shifts_ms.get(j, 0.0)) % periods_ms[j] for j in jobs
        ]
        best = min(
            (grid_points(c) for c in offsets),
            key=lambda p: sum(p[j] - ready_ms[j] for j in jobs),
        )
        out.update(best)
    return out


def simulate(
    trace: Sequence[TraceJob],
    topology: Topology,
    scheduler: Scheduler,
    settings: SimSettings | None = None,
    router: JobRouter | None = None,
    on_event: EventHook | None = None,
    progress: ProgressHook | None = None,
    book: ProfileBook | None = None,
    on_decision: DecisionHook | None = None,
    policy: NetworkPolicy | None = None,
    sharing: SharingModel = IDENTITY,
) -> SimResult:
    """Run `trace` on `topology` under `scheduler`; deterministic for a given seed.

    `policy` (`scheduler.policies`) gives flows strict-priority classes at
    every decision; without one every flow shares max-min, as before.
    `sharing` (`scheduler.workloads.sharing_model`): a link n jobs share offers capacity x factor(n).

    `on_event(now_s, slots_used, gpus)` is called after every scheduler
    decision (tests use it to check capacity at every event);
    `on_decision(now_s, view, allocation)` sees each decision itself.
    """
    run = _Run(
        trace,
        topology,
        scheduler,
        settings or SimSettings(),
        router,
        on_event,
        progress,
        book,
        on_decision,
        policy,
        sharing,
    )
    return run.execute()
