"""Pacing every coupled group at once: the periods the tests check `pacing_options` by.

The scheduler paces one group at a time and scores several options
(`scheduler.cassini.plans`); tests want the least-idling periods of all groups in
one call.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from scheduler.cassini.periods import coupled_groups, pacing_options


def paced_periods(
    iteration_ms: Mapping[str, float], links: Iterable[Collection[str]]
) -> dict[str, float]:
    """The least-idling periods for jobs on shared links (jobs on none are absent).

    `links` lists, per link that can be oversubscribed, the jobs crossing it.

    >>> paced_periods({"a": 100.0, "b": 150.0}, [("a", "b")])
    {'a': 100.0, 'b': 150.0}
    >>> {j: round(q, 1) for j, q in paced_periods({"a": 101.0, "b": 99.0}, [("a", "b")]).items()}
    {'a': 101.0, 'b': 101.0}
    """
    shared = [tuple(sorted(set(jobs))) for jobs in links if len(set(jobs)) > 1]
    periods: dict[str, float] = {}
    for group in coupled_groups(shared):
        group_links = [link for link in shared if link[0] in group]
        periods.update(pacing_options(iteration_ms, group_links, count=1)[0].periods_ms)
    return periods
