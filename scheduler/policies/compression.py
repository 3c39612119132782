"""How do many priority ranks fit the few classes a switch port has?

Crux (Cao et al., SIGCOMM 2024, section 4.3, "Priority Compression") maps
its per-job priorities onto the K queues of a switch: jobs that contend
(share a link) and land in one class lose the order between them, so the
compression should put contending jobs whose priorities differ most into
different classes. The paper casts it as a maximum K-cut of the DAG of
contending jobs ordered by priority; the published descriptions we could
read do not give its edge weights or solver, so here:

- the order is kept: a class is a run of consecutive ranks (a higher rank
  never lands below a lower one), as in the paper's DAG;
- the loss of two contending items sharing a class is |P_a - P_b|, the
  priority difference that sharing erases (our choice); items that do not
  contend lose nothing;
- the split into at most K runs that minimises the summed loss is found
  exactly by dynamic programming over the cut points, O(K n^2) (our
  choice: exact, since n is the running jobs, tens), ties to the split
  whose runs are largest towards the top (our choice).

    >>> compress([9.0, 5.0, 4.0, 1.0], [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]], 2)
    (0, 0, 1, 1)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt


def group_loss(
    values: npt.NDArray[np.float64], contend: npt.NDArray[np.bool_]
) -> npt.NDArray[np.float64]:
    """loss[i, j]: summed |P_a - P_b| over contending pairs within ranks i..j (inclusive)."""
    n = len(values)
    diff = np.abs(values[:, None] - values[None, :]) * contend
    loss = np.zeros((n, n))
    for i in range(n):
        run = 0.0
        for j in range(i + 1, n):
            run += float(diff[i:j, j].sum())  # j joins the run i..j-1
            loss[i, j] = run
    return loss


def compress(
    values: Sequence[float], contend: Sequence[Sequence[int | bool]], classes: int
) -> tuple[int, ...]:
    """Level (0 = top) of each item, given in rank order (highest priority first).

    `contend[a][b]`: items a and b share a link. With no more items than
    classes, every item keeps a level of its own.
    """
    n = len(values)
    if n == 0:
        return ()
    if classes < 1:
        raise ValueError(f"classes must be at least 1, got {classes}")
    if n <= classes:
        return tuple(range(n))
    vals = np.asarray(values, dtype=np.float64)
    con = np.asarray(contend, dtype=bool)
    loss = group_loss(vals, con)
    # best[k, j]: least loss of ranks 0..j-1 in k runs; cut[k, j]: where the last run starts
    best = np.full((classes + 1, n + 1), np.inf)
    cut = np.zeros((classes + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, classes + 1):
        for j in range(1, n + 1):
            # the last run is i..j-1; later starts first, so ties keep the top runs larger
            for i in range(j - 1, k - 2, -1):
                cost = best[k - 1, i] + loss[i, j - 1]
                if cost < best[k, j] - 1e-12:
                    best[k, j] = cost
                    cut[k, j] = i
    k_best = min(range(1, classes + 1), key=lambda k: (best[k, n] + 1e-12 * k, k))
    levels = [0] * n
    j, k = n, k_best
    while k > 0:
        i = int(cut[k, j])
        for x in range(i, j):
            levels[x] = k - 1
        j, k = i, k - 1
    return tuple(levels)


def to_classes(levels: Sequence[int], classes: int) -> tuple[int, ...]:
    """Levels (0 = top) as switch classes (classes - 1 = served first)."""
    return tuple(classes - 1 - lv for lv in levels)
