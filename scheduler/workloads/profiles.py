"""Communication profiles of training jobs: model data in, `Profile` out.

A profile is the demand of one worker's traffic over one iteration, as
`(duration_ms, gbps)` phases. Model figures are data (`data/models.yaml`);
this module only derives phases from them, so users can replace the figures
(`load_models(path)` merges a user file over the built-in one) or skip the
derivation entirely with measured profiles (`load_profiles_file`).

Derivation (documented estimates, not measurements):

- Data parallel (VGG, ResNet, BERT family): gradients are S = params x 4 bytes
  (fp32). Ring AllReduce over N workers sends 2(N-1)/N x S bytes per worker,
  at the NIC line rate, so

      Up   = 2(N-1)/N x S x 8 / nic_gbps   at nic_gbps
      Down = compute_ms                    at 0 Gbps

  The forward pass and backprop are one Down phase before the AllReduce (the
  spec's "forward ~0 Gbps, then backprop + AllReduce"). With one worker there
  is no communication.
- Pipeline / tensor / hybrid: the model's `structures` list the steps of one
  iteration (compute fraction, then a transfer of `send_mb` with a collective
  and a rate); see the header of `data/models.yaml`. Model-parallel compute is
  split across workers: compute_ms x ref_workers / N.
- Batch size: compute scales linearly with batch_size / reference batch size;
  activation volumes scale the same way, gradient volumes do not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from scheduler.workloads.types import Phase, Profile
from scheduler.workloads.up_slack import up_slack
from topologies.datafile import parse_data, read_data_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import check_name, shown

PARALLELISMS = ("data", "pipeline", "tensor", "hybrid")
COLLECTIVES = ("allreduce", "alltoall", "p2p")
BYTES_PER_PARAM = 4  # fp32 gradients


@dataclass(frozen=True)
class Step:
    """One step of a model-parallel iteration: compute, then (maybe) a transfer."""

    compute: float
    send_mb: float = 0.0
    collective: str = "p2p"
    kind: str = "activations"
    rate: float = 1.0
    overlap: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """The figures a profile is derived from (one entry of models.yaml)."""

    key: str
    display: str
    params_m: float
    parallelism: str
    batch_size: int
    compute_ms: float
    ref_workers: int = 1
    structures: Mapping[str, tuple[Step, ...]] | None = None
    # Profiles measured on the fabric, by worker count (`with_measured_profiles`):
    # `build_profile` returns them instead of deriving one.
    measured: Mapping[int, Profile] | None = None


def normalize_model_name(name: str) -> str:
    """'GPT-2', 'gpt_2' and 'gpt2' are the same model to a user."""
    return name.strip().lower().replace("-", "").replace("_", "")


# (our choice) Bounds far above any real model (GPT-3 is 175,000 M parameters,
# iterations of seconds): past them a models file is a typo, and the
# simulator would run for ever.
FIELD_MAXIMA: dict[str, float] = {
    "params_m": 1e7,
    "batch_size": 1e6,
    "compute_ms": 1e7,
    "ref_workers": 1e5,
    "send_mb": 1e7,
}
# (our choice) No training iteration is shorter than a millisecond (the built-in
# models compute for 60-300 ms): a shorter one (`iteration_ms: 1e-9`) would have the
# simulator step a billion iterations a simulated second. A models file's compute_ms
# and a profiles file's iteration are held to it; a single phase may be shorter.
MIN_ITERATION_MS = 1.0


def _field(
    entry: Mapping[str, Any], key: str, field_name: str, kind: type, where: str, default: Any = None
) -> Any:
    if field_name not in entry:
        if default is not None:
            return default
        raise UserInputError(f"{where}: model '{key}' is missing field '{field_name}'")
    return _typed(entry[field_name], kind, f"{where}: model '{key}' field '{field_name}'", field_name)


def _typed(value: Any, kind: type, ctx: str, field_name: str = "") -> Any:
    """`value` if it is of `kind` (an int is a float too; a bool is neither), finite and
    within FIELD_MAXIMA; else one line naming `ctx`."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise UserInputError(f"{ctx} must be {kind.__name__}, got {shown(value)}")
    if isinstance(value, int | float) and not (
        math.isfinite(value) and abs(value) <= FIELD_MAXIMA.get(field_name, math.inf)
    ):
        limit = FIELD_MAXIMA.get(field_name)
        bound = f" up to {limit:g}" if limit else ""
        raise UserInputError(f"{ctx} must be a finite number{bound}, got {shown(value)}")
    return value


