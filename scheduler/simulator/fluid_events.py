"""The fluid simulator's event loop, compiled: phases, max-min rates, link counters.

`scheduler.simulator` keeps the bookkeeping that happens once per iteration
(records, agents, steady-state windows, scheduler decisions) in Python and
hands everything between two iteration ends to `run_events`. A long trace
has millions of events (phase changes, flow completions) and each one
re-solves max-min for the flows it touched; in compiled code an event costs
microseconds instead of the ~100 us numpy's per-call overhead costs.

State lives in the component's numpy arrays, passed in and updated in place
(see `simulator.component.Component` for what each holds); scalars go in and come
back out. Modes: WAIT (agent holds the next iteration), DOWN (compute), UP
(sending), DONE.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from scheduler.workloads.max_min import compiled, max_min_classes, max_min_pairs, tight_link

WAIT, DOWN, UP, DONE = 0, 1, 2, 3
TOL_MS = 1e-7  # event-time tolerance: events this close count as simultaneous
OVER = 1e-9  # a link is oversubscribed when offered demand exceeds capacity x (1 + OVER)

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


@compiled
def begin_phase(
    j: int, k: int, first_ms: Floats, phase: Ints, mode: Ints, down_rem: Floats,
    has_flows: Bools, flow_lo: Ints, flow_hi: Ints, ph_lo: Ints, ph_ms: Floats,
    ph_gbps: Floats, flow_share: Floats, demand: Floats, flow_rem: Floats, flow_on: Bools,
) -> bool:  # fmt: skip
    """Start phase k of job j; returns whether flows changed (rates need solving).

    Phase 0 lasts `first_ms[j]`: the profile's time, jittered under drift.
    """
    phase[j] = k
    dur = first_ms[j] if k == 0 else ph_ms[ph_lo[j] + k]
    gbps = ph_gbps[ph_lo[j] + k]
    if gbps > 0:
        mode[j] = UP
        if has_flows[j]:
            for f in range(flow_lo[j], flow_hi[j]):
                demand[f] = gbps * flow_share[f]
                flow_rem[f] = demand[f] * dur
                flow_on[f] = True
            return True
        down_rem[j] = dur
    else:
        mode[j] = DOWN
        down_rem[j] = dur
    return False


@compiled
def retime(
    j: int, clock: float, mode: Ints, has_flows: Bools, wait_until: Floats, down_rem: Floats,
    jt: Floats,
) -> None:  # fmt: skip
    """Job j's next timed event: end of its wait or compute phase; inf while flows send."""
    m = mode[j]
    if m == WAIT:
        jt[j] = wait_until[j]
    elif m == DOWN or (m == UP and not has_flows[j]):
        jt[j] = clock + down_rem[j]
    else:
        jt[j] = np.inf


