"""Communication profiles of training jobs: model data in, `Profile` out.

A profile is the demand of one worker's traffic over one iteration, as
`(duration_ms, gbps)` phases. Model figures are data (`data/models.yaml`);
this module only derives phases from them, so users can replace the figures
(`load_models(path)` merges a user file over the built-in one) or skip the
derivation entirely with measured profiles (`profile_files.load_profiles_file`).

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
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from scheduler.workloads.buckets import Layer, ddp_timeline, ring_bytes, timeline_phases
from scheduler.workloads.types import Phase, Profile
from topologies.datafile import parse_data, read_data_file
from topologies.errors import UserInputError, did_you_mean
from topologies.names import check_name, shown

PARALLELISMS = ("data", "pipeline", "tensor", "hybrid")
COLLECTIVES = ("allreduce", "alltoall", "p2p")
BYTES_PER_PARAM = 4  # fp32 gradients
PRECISIONS = {"fp32": 4, "fp16": 2}
# How a data-parallel iteration is modelled: "ddp", PyTorch DDP's buckets all-reduced
# during the backward pass (`buckets.py`, the testbed's setup), or "sequential-fp32",
# the whole forward and backward pass first and then one AllReduce of fp32 gradients
# (this harness's first model, kept so a user can see what the overlap changes).
JOBS_MODELS = ("ddp", "sequential-fp32")
# The testbed chose batch sizes that keep the GPU over 80% busy (section 5).
GPU_BUSY_GOAL = 0.8


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
    # Data parallel: the gradients' bytes per parameter (fp32: 4, fp16: 2), the layer
    # table DDP fills its buckets from (`data/layers.yaml`; None: one tensor of
    # params_m), the largest per-GPU batch that fits the GPU's memory (0: unknown), and
    # the job model the profile is derived with (`JOBS_MODELS`).
    gradient_bytes: int = 4
    layers: tuple[Layer, ...] | None = None
    max_batch: int = 0
    jobs_model: str = "ddp"
    # Profiles measured on the fabric, by worker count (`profile_files.with_measured_profiles`):
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
    "gflops": 1e7,  # forward GFLOPs per sample of one layer (a GPT-3 layer at 2048 tokens: ~7,500)
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
    return _typed(
        entry[field_name], kind, f"{where}: model '{key}' field '{field_name}'", field_name
    )


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
    unknown = {str(k)[:40] for k in raw} - {
        "compute",
        "send_mb",
        "collective",
        "kind",
        "rate",
        "overlap",
    }
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
    precision = _field(entry, key, "gradients", str, where, default="fp32")
    if precision not in PRECISIONS:
        raise UserInputError(
            f"{where}: model '{key}' field 'gradients': "
            + did_you_mean(precision, PRECISIONS, "precision")
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
        gradient_bytes=PRECISIONS[precision],
        layers=_parse_layers(entry["layers"], f"{where}: model '{key}' field 'layers'")
        if "layers" in entry
        else None,
        max_batch=_field(entry, key, "max_batch", int, where, default=0),
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


def _parse_layers(raw: Any, ctx: str) -> tuple[Layer, ...]:
    """A layer table: [name, params in millions, forward GFLOPs per sample] rows, in
    forward order (`data/layers.yaml`)."""
    if not isinstance(raw, list) or not raw:
        raise UserInputError(f"{ctx} must be a non-empty list of [name, params_m, gflops]")
    rows = []
    for i, row in enumerate(raw):
        ok = isinstance(row, list | tuple) and len(row) == 3 and isinstance(row[0], str)
        if ok:
            params = _typed(row[1], float, f"{ctx}[{i}] params_m", "params_m")
            gflops = _typed(row[2], float, f"{ctx}[{i}] gflops", "gflops")
            ok = params >= 0 and gflops >= 0
        if not ok:
            raise UserInputError(
                f"{ctx}[{i}] must be [name, params_m >= 0, gflops >= 0], got {shown(row)}"
            )
        rows.append(Layer(row[0], params * 1e6, gflops))
    if sum(r.params for r in rows) <= 0:
        raise UserInputError(f"{ctx} holds no parameters")
    return tuple(rows)


@cache
def _builtin_layers() -> Mapping[str, tuple[Layer, ...]]:
    """The built-in layer tables (`data/layers.yaml`), by model: parsed once per process
    (the file ships with the package and never changes; parsing it took most of each
    `load_models` call)."""
    text = resources.files("scheduler").joinpath("data/layers.yaml").read_text()
    doc = parse_data(text, "yaml", "layers.yaml")
    return MappingProxyType({
        normalize_model_name(str(k)): _parse_layers(v["layers"], f"layers.yaml: model '{k}'")
        for k, v in doc["models"].items()
    })  # fmt: skip


def _with_layers(spec: ModelSpec, tables: Mapping[str, tuple[Layer, ...]]) -> ModelSpec:
    """`spec` with the built-in layer table of its model when it has none, scaled to its
    params_m (our choice: a models file that changes a model's size keeps its shape)."""
    table = tables.get(spec.key)
    if spec.layers is not None or table is None:
        return spec
    factor = spec.params_m * 1e6 / sum(r.params for r in table)
    return replace(spec, layers=tuple(replace(r, params=r.params * factor) for r in table))


def _models_from_doc(doc: Any, where: str) -> dict[str, ModelSpec]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("models"), Mapping):
        raise UserInputError(f"{where}: expected a top-level 'models:' mapping")
    models = {}
    for k, v in doc["models"].items():
        key = check_name(normalize_model_name(str(k)), "model name", f"{where}: models")
        models[key] = _parse_model(key, v, where)
    return models