def _parse_step(raw: Any, key: str, par: str, index: int, where: str) -> Step:
    ctx = f"{where}: model '{key}' structure '{par}' step {index}"
    if not isinstance(raw, Mapping):
        raise UserInputError(f"{ctx} must be a mapping, got {shown(raw)}")
    unknown = {str(k)[:40] for k in raw} - {"compute", "send_mb", "collective", "kind", "rate", "overlap"}
    if unknown:
        raise UserInputError(f"{ctx} has unknown field(s): {', '.join(sorted(unknown))}")

    def get(name: str, kind: type, default: Any) -> Any:
        return _typed(raw.get(name, default), kind, f"{ctx} field '{name}'", name)

    step = Step(
        compute=get("compute", float, 0.0),
        send_mb=get("send_mb", float, 0.0),
        collective=get("collective", str, "p2p"),
        kind=get("kind", str, "activations"),
        rate=get("rate", float, 1.0),
        overlap=get("overlap", bool, False),  # "false" is a string, not a no
    )
    if step.collective not in COLLECTIVES:
        raise UserInputError(
            f"{ctx} field 'collective': " + did_you_mean(step.collective, COLLECTIVES, "collective")
        )
    if step.kind not in ("activations", "gradients"):
        raise UserInputError(f"{ctx} field 'kind' must be 'activations' or 'gradients'")
    if step.compute < 0 or step.send_mb < 0 or not 0 < step.rate <= 1:
        raise UserInputError(f"{ctx}: compute and send_mb must be >= 0, rate in (0, 1]")
    return step


def _parse_model(key: str, entry: Any, where: str) -> ModelSpec:
    if not isinstance(entry, Mapping):
        raise UserInputError(f"{where}: model '{key}' must be a mapping")
    parallelism = _field(entry, key, "parallelism", str, where)
    if parallelism not in PARALLELISMS:
        raise UserInputError(
            f"{where}: model '{key}' field 'parallelism': "
            + did_you_mean(parallelism, PARALLELISMS, "parallelism")
        )
    structures: dict[str, tuple[Step, ...]] = {}
    raw_structures = entry.get("structures") or {}
    if not isinstance(raw_structures, Mapping):
        raise UserInputError(
            f"{where}: model '{key}' field 'structures' must be a mapping of parallelism to "
            f"steps, got {shown(raw_structures)}"
        )
    for par, steps in raw_structures.items():
        if par not in PARALLELISMS:
            raise UserInputError(
                f"{where}: model '{key}' structures: "
                + did_you_mean(str(par), PARALLELISMS, "parallelism")
            )
        if not isinstance(steps, list) or not steps:
            raise UserInputError(
                f"{where}: model '{key}' structure '{par}' must be a non-empty list"
            )
        parsed = tuple(_parse_step(s, key, par, i, where) for i, s in enumerate(steps))
        total = sum(s.compute for s in parsed)
        if abs(total - 1.0) > 0.02:
            raise UserInputError(
                f"{where}: model '{key}' structure '{par}': compute fractions sum to {total:.3f}, expected 1"
            )
        structures[par] = parsed
    if parallelism != "data" and parallelism not in structures:
        raise UserInputError(
            f"{where}: model '{key}' has parallelism '{parallelism}' but no structures.{parallelism} steps"
        )
    spec = ModelSpec(
        key=key,
        display=str(entry.get("display", key)),
        params_m=_field(entry, key, "params_m", float, where),
        parallelism=parallelism,
        batch_size=_field(entry, key, "batch_size", int, where),
        compute_ms=_field(entry, key, "compute_ms", float, where),
        ref_workers=_field(entry, key, "ref_workers", int, where, default=1),
        structures=structures or None,
    )
    if spec.compute_ms < MIN_ITERATION_MS:
        raise UserInputError(
            f"{where}: model '{key}' field 'compute_ms' must be at least {MIN_ITERATION_MS:g} ms "
            f"(our choice), got {shown(spec.compute_ms)}"
        )
    if spec.params_m <= 0 or spec.batch_size <= 0 or spec.compute_ms <= 0 or spec.ref_workers <= 0:
        raise UserInputError(
            f"{where}: model '{key}': params_m, batch_size, compute_ms, ref_workers must be > 0"
        )
    return spec


