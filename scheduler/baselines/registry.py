"""Schedulers by CLI name: themis, pollux, random, ideal, delay, nags, muri, and Cassini variants."""

from __future__ import annotations

from scheduler.workloads.traffic import JobRouter
from topologies.errors import UserInputError, did_you_mean
from topologies.model import Topology

from .augmented import CassiniAugmented
from .base import ClusterInfo, ProfileBook, Scheduler
from .delay import DelayScheduler
from .ideal import IdealScheduler
from .muri import muri_scheduler
from .nags import SharingScheduler
from .pollux import PolluxScheduler
from .random_placement import RandomScheduler
from .themis import ThemisScheduler

SCHEDULER_NAMES = (
    "themis",
    "th+cassini",
    "pollux",
    "po+cassini",
    "random",
    "ideal",
    "delay",
    "delay+cassini",
    "nags",
    "muri",
)
CASSINI_BASE = {"th+cassini": "themis", "po+cassini": "pollux", "delay+cassini": "delay"}
# The six the Cassini paper compares: what a sweep runs when its file names none.
PAPER_SCHEDULERS = SCHEDULER_NAMES[:6]


def parse_scheduler_names(text: str) -> list[str]:
    """Comma-separated names, checked; unknown ones get a did-you-mean."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise UserInputError("--schedulers: give at least one of " + ", ".join(SCHEDULER_NAMES))
    for n in names:
        if n not in SCHEDULER_NAMES:
            raise UserInputError("--schedulers: " + did_you_mean(n, SCHEDULER_NAMES, "scheduler"))
    return list(dict.fromkeys(names))


def make_scheduler(
    name: str,
    topology: Topology,
    seed: int = 0,
    candidates: int = 10,
    router: JobRouter | None = None,
    lease_s: float = 600.0,
    period_s: float = 60.0,
    precision_deg: float = 5.0,
    book: ProfileBook | None = None,
    aggregate: str = "total",
    pace: bool = True,
) -> Scheduler:
    """Build a scheduler by its CLI name; pass one `book` to share profiles across a run.

    `precision_deg`, `aggregate` and `pace` are Cassini's knobs (ignored by the bases).
    """
    key = name.strip().lower()
    book = book or ProfileBook(nic_gbps=topology.nic_gbps())
    info = ClusterInfo.of(topology)
    if key == "random":
        return RandomScheduler(info, seed)
    if key == "ideal":
        return IdealScheduler(info)
    if key == "themis":
        return ThemisScheduler(info, lease_s=lease_s, candidates=candidates, seed=seed)
    if key == "pollux":
        return PolluxScheduler(info, book, period_s=period_s, candidates=candidates, seed=seed)
    if key == "delay":
        return DelayScheduler(info, book, candidates=candidates, seed=seed)
    if key == "nags":
        return SharingScheduler(info, book, router or JobRouter(topology), topology.capacity_gbps())
    if key == "muri":
        return muri_scheduler(info, book, router or JobRouter(topology), topology.capacity_gbps())
    if key in CASSINI_BASE:
        base = make_scheduler(
            CASSINI_BASE[key],
            topology,
            seed,
            candidates,
            router,
            lease_s,
            period_s,
            precision_deg,
            book,
        )
        return CassiniAugmented(
            base,
            router or JobRouter(topology),
            topology.capacity_gbps(),
            name=key,
            precision_deg=precision_deg,
            aggregate=aggregate,
            pace=pace,
            book=book,
        )
    raise UserInputError(did_you_mean(name, SCHEDULER_NAMES, "scheduler"))
