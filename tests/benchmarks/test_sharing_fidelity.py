"""`benchmarks/sharing_fidelity.py` re-plans a run from its summary.json: the settings
must be the run's, the generated trace's job count included (summary.json lists the
jobs; the setting is their number). No fabric."""

from __future__ import annotations

from tests.helpers.benchmark_scripts import load_benchmark

fidelity = load_benchmark("sharing_fidelity")


def _summary(jobs: list[dict[str, object]] | None) -> dict[str, object]:
    settings: dict[str, object] = {
        "topology": "leaf-spine:4:1:3", "trace": "snapshot (jobs=6, seed=21)",
        "trace_spec": "snapshot", "schedulers": ["themis"], "seed": 21, "iterations": 30,
        "scale": 0.001,
    }  # fmt: skip
    if jobs is not None:
        settings["jobs"] = jobs
    return {"settings": settings}


def test_a_generated_trace_is_replanned_with_the_runs_job_count() -> None:
    jobs = [{"name": f"j{i}", "model": "vgg19", "workers": 2} for i in range(6)]
    settings = fidelity.settings_of(_summary(jobs), None, "model.json")
    assert settings.jobs == 6 and settings.trace == "snapshot" and settings.seed == 21
    assert settings.sharing == "model.json" and settings.schedulers == ("themis",)


def test_a_summary_without_jobs_keeps_the_default_count() -> None:
    from emulation.emulate.runner import EmulateSettings

    assert fidelity.settings_of(_summary(None), None, None).jobs == EmulateSettings.jobs
