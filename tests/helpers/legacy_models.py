"""The models as the harness derived them before DDP's buckets (issue 39), pinned for tests.

Tests of a mechanism (delay scheduling's timers, NAGS's groups, holding a grid, a
pair's stretch) were computed by hand on these profiles: compute, then one fp32
AllReduce at line rate, at the earlier batch sizes. Pinning them keeps those
cases true when the built-in figures are recalibrated; tests of the job model
itself use the built-in models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from types import MappingProxyType

import yaml

from scheduler.baselines.base import ProfileBook
from scheduler.workloads.profiles import ModelSpec, load_models

# model -> (batch size, compute ms) before issue 39; XLM was 270M parameters.
EARLIER_XLM_PARAMS_M = 270.0
EARLIER = {
    "vgg11": (64, 70.0),
    "vgg16": (64, 100.0),
    "vgg19": (64, 115.0),
    "resnet50": (64, 75.0),
    "wideresnet101": (32, 130.0),
    "bert": (32, 90.0),
    "roberta": (32, 95.0),
    "xlm": (16, 110.0),
    "camembert": (32, 90.0),
    "gpt1": (16, 95.0),
}


@cache
def legacy_models() -> Mapping[str, ModelSpec]:
    """The built-in models with the earlier data-parallel figures, derived sequentially
    (read-only: one copy is shared by every test that asks)."""
    models = load_models(jobs_model="sequential-fp32")
    for key, (batch, compute) in EARLIER.items():
        models[key] = replace(models[key], batch_size=batch, compute_ms=compute)
    models["xlm"] = replace(models["xlm"], params_m=EARLIER_XLM_PARAMS_M)
    return MappingProxyType(models)


def legacy_book() -> ProfileBook:
    """A fresh profile book over `legacy_models` (books cache what they build)."""
    return ProfileBook(legacy_models())


def legacy_cli_args(folder: Path) -> list[str]:
    """The command-line flags that make a command derive `legacy_models`: a models file
    (written into `folder`) with the earlier figures, and the sequential job model."""
    path = folder / "earlier-models.yaml"
    models = load_models()
    doc: dict[str, dict[str, object]] = {"models": {}}
    for key, (batch, compute) in EARLIER.items():
        spec = models[key]
        doc["models"][key] = {
            "display": spec.display,
            "params_m": EARLIER_XLM_PARAMS_M if key == "xlm" else spec.params_m,
            "parallelism": spec.parallelism,
            "batch_size": batch,
            "compute_ms": compute,
        }
    path.write_text(yaml.safe_dump(doc))
    return ["--models", str(path), "--jobs-model", "sequential-fp32"]
