"""The sharing model: loaded from `cassini profile --sharing-out`, applied by the fluid simulator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scheduler.simulator import SimSettings, simulate
from scheduler.simulator.results import SimResult
from scheduler.workloads.sharing_model import (
    IDENTITY,
    SharingModel,
    load_sharing_model,
    model_from_dict,
)
from scheduler.workloads.traces import TraceJob
from tests.helpers.schedulers import FixedScheduler
from tests.scheduler.simulator.test_simulator import HALF, FixedBook
from topologies.errors import UserInputError
from topologies.generators import leaf_spine


def _row(active: int, samples: int, util: float, fair: float = 0.95) -> dict[str, float]:
    return {"active": active, "samples": samples, "utilisation": util, "fairness": fair}


def _doc() -> dict[str, object]:
    # two runs (k = 2 and k = 3 jobs on the link), as write_sharing_model lays them out
    return {
        "model": "vgg19",
        "link": "tor1->agg1",
        "runs": [
            {"jobs": 2, "by_active": [_row(1, 50, 0.78, 1.0), _row(2, 100, 0.92, 0.97)]},
            {"jobs": 3, "by_active": [_row(2, 300, 0.84, 0.95), _row(3, 100, 1.2, 0.94)]},
        ],
    }


def test_factors_are_sample_weighted_means_capped_at_one() -> None:
    model = model_from_dict(_doc(), "f.json")
    # two Up: (100 x 0.92 + 300 x 0.84) / 400 = 0.86; three Up: 1.2 capped at 1
    assert model.factors == (0.86, 1.0)
    assert model.fairness == (pytest.approx((100 * 0.97 + 300 * 0.95) / 400), 0.94)
    assert [model.factor(n) for n in (0, 1, 2, 3, 9)] == [1.0, 1.0, 0.86, 1.0, 1.0]
    assert model.table().tolist() == [1.0, 1.0, 0.86, 1.0]
    assert model.lowest() == 0.86 and not model.identity


def test_a_missing_count_carries_the_smaller_ones_factor() -> None:
    doc = {"runs": [{"by_active": [_row(2, 10, 0.9), _row(4, 10, 0.8)]}]}
    assert model_from_dict(doc, "f").factors == (0.9, 0.9, 0.8)


def test_identity_is_ideal_max_min() -> None:
    assert IDENTITY.identity and IDENTITY.table().tolist() == [1.0]
    assert SharingModel((1.0, 1.0)).table().tolist() == [1.0]
    assert load_sharing_model(None) is IDENTITY
    with pytest.raises(ValueError, match="outside"):
        SharingModel((0.0,))


def test_loads_the_file_profile_writes(tmp_path: Path) -> None:
    from emulation.profile.sharing import ShareFigures, SharingRun, write_sharing_model

    runs = [
        SharingRun(2, "tor1->agg1", (ShareFigures(1, 5, 0.8, 1.0), ShareFigures(2, 20, 0.9, 0.97)),
                   {"a": 130.0, "b": 140.0}, 1.4),
        SharingRun(3, "tor1->agg1", (ShareFigures(2, 20, 0.8, 0.95), ShareFigures(3, 10, 0.95, 0.93)),
                   {"a": 200.0, "b": 230.0, "c": 220.0}, 2.3),
    ]  # fmt: skip
    path = write_sharing_model(tmp_path / "sharing.json", "vgg19", runs)
    model = load_sharing_model(path)
    assert model.factors == (0.85, 0.95)
    assert "vgg19" in model.source


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("{", "invalid JSON"),
        ("[]", "'runs'"),
        ('{"runs": []}', "'runs'"),
        ('{"runs": [{"by_active": 3}]}', "'runs[0].by_active'"),
        ('{"runs": [{"by_active": [{"active": 2}]}]}', "'runs[0].by_active[0].samples'"),
        (
            '{"runs": [{"by_active": [{"active": 2, "samples": 1, "utilisation": "x", '
            '"fairness": 1}]}]}',
            "'runs[0].by_active[0].utilisation'",
        ),
        ('{"runs": [{"by_active": [{"active": 1, "samples": 1, "utilisation": 0.9, '
         '"fairness": 1}]}]}', "two or more jobs"),
    ],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_file_and_field(
    tmp_path: Path, text: str, field: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserInputError) as err:
        load_sharing_model(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and field in message
    with pytest.raises(UserInputError, match="missing.json"):
        load_sharing_model(tmp_path / "missing.json")


def _two_jobs(sharing: SharingModel, fast: bool = True) -> SimResult:
    # both jobs' rings cross leaf1 <-> spine1 <-> leaf2 (50 Gbps); each job
    # computes 100 ms, then sends 100 ms at 50 Gbps
    topo = leaf_spine(2, 1, 2)
    trace = [TraceJob("a", "vgg16", 2, 50), TraceJob("b", "vgg16", 2, 50)]
    sched = FixedScheduler({"a": ("s01", "s03"), "b": ("s02", "s04")})
    settings = SimSettings(fast_forward=fast)
    return simulate(trace, topo, sched, settings, book=FixedBook(HALF), sharing=sharing)


@pytest.mark.parametrize("fast", [True, False])
def test_two_jobs_on_a_50_gbit_link_at_factor_point_9_get_22_5_each(fast: bool) -> None:
    # factor(2) = 0.9: the link offers 45 Gbps, 22.5 each; 100 ms x 50 Gbps =
    # 5,000 Mbit takes 5000 / 22.5 = 222.2 ms, after 100 ms of compute
    res = _two_jobs(SharingModel((0.9,)), fast)
    for job in res.jobs:
        assert job.iteration_ms == pytest.approx(np.full(50, 100.0 + 5000.0 / 22.5))
    # ideal max-min: 25 each, 300 ms
    for job in _two_jobs(IDENTITY, fast).jobs:
        assert job.iteration_ms == pytest.approx(np.full(50, 300.0))


def test_a_job_alone_keeps_its_profile() -> None:
    topo = leaf_spine(2, 1, 2)
    sched = FixedScheduler({"a": ("s01", "s03")})
    res = simulate(
        [TraceJob("a", "vgg16", 2, 20)], topo, sched, SimSettings(), book=FixedBook(HALF),
        sharing=SharingModel((0.5,)),
    )  # fmt: skip
    assert res.jobs[0].iteration_ms == pytest.approx(np.full(20, 200.0))


def test_incremental_solving_with_sharing_equals_full_resolve(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The factor changes only with the jobs sending on a link, so only on links
    # a changed flow crosses: the incremental solver must agree with
    # re-solving every flow at every event, and the model must change the run.
    import scheduler.simulator.component as sim
    from scheduler.baselines import make_scheduler
    from scheduler.workloads.traces import poisson_trace

    topo = leaf_spine(4, 2, 2)
    trace = poisson_trace(12, topo.total_gpus(), 0.9, 3)
    settings = SimSettings(fast_forward=False, seed=3)
    model = SharingModel((0.9, 0.85, 0.8))

    def run(sharing: SharingModel) -> SimResult:
        sched = make_scheduler("random", topo, seed=3)
        return simulate(trace, topo, sched, settings, sharing=sharing)

    fast = run(model)
    plain = run(IDENTITY)
    monkeypatch.setattr(sim.Component, "always_full", True)
    full = run(model)
    ideal_full = run(IDENTITY)
    assert fast.events > 100
    for f, p in zip(fast.jobs, full.jobs, strict=True):
        assert len(f.iteration_ms) == len(p.iteration_ms)
        assert f.iteration_ms.mean() == pytest.approx(p.iteration_ms.mean(), rel=1e-6)
        assert f.finish_s == pytest.approx(p.finish_s, rel=1e-6)
    for a, b in zip(plain.jobs, ideal_full.jobs, strict=True):
        assert a.iteration_ms.mean() == pytest.approx(b.iteration_ms.mean(), rel=1e-6)
    slower = [
        f.iteration_ms.mean() / p.iteration_ms.mean()
        for f, p in zip(fast.jobs, plain.jobs, strict=True)
    ]
    assert max(slower) > 1.01 and min(slower) > 1 - 1e-9


def test_identity_model_is_byte_identical_to_no_model() -> None:
    from scheduler.baselines import make_scheduler
    from scheduler.workloads.traces import poisson_trace

    topo = leaf_spine(4, 2, 2)
    trace = poisson_trace(12, topo.total_gpus(), 0.9, 5)
    plain = simulate(trace, topo, make_scheduler("themis", topo, seed=5), SimSettings(seed=5))
    ident = simulate(
        trace, topo, make_scheduler("themis", topo, seed=5), SimSettings(seed=5),
        sharing=SharingModel((1.0, 1.0)),
    )  # fmt: skip
    for a, b in zip(plain.jobs, ident.jobs, strict=True):
        assert np.array_equal(a.iteration_end_ms, b.iteration_end_ms)
        assert a.marked_mbit == b.marked_mbit


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("é".encode("latin-1") + b'{"runs": []}', "not UTF-8 text"),
        ('{"runs": []}'.encode("utf-16"), "UTF-16"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
    ids=["latin-1", "utf-16", "nested"],
)
def test_an_unreadable_sharing_file_is_one_line_naming_it(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "sharing.json"
    path.write_bytes(content)
    with pytest.raises(UserInputError) as err:
        load_sharing_model(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and says in message


def test_a_sharing_file_past_the_input_limit_is_refused_unread(tmp_path: Path) -> None:
    from topologies.datafile import MAX_FILE_BYTES

    path = tmp_path / "huge.json"
    with path.open("wb") as fh:  # sparse: no disk used
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(UserInputError, match=r"huge.json: larger than 64 MiB"):
        load_sharing_model(path)


def _one_row(**over: object) -> dict[str, object]:
    row: dict[str, object] = dict(_row(2, 10, 0.9)) | over
    return {"runs": [{"by_active": [row]}]}


@pytest.mark.parametrize(
    ("row", "field", "bound"),
    [
        ({"active": 3e6}, "active", "1024"),
        ({"active": 10**400}, "active", "1024"),
        ({"samples": 10**400}, "samples", "1e+09"),
        ({"samples": 1e308}, "samples", "1e+09"),
        ({"utilisation": 1e308}, "utilisation", "100"),
    ],
    ids=["active-3e6", "active-400-digits", "samples-400-digits", "samples-1e308",
         "utilisation-1e308"],
)  # fmt: skip
def test_values_that_size_the_model_are_bounded(
    row: dict[str, object], field: str, bound: str
) -> None:
    """An `active` of 3e6 built a 3-million-entry table (2.2 GB, a 113 MB summary); two
    `samples: 1e308` summed to inf and gave a NaN factor; 400 digits overflowed a float."""
    with pytest.raises(UserInputError) as err:
        model_from_dict(_one_row(**row), "sharing model s.json")
    message = str(err.value)
    assert message.startswith("sharing model s.json: field 'runs[0].by_active[0]")
    assert f".{field}'" in message and bound in message and "\n" not in message
    assert len(message) < 300


def test_two_huge_sample_counts_are_refused_not_a_nan_factor() -> None:
    doc = {"runs": [{"by_active": [_row(2, 1e308, 0.9), _row(2, 1e308, 0.7)]}]}  # type: ignore[arg-type]
    with pytest.raises(UserInputError, match=r"by_active\[0\]\.samples' must be .* 1e\+09"):
        model_from_dict(doc, "s")
    at_bound = {"runs": [{"by_active": [_row(2, 10**9, 0.9), _row(2, 10**9, 0.7)]}]}
    assert model_from_dict(at_bound, "s").factors == (0.8,)