@compiled
def log_segment(
    t0: float, dt: float, per_ms: Floats, buckets: Floats, b0: int, width: float
) -> None:
    """Spread a constant-rate segment over the time buckets it covers."""
    t = t0
    end = t0 + dt
    while t < end - 1e-12:
        b = int(t // width)
        b_end = min(end, (b + 1) * width)
        buckets[b - b0] += per_ms * (b_end - t)
        t = b_end


@compiled
def _flush_link(
    lk: int, clock: float, per_ms: Floats, link_t: Floats, tot: Floats, buckets: Floats,
    b0: int, width: float,
) -> None:  # fmt: skip
    """Log link lk's counters, constant since `link_t[lk]`, up to `clock`."""
    t = link_t[lk]
    if clock > t:
        for row in range(3):
            tot[row, lk] += per_ms[row, lk] * (clock - t)
        while t < clock - 1e-12:
            b = int(t // width)
            b_end = min(clock, (b + 1) * width)
            for row in range(3):
                buckets[b - b0, row, lk] += per_ms[row, lk] * (b_end - t)
            t = b_end
    link_t[lk] = clock


@compiled
def _flush_job(
    j: int, clock: float, marked_rate: Floats, job_marked: Floats, job_t: Floats
) -> None:
    if clock > job_t[j]:
        job_marked[j] += marked_rate[j] * (clock - job_t[j])
    job_t[j] = clock


@compiled
def flush_all(
    clock: float, per_ms: Floats, link_t: Floats, tot: Floats, buckets: Floats, b0: int,
    width: float, marked_rate: Floats, job_marked: Floats, job_t: Floats,
) -> None:  # fmt: skip
    """Bring every link's and job's counters up to `clock` (before they are read)."""
    for lk in range(len(link_t)):
        _flush_link(lk, clock, per_ms, link_t, tot, buckets, b0, width)
    for j in range(len(job_t)):
        _flush_job(j, clock, marked_rate, job_marked, job_t)


@compiled
def _group_of(
    changed: Bools, links: Bools, live: Bools, bf_ptr: Ints, bf_link: Ints, bl_ptr: Ints,
    bl_flow: Ints,
) -> Bools:  # fmt: skip
    """Flows reachable from the changed ones through `links`, via live flows (breadth-first)."""
    n = len(changed)
    members = changed.copy()
    seen_link = np.zeros(len(links), dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)
    top = 0
    for f in range(n):
        if members[f]:
            stack[top] = f
            top += 1
    while top > 0:
        top -= 1
        f = stack[top]
        if not live[f]:
            continue
        for e in range(bf_ptr[f], bf_ptr[f + 1]):
            lk = bf_link[e]
            if not links[lk] or seen_link[lk]:
                continue
            seen_link[lk] = True
            for x in range(bl_ptr[lk], bl_ptr[lk + 1]):
                g = bl_flow[x]
                if live[g] and not members[g]:
                    members[g] = True
                    stack[top] = g
                    top += 1
    return members


@compiled
def _solve(
    group: Bools, want: Floats, rates: Floats, bf_ptr: Ints, bf_link: Ints, cap: Floats,
    flow_class: Ints,
) -> None:  # fmt: skip
    """Max-min rates of the group's flows, over the links that can bind.

    The group is renumbered compactly first: each filling round then costs the
    group's size, not the component's. Flows of several classes (a network
    policy's strict priorities) are filled class by class, highest first
    (`workloads.max_min.max_min_classes`); one class is plain max-min. Priorities keep
    the groups apart as max-min does: on a link below capacity every class
    gets its demand.
    """
    n = len(want)
    n_send = 0
    n_cross = 0
    for f in range(n):
        if group[f]:
            if want[f] > 0:
                n_send += 1
                n_cross += bf_ptr[f + 1] - bf_ptr[f]
            else:
                rates[f] = 0.0
    if n_send == 0:
        return
    flows = np.empty(n_send, dtype=np.int64)
    local_link = np.full(len(cap), -1, dtype=np.int64)
    links = np.empty(n_cross, dtype=np.int64)
    flow_of = np.empty(n_cross, dtype=np.int64)
    link_of = np.empty(n_cross, dtype=np.int64)
    r = 0
    c = 0
    n_links = 0
    for f in range(n):
        if group[f] and want[f] > 0:
            flows[r] = f
            for e in range(bf_ptr[f], bf_ptr[f + 1]):
                lk = bf_link[e]
                if local_link[lk] < 0:
                    local_link[lk] = n_links
                    links[n_links] = lk
                    n_links += 1
                flow_of[c] = r
                link_of[c] = local_link[lk]
                c += 1
            r += 1
    classes = flow_class[flows]
    if classes.min() == classes.max():
        solved = max_min_pairs(flow_of, link_of, want[flows], cap[links[:n_links]])
    else:
        solved = max_min_classes(flow_of, link_of, want[flows], cap[links[:n_links]], classes)
    for i in range(n_send):
        rates[flows[i]] = solved[i]


@compiled
def _add_links(
    flows: Bools, ent_ptr: Ints, ent_link: Ints, seen: Bools, links: Ints, n: int
) -> int:
    """Append to links[n:] the links the marked flows cross that are not yet seen; new count."""
    for f in range(len(flows)):
        if flows[f]:
            for e in range(ent_ptr[f], ent_ptr[f + 1]):
                lk = ent_link[e]
                if not seen[lk]:
                    seen[lk] = True
                    links[n] = lk
                    n += 1
    return n


@compiled
def _shared_capacity(
    lk: int, want: Floats, cap: Floats, factor: Floats, al_ptr: Ints, al_flow: Ints,
    flow_job: Ints,
) -> float:  # fmt: skip
    """Link lk's capacity under the sharing model: cap x factor(jobs sending on it).

    A link's flows are listed in flow order and a job's flows are contiguous,
    so the jobs are counted where the job number changes.
    """
    last = factor.size - 1
    if last == 0:
        return cap[lk] * factor[0]
    jobs = 0
    prev = -1
    for x in range(al_ptr[lk], al_ptr[lk + 1]):
        f = al_flow[x]
        if want[f] > 0 and flow_job[f] != prev:
            jobs += 1
            prev = flow_job[f]
    return cap[lk] * factor[min(jobs, last)]


@compiled
def _resolve(
    clock: float, full: bool, want: Floats, prev_want: Floats, rates: Floats,
    flow_job: Ints, flow_lo: Ints, flow_hi: Ints,
    ent_ptr: Ints, ent_link: Ints, al_ptr: Ints, al_flow: Ints,
    bf_ptr: Ints, bf_link: Ints, bl_ptr: Ints, bl_flow: Ints,
    cap: Floats, bind: Bools, tight: Bools, offered: Floats, per_ms: Floats,
    link_t: Floats, tot: Floats, buckets: Floats, b0: int, width: float,
    marked_rate: Floats, job_marked: Floats, job_t: Floats, flow_class: Ints,
    factor: Floats, ecap: Floats,
) -> None:  # fmt: skip
    """Re-solve max-min after flows' demands changed, and update the link counters.

    Links offer their capacity under the sharing model (`ecap`, kept per link:
    `scheduler.workloads.sharing_model`); it changes only with the jobs sending on a
    link, so only on the links a changed flow crosses, where it is recomputed.

    Max-min splits into independent groups of flows joined by tight links; a
    group with no changed flow, through links tight before or after the
    event, keeps its links' tightness and its members' demands, so it keeps
    its rates: only the changed flows' group is solved. Likewise only the
    links those flows cross change their offered and carried traffic, and
    only the jobs on them their marked traffic. Each such sum is recomputed
    whole, in flow order, so it equals a full recomputation bit for bit.
    """
    n_flows, n_links, n_jobs = len(want), len(cap), len(flow_lo)
    changed = want != prev_want
    if full:
        changed[:] = True
    # offered demand and tightness of the links a changed flow crosses
    link_seen = np.zeros(n_links, dtype=np.bool_)
    links = np.empty(n_links, dtype=np.int64)
    n_changed_links = _add_links(changed, ent_ptr, ent_link, link_seen, links, 0)
    new_tight = np.zeros(n_changed_links, dtype=np.bool_)
    for i in range(n_changed_links):
        lk = links[i]
        total = 0.0
        for x in range(al_ptr[lk], al_ptr[lk + 1]):
            total += want[al_flow[x]]
        offered[lk] = total
        ecap[lk] = _shared_capacity(lk, want, cap, factor, al_ptr, al_flow, flow_job)
        new_tight[i] = bind[lk] and tight_link(total, ecap[lk])
        tight[lk] = tight[lk] or new_tight[i]  # tight before or after, for the search
    if full:
        group = want > 0
        rates[:] = 0.0
    else:
        live = (want > 0) | (prev_want > 0)
        group = _group_of(changed, tight, live, bf_ptr, bf_link, bl_ptr, bl_flow)
    for i in range(n_changed_links):
        tight[links[i]] = new_tight[i]
    _solve(group, want, rates, bf_ptr, bf_link, ecap, flow_class)
    prev_want[:] = want
    # carried traffic and congestion of every link a group flow crosses
    job_seen = np.full(n_jobs, full, dtype=np.bool_)  # full: after a rewind, redo every job
    n_links_now = _add_links(group, ent_ptr, ent_link, link_seen, links, n_changed_links)
    for f in range(n_flows):
        if group[f]:
            job_seen[flow_job[f]] = True
    for i in range(n_links_now):
        lk = links[i]
        _flush_link(lk, clock, per_ms, link_t, tot, buckets, b0, width)
        carried = 0.0
        for x in range(al_ptr[lk], al_ptr[lk + 1]):
            carried += rates[al_flow[x]]
        was_over = per_ms[1, lk] > 0
        over = offered[lk] > ecap[lk] * (1 + OVER)
        per_ms[0, lk] = carried
        per_ms[1, lk] = 1.0 if over else 0.0
        per_ms[2, lk] = max(offered[lk] - ecap[lk], 0.0)
        if over != was_over:
            for x in range(al_ptr[lk], al_ptr[lk + 1]):
                job_seen[flow_job[al_flow[x]]] = True
    # a job's traffic counts as marked while any link on its flow's path is over
    for j in range(n_jobs):
        if not job_seen[j]:
            continue
        _flush_job(j, clock, marked_rate, job_marked, job_t)
        marked = 0.0
        for f in range(flow_lo[j], flow_hi[j]):
            for e in range(ent_ptr[f], ent_ptr[f + 1]):
                if per_ms[1, ent_link[e]] > 0:
                    marked += rates[f]
                    break
        marked_rate[j] = marked


@compiled
def _sending(j: int, flow_lo: Ints, flow_hi: Ints, flow_on: Bools) -> bool:
    """Has job j a flow still sending? (Its Up phase ends when none has.)"""
    return bool(flow_on[flow_lo[j] : flow_hi[j]].any())


@compiled
def run_events(
    limit: float, clock: float, any_sending: bool, dirty: bool, need_full: bool,
    check_up: bool, fin_min: float, due_min: float, jt_min: float, always_full: bool,
    # per job
    mode: Ints, phase: Ints, down_rem: Floats, wait_until: Floats, jt: Floats,
    has_flows: Bools, flow_lo: Ints, flow_hi: Ints, ph_lo: Ints, ph_n: Ints, ph_ms: Floats,
    ph_gbps: Floats, first_ms: Floats, marked_rate: Floats, job_marked: Floats,
    # per flow
    flow_job: Ints, flow_share: Floats, flow_rem: Floats, flow_on: Bools, demand: Floats,
    rates: Floats, fin: Floats, due: Floats, prev_want: Floats,
    # crossings: all (flow -> link), binding (flow -> link, link -> flow)
    ent_ptr: Ints, ent_link: Ints, al_ptr: Ints, al_flow: Ints,
    bf_ptr: Ints, bf_link: Ints, bl_ptr: Ints, bl_flow: Ints,
    # per link
    cap: Floats, bind: Bools, tight: Bools, offered: Floats, per_ms: Floats, link_t: Floats,
    tot: Floats, buckets: Floats, b0: int, width: float,
    job_t: Floats, ended: Ints, flow_class: Ints, factor: Floats, ecap: Floats,
) -> tuple[int, float, bool, bool, bool, bool, float, float, float, int]:  # fmt: skip
    """Advance to `limit` or to the first event in which a job ends an iteration.

    Returns (jobs that ended an iteration, listed in `ended`; the scalars
    again; events processed). Ended jobs are left in their last phase with no
    timed event: the caller records the iteration and starts the next one.
    """
    n_jobs, n_flows = len(mode), len(flow_job)
    events = 0
    n_ended = 0
    ready = np.zeros(n_jobs, dtype=np.bool_)
    while clock < limit - TOL_MS:
        if dirty:
            want = np.zeros(n_flows)
            for f in range(n_flows):
                if flow_on[f]:
                    want[f] = demand[f]
            full = need_full or always_full
            need_full = False
            if full or (want != prev_want).any():
                _resolve(
                    clock, full, want, prev_want, rates, flow_job, flow_lo, flow_hi,
                    ent_ptr, ent_link, al_ptr, al_flow, bf_ptr, bf_link, bl_ptr, bl_flow,
                    cap, bind, tight, offered, per_ms, link_t, tot, buckets, b0, width,
                    marked_rate, job_marked, job_t, flow_class, factor, ecap,
                )  # fmt: skip
            dirty = False
            # -- absolute finish times of the sending flows at their current rates
            any_sending = False
            fin_min = np.inf
            due_min = np.inf
            for f in range(n_flows):
                if flow_on[f]:
                    any_sending = True
                    inv = 1.0 / rates[f]
                    fin[f] = clock + flow_rem[f] * inv
                    due[f] = clock + (flow_rem[f] - 1e-9 * (1 + demand[f])) * inv
                    fin_min = min(fin_min, fin[f])
                    due_min = min(due_min, due[f])
                else:
                    fin[f] = np.inf
                    due[f] = np.inf
        t = min(limit, fin_min, jt_min)
        if t > clock:
            if any_sending:
                for f in range(n_flows):
                    flow_rem[f] -= rates[f] * (t - clock)
            clock = t
        events += 1
        # -- process everything due now, jobs in index order
        now = clock
        any_ready = False
        if due_min <= now:
            for f in range(n_flows):
                if due[f] <= now:
                    flow_on[f] = False
                    flow_rem[f] = 0.0
                    fin[f] = np.inf
                    due[f] = np.inf
                    dirty = True
                    j = flow_job[f]
                    if mode[j] == UP and not _sending(j, flow_lo, flow_hi, flow_on):
                        ready[j] = True
                        any_ready = True
        if check_up:
            check_up = False
            for j in range(n_jobs):
                if mode[j] == UP and has_flows[j] and not _sending(j, flow_lo, flow_hi, flow_on):
                    ready[j] = True
                    any_ready = True
        if jt_min <= now + TOL_MS:
            for j in range(n_jobs):
                if jt[j] <= now + TOL_MS:
                    ready[j] = True
                    any_ready = True
        if not any_ready:
            continue
        for j in range(n_jobs):
            if not ready[j]:
                continue
            ready[j] = False
            if mode[j] == WAIT:
                k = 0
            else:
                k = phase[j] + 1
                if k >= ph_n[j]:
                    ended[n_ended] = j
                    n_ended += 1
                    jt[j] = np.inf
                    continue
            if begin_phase(
                j, k, first_ms, phase, mode, down_rem, has_flows, flow_lo, flow_hi,
                ph_lo, ph_ms, ph_gbps, flow_share, demand, flow_rem, flow_on,
            ):  # fmt: skip
                dirty = True
            retime(j, clock, mode, has_flows, wait_until, down_rem, jt)
        jt_min = np.inf
        for j in range(n_jobs):
            jt_min = min(jt_min, jt[j])
        if n_ended > 0:
            break
    return (
        n_ended, clock, any_sending, dirty, need_full, check_up,
        fin_min, due_min, jt_min, events,
    )  # fmt: skip