def _models_from_doc(doc: Any, where: str) -> dict[str, ModelSpec]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("models"), Mapping):
        raise UserInputError(f"{where}: expected a top-level 'models:' mapping")
    models = {}
    for k, v in doc["models"].items():
        key = check_name(normalize_model_name(str(k)), "model name", f"{where}: models")
        models[key] = _parse_model(key, v, where)
    return models


def load_models(path: str | Path | None = None) -> dict[str, ModelSpec]:
    """The built-in models, with a user file's entries added or replacing them."""
    builtin = resources.files("scheduler").joinpath("data/models.yaml").read_text()
    models = _models_from_doc(parse_data(builtin, "yaml", "models.yaml"), "models.yaml")
    if path is not None:
        models.update(_models_from_doc(read_data_file(path, "models"), str(path)))
    return models


def model_names(models: Mapping[str, ModelSpec] | None = None) -> list[str]:
    return sorted(models if models is not None else load_models())


def allreduce_bytes_per_worker(params: float, workers: int) -> float:
    """Ring AllReduce: every worker sends 2(N-1)/N x S bytes, S = params x 4 (fp32)."""
    return 2.0 * (workers - 1) / workers * params * BYTES_PER_PARAM


def _collective_factor(collective: str, workers: int) -> float:
    if collective == "allreduce":
        return 2.0 * (workers - 1) / workers
    if collective == "alltoall":
        return (workers - 1) / workers
    return 1.0


def _transfer_ms(num_bytes: float, gbps: float) -> float:
    return num_bytes * 8.0 / (gbps * 1e9) * 1e3


def _merge(phases: list[Phase]) -> tuple[Phase, ...]:
    """Drop empty phases and join neighbours of equal demand, so phases are canonical."""
    out: list[Phase] = []
    for ph in phases:
        if ph.duration_ms <= 1e-9:
            continue
        if out and math.isclose(out[-1].gbps, ph.gbps, rel_tol=1e-9, abs_tol=1e-12):
            out[-1] = Phase(out[-1].duration_ms + ph.duration_ms, out[-1].gbps)
        else:
            out.append(ph)
    return tuple(out)


def _model_parallel_phases(
    spec: ModelSpec, steps: Sequence[Step], workers: int, batch_ratio: float, nic_gbps: float
) -> list[Phase]:
    compute = spec.compute_ms * batch_ratio * spec.ref_workers / workers
    phases: list[Phase] = []
    for step in steps:
        step_compute = step.compute * compute
        volume = step.send_mb * 1e6 * _collective_factor(step.collective, workers)
        if step.kind == "activations":
            volume *= batch_ratio
        if volume <= 0:
            phases.append(Phase(step_compute, 0.0))
            continue
        rate = step.rate * nic_gbps
        transfer = _transfer_ms(volume, rate)
        if step.overlap:
            duration = max(step_compute, transfer)
            phases.append(Phase(duration, volume * 8.0 / (duration * 1e-3) / 1e9))
        else:
            phases.append(Phase(step_compute, 0.0))
            phases.append(Phase(transfer, rate))
    return phases


