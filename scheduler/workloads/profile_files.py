"""Profiles as files: the JSON schema `cassini models --json` writes and profiles files are
read in (measured with `cassini profile`, or written by hand), and how a measured profile
replaces the derived one of its model (`with_measured_profiles`).

Kept apart from the derivation (`profiles.py`) so that each reads on its own: this side
checks a user's file field by field, that side turns model figures into phases.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from scheduler.workloads.profiles import (
    FIELD_MAXIMA,
    MIN_ITERATION_MS,
    PARALLELISMS,
    ModelSpec,
    merge_phases,
    normalize_model_name,
)
from scheduler.workloads.types import Phase, Profile
from scheduler.workloads.up_slack import up_slack
from topologies.datafile import read_data_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import check_name, shown


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """The JSON form shared by `cassini models --json` and `load_profiles_file`."""
    return {
        "name": profile.name,
        "model": profile.model,
        "parallelism": profile.parallelism,
        "workers": profile.workers,
        "iteration_ms": round(profile.iteration_ms, 6),
        "batch_size": profile.batch_size,
        **({"compute_ms": round(profile.compute_ms, 6)} if profile.compute_ms > 0 else {}),
        "phases": [[round(p.duration_ms, 6), round(p.gbps, 6)] for p in profile.phases],
    }


def _profile_from_dict(raw: Any, index: int, where: str) -> Profile:
    ctx = f"{where}: entry {index}"
    if not isinstance(raw, Mapping):
        raise UserInputError(f"{ctx} must be an object, got {type(raw).__name__}")
    for required in ("name", "phases"):
        if required not in raw:
            raise UserInputError(f"{ctx} is missing field '{required}'")
    name = check_name(raw["name"], "profile name", f"{ctx} field 'name'")
    phases_raw = raw["phases"]
    if not isinstance(phases_raw, list) or not phases_raw:
        raise UserInputError(
            f"{ctx} ('{name}') field 'phases' must be a non-empty list of [duration_ms, gbps]"
        )
    phases = []
    for k, ph in enumerate(phases_raw):
        ok = (
            isinstance(ph, list | tuple)
            and len(ph) == 2
            and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in ph
            )
        )
        if not ok or not 0 <= ph[0] <= FIELD_MAXIMA["compute_ms"] or not 0 <= ph[1] <= 1e4:
            raise UserInputError(
                f"{ctx} ('{name}') field 'phases[{k}]' must be [duration_ms in 0-1e7, "
                f"gbps in 0-1e4], got {shown(ph)}"
            )
        phases.append(Phase(float(ph[0]), float(ph[1])))
    total = sum(p.duration_ms for p in phases)
    if total < MIN_ITERATION_MS:
        raise UserInputError(
            f"{ctx} ('{name}') field 'phases' lasts {total:g} ms in all; an iteration must last "
            f"at least {MIN_ITERATION_MS:g} ms (our choice)"
        )
    iteration = raw.get("iteration_ms", total)
    if (
        not isinstance(iteration, int | float)
        or isinstance(iteration, bool)
        or not math.isclose(iteration, total, rel_tol=1e-3, abs_tol=1e-3)
    ):
        raise UserInputError(
            f"{ctx} ('{name}') field 'iteration_ms' is {shown(iteration)} but the phases sum to {total:g} ms"
        )
    parallelism = raw.get("parallelism", "data")
    if parallelism not in PARALLELISMS:
        raise UserInputError(
            f"{ctx} ('{name}') field 'parallelism': "
            + did_you_mean(str(parallelism), PARALLELISMS, "parallelism")
        )
    workers = raw.get("workers", 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 100_000:
        raise UserInputError(
            f"{ctx} ('{name}') field 'workers' must be an integer in 1-100000, got {shown(workers)}"
        )
    return Profile(
        name=name,
        model=str(raw.get("model", name)),
        parallelism=parallelism,
        workers=workers,
        iteration_ms=total,
        phases=tuple(phases),
        batch_size=int(raw.get("batch_size", 0) or 0),
        compute_ms=_compute_from_dict(raw, total, f"{ctx} ('{name}')"),
    )


def _compute_from_dict(raw: Mapping[str, Any], iteration_ms: float, ctx: str) -> float:
    """An entry's optional `compute_ms` (what `cassini models --json` writes): at most its
    iteration, since the GPU cannot compute longer than the iteration lasts."""
    value = raw.get("compute_ms", 0.0)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not 0 <= value <= iteration_ms * (1 + 1e-6):
        raise UserInputError(
            f"{ctx} field 'compute_ms' must be a number in 0-{iteration_ms:g} (the iteration), "
            f"got {shown(value)}"
        )
    return float(value)


def load_profiles_file(path: str | Path) -> dict[str, Profile]:
    """Measured or hand-written profiles, in the `cassini models --json` schema."""
    return {name: prof for name, (prof, _) in load_profiles_with_periods(path).items()}


def _period_from_dict(raw: Mapping[str, Any], prof: Profile, ctx: str) -> float | None:
    """The optional `period_ms` of an entry (`cassini profile` writes it: the grid period
    the agents keep); at least the iteration time, so the grid never runs ahead of it."""
    period = raw.get("period_ms")
    if period is None:
        return None
    ok = isinstance(period, int | float) and not isinstance(period, bool)
    if not ok or not math.isfinite(period) or not period <= FIELD_MAXIMA["compute_ms"]:
        raise UserInputError(
            f"{ctx} ('{prof.name}') field 'period_ms' must be a number, got {shown(period)}"
        )
    if period < prof.iteration_ms * (1 - 1e-6):
        raise UserInputError(
            f"{ctx} ('{prof.name}') field 'period_ms' is {period:g} ms, shorter than its "
            f"iteration time {prof.iteration_ms:g} ms"
        )
    return float(period)


def _up_slack_from_dict(raw: Mapping[str, Any], prof: Profile, ctx: str) -> float:
    """`up_slack` of an entry from its optional `measured` spread: `measured.up_ms.p95`
    and `measured.interval_ms` (0 when either is absent, as in hand-written files)."""
    measured = raw.get("measured")
    if measured is None:
        return 0.0
    if not isinstance(measured, Mapping):
        raise UserInputError(f"{ctx} ('{prof.name}') field 'measured' must be an object")
    up = measured.get("up_ms")
    p95 = up.get("p95") if isinstance(up, Mapping) else None
    interval = measured.get("interval_ms")
    if p95 is None or interval is None:
        return 0.0
    for field_name, value in (("up_ms.p95", p95), ("interval_ms", interval)):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not 0 <= value <= FIELD_MAXIMA["compute_ms"]:
            raise UserInputError(
                f"{ctx} ('{prof.name}') field 'measured.{field_name}' must be a number "
                f"in 0-1e7, got {shown(value)}"
            )
    return up_slack(prof, float(p95), float(interval))


def load_profiles_with_periods(path: str | Path) -> dict[str, tuple[Profile, float | None]]:
    """`load_profiles_file`'s profiles with each entry's optional grid `period_ms`.

    Entries may carry two optional fields older files lack (older readers ignore
    them): `period_ms`, the grid period the agents keep (`cassini profile` chooses it
    from the measured spread), and `measured`, the spread itself (iteration time,
    Up duration and start offset: mean, p50, p90, p95, p99).
    """
    p = Path(path)
    doc = read_data_file(p, "profiles")
    if not isinstance(doc, list) or not doc:
        raise UserInputError(f"{p}: expected a non-empty JSON list of profiles")
    out: dict[str, tuple[Profile, float | None]] = {}
    for i, raw in enumerate(doc):
        prof = _profile_from_dict(raw, i, str(p))
        if prof.name in out:
            raise UserInputError(f"{p}: entry {i} field 'name': duplicate name '{prof.name}'")
        period = _period_from_dict(raw, prof, f"{p}: entry {i}")
        slack = _up_slack_from_dict(raw, prof, f"{p}: entry {i}")
        out[prof.name] = (replace(prof, up_slack_ms=slack), period)
    return out


def grid_profile(profile: Profile, period_ms: float | None) -> Profile:
    """The profile as the agents pace it: its last Down phase lengthened (or one added)
    so the phases fill `period_ms` (None or not longer: the profile as it is).

    >>> p = Profile("x", "x", "data", 2, 200.0, (Phase(100.0, 0.0), Phase(100.0, 50.0)))
    >>> [(ph.duration_ms, ph.gbps) for ph in grid_profile(p, 210.0).phases]
    [(100.0, 0.0), (100.0, 50.0), (10.0, 0.0)]
    """
    if period_ms is None or period_ms <= profile.iteration_ms:
        return profile
    pad = Phase(period_ms - profile.iteration_ms, 0.0)
    phases = merge_phases([*profile.phases, pad])
    return replace(profile, iteration_ms=sum(ph.duration_ms for ph in phases), phases=phases)


def with_measured_profiles(
    models: Mapping[str, ModelSpec], path: str | Path | None
) -> dict[str, ModelSpec]:
    """`models` with the profiles of a profiles file (`cassini profile --out`) attached to
    their models, so every profile of that model and worker count is the measured one.

    (our choice) A profile with a `period_ms` is attached as the agents pace it
    (`grid_profile`): the scheduler then gives its job a grid period of at least the
    measured one, and the simulator runs it at that period. A free job (no agent) is
    predicted that much slower than its measured mean (the p95 against the mean: a few
    per cent); a paced one at the period it really keeps.
    """
    out = dict(models)
    if path is None:
        return out
    for name, (prof, period) in load_profiles_with_periods(path).items():
        key = normalize_model_name(prof.model or name)
        if key not in out:
            raise UserInputError(
                f"{path}: profile '{name}': model '{prof.model}' is not a known model; "
                + did_you_mean(prof.model, out, "model")
            )
        spec = out[key]
        measured = dict(spec.measured or {})
        measured[prof.workers] = grid_profile(prof, period)
        out[key] = replace(spec, measured=measured)
    return out
