"""When should each flow of a training step finish? EchelonFlow's staggered targets.

EchelonFlow (Pan et al., "Efficient flow scheduling in distributed deep
learning training with echelon formation", HotNets 2022): the flows of one
training step need not finish together (Coflow's assumption); each should
finish when the computation that consumes it starts, so a job's flows get
target finish times that follow its computation pattern (its arrangement),
and scheduling aims at the targets. Coflow is the case where every target
is the same. The paper leaves the numbers to the training paradigm; ours,
per job, measured from the step's start r (each `(our choice)`):

- data, tensor, hybrid (ring AllReduce): the step's flows finish together,
  at r + compute + comm, compute the profile's Down ms and comm its Up ms
  (the step alone on the fabric).
- pipeline over n stages (one micro-batch, GPipe-like): a stage computes
  c = compute / (2n) forward and again backward. Forward activations
  s -> s+1 are due when stage s+1 starts, at r + (s+1) c; backward
  gradients s -> s-1 when stage s's backward ends, at r + (2n - s) c; the
  ring flow closing the AllReduce of tied embeddings (n-1 -> 0) after the
  backward pass, at r + 2n c + comm. A server pair that carries several
  transfers takes its earliest target.

Enforcement, the approximation: the policy runs at a decision, not per
step, and does not see where each job is in its iteration; it takes every
job's step to start at the decision (r = now). Then either
- `echelon` (priorities): flows by target, earliest first, flows with the
  same target one item (they should finish together), compressed to the port's K classes as Crux's
  compression does (`compression.compress`, loss = target gap between
  flows sharing a link, our choice); or
- `echelon-rate` (host rates): each flow paced at its Mbit per step over
  its time to target, (target - now), so an uncontended step meets its
  targets exactly and no flow asks for more than it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import FlowInfo, NetworkPlan, PolicyInput, compute_ms, job_flows_of
from .compression import compress, to_classes


def flow_targets(inp: PolicyInput, job: str) -> dict[tuple[str, str], float]:
    """Target finish time (ms, absolute) of each of the job's (src, dst) flows."""
    prof = inp.profiles[job]
    r = inp.now_ms
    compute = compute_ms(prof)
    comm = prof.iteration_ms - compute
    stages = list(dict.fromkeys(inp.placement[job]))
    flows = [(f.src, f.dst) for f in job_flows_of(inp, job)]
    if prof.parallelism != "pipeline":
        return {fl: r + compute + comm for fl in flows}
    n = len(stages)
    c = compute / (2 * n)
    index = {s: i for i, s in enumerate(stages)}
    out: dict[tuple[str, str], float] = {}
    for src, dst in flows:
        a, b = index[src], index[dst]
        due = []
        if b == a + 1:
            due.append(r + (a + 1) * c)  # forward activation
        if b == a - 1:
            due.append(r + (2 * n - a) * c)  # backward gradient
        if not due:
            due.append(r + 2 * n * c + comm)  # the ring's closing flow
        out[(src, dst)] = min(due)
    return out


def _all_flows(inp: PolicyInput) -> list[tuple[float, FlowInfo]]:
    rows: list[tuple[float, FlowInfo]] = []
    for job in sorted(inp.placement):
        targets = flow_targets(inp, job)
        rows += [(targets[(f.src, f.dst)], f) for f in job_flows_of(inp, job)]
    return sorted(rows, key=lambda r: (r[0], r[1].key))


@dataclass(frozen=True)
class EchelonPolicy:
    """`echelon`: earliest target first, compressed to the port's classes."""

    name: str = "echelon"

    def plan(self, inp: PolicyInput) -> NetworkPlan:
        rows = [r for r in _all_flows(inp) if r[1].links]
        # flows due at the same time are one item: they should finish together
        targets = sorted({t for t, _ in rows})
        links: dict[float, set[tuple[str, str]]] = {t: set() for t in targets}
        for t, f in rows:
            links[t].update(f.links)
        contend = [[a != b and bool(links[a] & links[b]) for b in targets] for a in targets]
        # earlier target = higher priority: compress on the negated targets
        levels = compress([-t for t in targets], contend, inp.classes)
        by_target = dict(zip(targets, to_classes(levels, inp.classes), strict=True))
        classes = {f.key: by_target[t] for t, f in rows}
        return NetworkPlan(
            policy=self.name,
            classes=classes,
            note=f"{len(rows)} flows by target finish time into {len(set(classes.values()))} classes",
        )


@dataclass(frozen=True)
class EchelonRatePolicy:
    """`echelon-rate`: each flow paced to meet its target finish time."""

    name: str = "echelon-rate"

    def plan(self, inp: PolicyInput) -> NetworkPlan:
        rates = {
            f.key: f.mbit_per_iteration / (t - inp.now_ms)
            for t, f in _all_flows(inp)
            if t > inp.now_ms and f.mbit_per_iteration > 0
        }
        return NetworkPlan(policy=self.name, rates_gbps=rates, note=f"{len(rates)} flows paced")