def build_profile(
    model: str,
    workers: int,
    parallelism: str | None = None,
    batch_size: int | None = None,
    nic_gbps: float = 50.0,
    models: Mapping[str, ModelSpec] | None = None,
) -> Profile:
    """Derive a model's profile for `workers` workers (see the module docstring).

    >>> p = build_profile("vgg16", 4)
    >>> [(round(ph.duration_ms, 1), ph.gbps) for ph in p.phases]
    [(100.0, 0.0), (132.9, 50.0)]
    """
    known = models if models is not None else load_models()
    key = normalize_model_name(model)
    if key not in known:
        raise UserInputError(did_you_mean(model, known, "model"))
    spec = known[key]
    if workers < 1:
        raise UserInputError(f"model '{model}': workers must be >= 1, got {workers}")
    if nic_gbps <= 0:
        raise UserInputError(f"NIC rate must be > 0 Gbps, got {nic_gbps}")
    par = parallelism or spec.parallelism
    available = ["data", *(spec.structures or {})]
    if par not in available:
        raise UserInputError(
            f"model '{key}' has no {par!r} structure; "
            + did_you_mean(par, available, "parallelism")
        )
    batch = batch_size if batch_size is not None else spec.batch_size
    if batch < 1:
        raise UserInputError(f"model '{model}': batch size must be >= 1, got {batch}")
    found = (spec.measured or {}).get(workers)
    if found is not None and par == spec.parallelism and batch == spec.batch_size:
        return replace(found, name=key, model=key)
    ratio = batch / spec.batch_size
    if workers == 1:
        compute = spec.compute_ms * ratio * (spec.ref_workers if par != "data" else 1)
        phases = [Phase(compute, 0.0)]
    elif par == "data":
        up = _transfer_ms(allreduce_bytes_per_worker(spec.params_m * 1e6, workers), nic_gbps)
        phases = [Phase(spec.compute_ms * ratio, 0.0), Phase(up, nic_gbps)]
    else:
        assert spec.structures is not None
        phases = _model_parallel_phases(spec, spec.structures[par], workers, ratio, nic_gbps)
    merged = _merge(phases)
    return Profile(
        name=key,
        model=key,
        parallelism=par,
        workers=workers,
        iteration_ms=sum(p.duration_ms for p in merged),
        phases=merged,
        batch_size=batch,
    )


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """The JSON form shared by `cassini models --json` and `load_profiles_file`."""
    return {
        "name": profile.name,
        "model": profile.model,
        "parallelism": profile.parallelism,
        "workers": profile.workers,
        "iteration_ms": round(profile.iteration_ms, 6),
        "batch_size": profile.batch_size,
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
    )


def profiles_from_list(
    spec: str,
    workers: int,
    models: Mapping[str, ModelSpec] | None = None,
    flag: str = "--jobs",
) -> list[Profile]:
    """Profiles of a comma-separated model list, MODEL or MODEL:WORKERS each.

    A model named twice gets `#2`, `#3`... after its name:

    >>> [(p.name, p.workers) for p in profiles_from_list("vgg16,resnet50:2,vgg16", 4)]
    [('vgg16', 4), ('resnet50', 2), ('vgg16#2', 4)]
    """
    profiles = []
    seen: dict[str, int] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        model, _, count = item.partition(":")
        try:
            n = int(count) if count else workers
        except ValueError:
            raise UserInputError(
                f"{flag} entry '{item[:40]}': workers after ':' must be an integer"
            ) from None
        if not 1 <= n <= FIELD_MAXIMA["ref_workers"]:
            raise UserInputError(
                f"{flag} entry '{item[:40]}': workers must be in 1..{FIELD_MAXIMA['ref_workers']:g}"
            )
        prof = build_profile(model, n, models=models)
        seen[prof.name] = seen.get(prof.name, 0) + 1
        name = prof.name if seen[prof.name] == 1 else f"{prof.name}#{seen[prof.name]}"
        profiles.append(replace(prof, name=name))
    if not profiles:
        raise UserInputError(f"{flag} names no model")
    return profiles


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
    phases = _merge([*profile.phases, pad])
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