def load_models(path: str | Path | None = None, jobs_model: str = "ddp") -> dict[str, ModelSpec]:
    """The built-in models, with a user file's entries added or replacing them, each to
    be derived with `jobs_model` (`JOBS_MODELS`)."""
    if jobs_model not in JOBS_MODELS:
        raise UserInputError("--jobs-model: " + did_you_mean(jobs_model, JOBS_MODELS, "jobs model"))
    builtin = resources.files("scheduler").joinpath("data/models.yaml").read_text()
    models = _models_from_doc(parse_data(builtin, "yaml", "models.yaml"), "models.yaml")
    if path is not None:
        models.update(_models_from_doc(read_data_file(path, "models"), str(path)))
    tables = _builtin_layers()
    return {k: replace(_with_layers(v, tables), jobs_model=jobs_model) for k, v in models.items()}


def model_names(models: Mapping[str, ModelSpec] | None = None) -> list[str]:
    return sorted(models if models is not None else load_models())


def allreduce_bytes_per_worker(params: float, workers: int) -> float:
    """Ring AllReduce: every worker sends 2(N-1)/N x S bytes, S = params x 4 (fp32)."""
    return ring_bytes(params * BYTES_PER_PARAM, workers)


def _collective_factor(collective: str, workers: int) -> float:
    if collective == "allreduce":
        return 2.0 * (workers - 1) / workers
    if collective == "alltoall":
        return (workers - 1) / workers
    return 1.0


def _transfer_ms(num_bytes: float, gbps: float) -> float:
    return num_bytes * 8.0 / (gbps * 1e9) * 1e3


def merge_phases(phases: list[Phase]) -> tuple[Phase, ...]:
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
    >>> [(round(ph.duration_ms, 1), ph.gbps) for ph in p.phases]  # DDP: three bursts
    [(100.1, 0.0), (125.5, 50.0), (1.6, 0.0), (6.8, 50.0), (66.1, 0.0), (0.5, 50.0)]
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
    compute = spec.compute_ms * ratio
    if par != "data":
        compute *= spec.ref_workers / workers
    if workers == 1:
        phases = [Phase(compute, 0.0)]
    elif par == "data" and spec.jobs_model == "sequential-fp32":
        up = _transfer_ms(allreduce_bytes_per_worker(spec.params_m * 1e6, workers), nic_gbps)
        phases = [Phase(compute, 0.0), Phase(up, nic_gbps)]
    elif par == "data":
        layers = spec.layers or (Layer(key, spec.params_m * 1e6, 1.0),)
        timeline = ddp_timeline(layers, compute, workers, nic_gbps, spec.gradient_bytes)
        phases = list(timeline_phases(timeline, nic_gbps))
    else:
        assert spec.structures is not None
        phases = _model_parallel_phases(spec, spec.structures[par], workers, ratio, nic_gbps)
    merged = merge_phases(phases)
    return Profile(
        name=key,
        model=key,
        parallelism=par,
        workers=workers,
        iteration_ms=sum(p.duration_ms for p in merged),
        phases=merged,
        batch_size=batch,
        compute_ms=compute,
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
