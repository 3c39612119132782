"""The emulator's cost model and the largest S, against hand-computed cases."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from emulation.capacity import calibration as cal
from emulation.capacity.model import (
    HEADROOM,
    CostConstants,
    Load,
    fill_jobs,
    largest_scale,
    load_of,
    mean_gbps,
    predict,
)
from emulation.emulate.fidelity import FidelityLimits
from emulation.fabric.scaling import MTU_FRAME_BYTES
from scheduler.workloads.types import Phase, Profile
from topologies.errors import UserInputError
from topologies.library import load_topology

FRAME_BITS = 8 * MTU_FRAME_BYTES


def _constants(**over: Any) -> CostConstants:
    base: dict[str, Any] = dict(
        switch_base_cores=0.1,
        switch_cores_per_kpps=0.02,
        replica_base_cores=0.01,
        replica_cores_per_gbps=2.0,
        harness_cores=0.1,
        cores=2,
    )
    return CostConstants(**(base | over))


def _profile(workers: int, up_gbps: float = 40.0, parallelism: str = "data") -> Profile:
    # 25% of the iteration at up_gbps: a mean of up_gbps / 4 per worker
    return Profile("j", "m", parallelism, workers, 100.0, (Phase(75.0, 0.0), Phase(25.0, up_gbps)))


def test_mean_gbps_is_the_iteration_average() -> None:
    assert mean_gbps(_profile(2)) == pytest.approx(10.0)


def test_load_counts_one_pass_per_switch_on_the_path() -> None:
    # leaf-spine:2:1:2: s01, s02 under leaf1; s03, s04 under leaf2
    topo = load_topology("leaf-spine:2:1:2")
    same_leaf = load_of(topo, [(["s01", "s02"], _profile(2))])
    # two flows (s01->s02, s02->s01) of 10 Gbit/s, each through leaf1 only
    assert same_leaf.gbps == pytest.approx(20.0)
    assert same_leaf.passes_per_s == pytest.approx(2 * 10e9 / FRAME_BITS * 1)
    assert same_leaf.replicas == 2
    across = load_of(topo, [(["s01", "s03"], _profile(2))])
    # leaf1 -> spine1 -> leaf2: three passes each way
    assert across.passes_per_s == pytest.approx(2 * 10e9 / FRAME_BITS * 3)
    ring = load_of(topo, [(["s01", "s02", "s03", "s04"], _profile(4))])
    # s01->s02 (1), s02->s03 (3), s03->s04 (1), s04->s01 (3)
    assert ring.passes_per_s == pytest.approx(10e9 / FRAME_BITS * 8)
    assert ring.gbps == pytest.approx(40.0)


def test_pipeline_splits_a_workers_demand_over_its_flows() -> None:
    topo = load_topology("leaf-spine:2:1:2")
    # pipeline on 3 servers: flows 1->2, 2->1, 2->3, 3->2, 3->1; every share is 1/2
    load = load_of(topo, [(["s01", "s02", "s03"], _profile(3, parallelism="pipeline"))])
    assert load.gbps == pytest.approx(5 * 10.0 / 2)


def test_prediction_is_the_linear_model() -> None:
    pred = predict(_constants(), Load(passes_per_s=10_000.0, gbps=0.5, replicas=4))
    assert pred.switch_cores == pytest.approx(0.1 + 0.02 * 10)
    assert pred.replica_cores == pytest.approx(4 * 0.01 + 2.0 * 0.5)
    assert pred.machine_cores == pytest.approx(0.3 + 1.04 + 0.1)


def test_largest_scale_bound_by_the_switch() -> None:
    # switch: 0.1 + 0.02 * 4000 * S <= 0.9 * 0.8 -> S = 0.62 / 80 = 0.00775
    # machine: 0.24 + 120 * S <= 0.95 * 2 * 0.8 = 1.52 -> S = 0.01067
    choice = largest_scale(_constants(), Load(4e6, 20.0, 4))
    assert choice.bound_by == "switch CPU"
    assert choice.scale == pytest.approx(0.0077)  # 0.00775 rounded down to 2 digits
    assert choice.prediction is not None
    assert choice.prediction.switch_cores <= HEADROOM * FidelityLimits().switch_cpu
    assert "S = 0.0077" in choice.reason and "switch CPU" in choice.reason


def test_largest_scale_bound_by_the_machine_when_replicas_are_dear() -> None:
    # replicas 20 cores per Gbit/s: machine 0.24 + (80 + 400) S <= 1.52 -> S = 0.0026667
    c = _constants(replica_cores_per_gbps=20.0)
    choice = largest_scale(c, Load(4e6, 20.0, 4))
    assert choice.bound_by == "machine CPU"
    assert choice.scale == pytest.approx(0.0026)


def test_others_work_takes_from_the_machine_limit() -> None:
    c = _constants(replica_cores_per_gbps=20.0)
    # 1.52 - 0.5 = 1.02 left: (1.02 - 0.24) / 480 = 0.001625
    choice = largest_scale(c, Load(4e6, 20.0, 4), background_cores=0.5)
    assert choice.scale == pytest.approx(0.0016)
    assert choice.limits["background_cores"] == 0.5


def test_headroom_and_limits_are_parameters() -> None:
    lim = FidelityLimits(switch_cpu=0.5)
    # (0.5 - 0.1) / 80 = 0.005 at headroom 1
    choice = largest_scale(_constants(), Load(4e6, 20.0, 4), headroom=1.0, limits=lim)
    assert choice.scale == pytest.approx(0.005)


def test_a_light_load_is_capped_at_one() -> None:
    choice = largest_scale(_constants(), Load(1.0, 1e-6, 1))
    assert choice.scale == 1.0 and choice.bound_by == "S <= 1"


def test_no_scale_fits_when_the_idle_cost_is_past_the_limit() -> None:
    choice = largest_scale(_constants(switch_base_cores=0.8), Load(4e6, 20.0, 4))
    assert choice.scale is None and choice.bound_by == "switch CPU"
    assert "no S fits" in choice.reason


def test_more_servers_mean_a_smaller_scale() -> None:
    c = _constants()
    scales = []
    for name in ("leaf-spine:4:2:8", "leaf-spine:8:4:16"):
        topo = load_topology(name)
        jobs = fill_jobs(topo)
        assert sum(len(s) for s, _ in jobs) == len(topo.servers)  # every server a replica
        s = largest_scale(c, load_of(topo, jobs)).scale
        assert s is not None
        scales.append(s)
    assert scales[1] < scales[0]


def test_fit_recovers_the_constants_of_exact_points() -> None:
    points = [
        {"passes_per_s": k, "gbps": g, "replicas": 4, "switch_cores": 0.2 + 0.03 * k / 1e3,
         "replica_cores": 0.08 + 1.5 * g, "background_cores": 0.3,
         "machine_cores": 0.3 + 0.2 + 0.03 * k / 1e3 + 0.08 + 1.5 * g + 0.05}
        for k, g in ((5000.0, 0.03), (10000.0, 0.06), (20000.0, 0.12))
    ]  # fmt: skip
    c = cal.constants_from_points(points, 2, {"cpu_model": "x"})
    assert c.switch_base_cores == pytest.approx(0.2, abs=1e-6)
    assert c.switch_cores_per_kpps == pytest.approx(0.03, abs=1e-6)
    assert c.replica_base_cores == pytest.approx(0.02, abs=1e-6)  # 0.08 over 4 replicas
    assert c.replica_cores_per_gbps == pytest.approx(1.5, abs=1e-5)
    assert c.harness_cores == pytest.approx(0.05, abs=1e-6)


def test_cache_is_per_machine_and_round_trips(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    a = cal.cache_path({"cpu_model": "A", "cores": "2"}, env)
    b = cal.cache_path({"cpu_model": "B", "cores": "2"}, env)
    assert a != b and a.parent == tmp_path / "cassini"
    c = _constants()
    cal.save(c, a)
    assert cal.load_cached(a) == c
    assert cal.load_cached(b) is None
    a.write_text("{not json")  # refused, naming it, not silently measured again
    with pytest.raises(UserInputError, match=r"^calibration cache .*: invalid JSON.*--recalibrate"):
        cal.load_cached(a)


def test_calibrate_measures_every_scale_and_fits() -> None:
    seen: list[float] = []

    def fake(scale: float, iterations: int) -> dict[str, Any]:
        seen.append(scale)
        k = 9000.0 * scale / 0.001
        g = 0.05 * scale / 0.001
        return {"passes_per_s": k, "gbps": g, "replicas": 4, "cores": 2,
                "switch_cores": 0.1 + 0.04 * k / 1e3, "replica_cores": 2.0 * g,
                "machine_cores": 0.1 + 0.04 * k / 1e3 + 2.0 * g + 0.1}  # fmt: skip

    c = cal.calibrate(scales=(0.0005, 0.001, 0.002), say=None, measure=fake,
                      background=lambda: 0.0, cores=2, clock=lambda: 86400.0)  # fmt: skip
    assert seen == [0.0005, 0.001, 0.002]
    assert c.taken_at == "1970-01-02T00:00:00Z"
    assert c.switch_cores_per_kpps == pytest.approx(0.04, abs=1e-6)
    assert c.replica_cores_per_gbps == pytest.approx(2.0, abs=1e-5)
    assert c.cores == 2 and len(c.points) == 3
    json.dumps(c.as_dict())  # what the cache and summary.json hold
    assert math.isclose(c.harness_cores, 0.1, abs_tol=1e-6)


def test_peak_passes_cap_each_link_at_its_capacity() -> None:
    topo = load_topology("leaf-spine:2:1:2")  # every link 50 Gbit/s
    # two rings crossing the spine, each worker at 40 Gbit/s in its Up phase:
    # into a switch, 4 host links x 40 + leaf->spine and spine->leaf, 2 x 40 each
    # capped at 50, four of them: 160 + 200 Gbit/s
    load = load_of(topo, [(["s01", "s03"], _profile(2)), (["s02", "s04"], _profile(2))])
    assert load.peak_passes_per_s == pytest.approx(360e9 / FRAME_BITS)
    assert load.passes_per_s == pytest.approx(4 * 10e9 * 3 / FRAME_BITS)


def test_largest_scale_bound_by_the_switchs_bursts() -> None:
    # mean: 0.1 + 0.02 * 1000 * S <= 0.72 -> S = 0.031
    # bursts: 0.1 + 0.02 * 30000 * S <= 0.8 (a whole core x headroom) -> S = 0.0011667
    choice = largest_scale(_constants(), Load(1e6, 0.001, 1, peak_passes_per_s=30e6))
    assert choice.bound_by == "switch bursts"
    assert choice.scale == pytest.approx(0.0011)
    assert choice.limits["switch_burst_cores"] == pytest.approx(0.8)


# A calibration like one measured on a quieter machine: the polling switch loop's CPU
# flat at 0.62-0.66 of a core from 6,700 to 21,800 passes/s, lateness within the limits.
_FLAT_POINTS = (
    {"passes_per_s": 6719.0, "switch_cores": 0.65, "late_frame_fraction": 0.0006,
     "late_loop_fraction": 0.0},
    {"passes_per_s": 11970.0, "switch_cores": 0.655, "late_frame_fraction": 0.0003,
     "late_loop_fraction": 0.0},
    {"passes_per_s": 21794.0, "switch_cores": 0.615, "late_frame_fraction": 0.0002,
     "late_loop_fraction": 0.001},
)  # fmt: skip


def _flat(slope: float = 0.0, points: tuple[dict[str, float], ...] = _FLAT_POINTS) -> CostConstants:
    return _constants(
        switch_base_cores=0.67, switch_cores_per_kpps=slope, replica_base_cores=0.045,
        replica_cores_per_gbps=0.09, harness_cores=0.0, points=points,
    )  # fmt: skip


@pytest.mark.parametrize("slope", [0.0, -0.002])
def test_a_flat_switch_cpu_is_bounded_by_lateness_one_step_past_the_top_point(
    slope: float,
) -> None:
    # Charged as before, the flat line's 0.67 plus 24 replicas x 0.045 = 1.75 cores with
    # no traffic, past 0.8 x 0.95 x 2 = 1.52: "no S fits". Now the switch's CPU prices
    # nothing; its lateness passed at every point, so it may carry one step (x2) past the
    # top point: 43,588 passes/s, S = 43,588 / 1e7 = 0.0043588 -> 0.0043. The machine
    # alone would allow (1.52 - 1.08) / (0.09 x 100) = 0.049.
    choice = largest_scale(_flat(slope), Load(1e7, 100.0, 24))
    assert choice.scale == pytest.approx(0.0043)
    assert choice.bound_by == "switch lateness"
    assert choice.limits["switch_lateness_passes_per_s"] == pytest.approx(43588.0)
    assert choice.prediction is not None
    assert choice.prediction.switch_cores == 0.0
    assert choice.prediction.machine_cores == pytest.approx(24 * 0.045 + 0.09 * 100 * 0.0043)
    assert "polling loop" in choice.reason and "no S fits" not in choice.reason


def test_a_flat_switch_cpu_leaves_the_machine_to_bind_a_light_switch_load() -> None:
    # few passes: lateness allows 43,588 / 1e5 = 0.44; the machine (1.52 - 1.08) / 9 = 0.049
    choice = largest_scale(_flat(), Load(1e5, 100.0, 24))
    assert choice.bound_by == "machine CPU"
    assert choice.scale == pytest.approx(0.048)


def test_a_flat_switch_cpu_without_lateness_figures_stops_at_the_top_point() -> None:
    bare = tuple({"passes_per_s": p["passes_per_s"]} for p in _FLAT_POINTS)
    choice = largest_scale(_flat(points=bare), Load(1e7, 100.0, 24))
    assert choice.bound_by == "switch lateness"
    assert choice.scale == pytest.approx(0.0021)  # 21,794 / 1e7, no extrapolation


@pytest.mark.parametrize("field", ["late_frame_fraction", "late_loop_fraction"])
def test_lateness_past_its_limit_at_the_top_point_bounds_s_below_it(field: str) -> None:
    failed = (*_FLAT_POINTS[:2], _FLAT_POINTS[2] | {field: 0.02})  # limits are 1%
    choice = largest_scale(_flat(points=failed), Load(1e7, 100.0, 24))
    assert choice.bound_by == "switch lateness"
    assert choice.scale == pytest.approx(0.0011)  # 11,970 / 1e7 = 0.001197, no extrapolation
    assert choice.scale is not None and choice.scale < 21794.0 / 1e7


def test_lateness_past_its_limit_caps_a_positive_slope_below_the_failed_point() -> None:
    # The CPU model alone says 0.01 (see test_largest_scale_bound_by_the_switch); the
    # switch was late at 40,000 passes/s, so 20,000 / 4e6 = 0.005.
    points = (
        {"passes_per_s": 1e4, "late_frame_fraction": 0.0},
        {"passes_per_s": 2e4, "late_frame_fraction": 0.001},
        {"passes_per_s": 4e4, "late_frame_fraction": 0.05},
    )
    choice = largest_scale(_constants(points=points), Load(4e6, 20.0, 4))
    assert choice.bound_by == "switch lateness"
    assert choice.scale == pytest.approx(0.005)


def test_lateness_at_every_point_past_its_limit_fits_no_s() -> None:
    failed = tuple(p | {"late_frame_fraction": 0.5} for p in _FLAT_POINTS)
    choice = largest_scale(_flat(points=failed), Load(1e7, 100.0, 24))
    assert choice.scale is None and choice.bound_by == "switch lateness"
    assert "lateness" in choice.reason


def test_a_positive_slope_within_its_lateness_limits_is_unchanged() -> None:
    # the module's example: switch CPU binds at (0.72 - 0.1) / (0.02 x 4000) -> 0.0077 at
    # the default headroom; lateness within limits at points far below adds no ceiling
    points = tuple(dict(p) for p in _FLAT_POINTS)
    with_points = largest_scale(_constants(points=points), Load(4e6, 20.0, 4))
    without = largest_scale(_constants(), Load(4e6, 20.0, 4))
    assert with_points.scale == without.scale == pytest.approx(0.0077)
    assert with_points.bound_by == without.bound_by == "switch CPU"
    assert "switch_lateness_passes_per_s" not in with_points.limits


def test_a_flat_switch_cpu_still_refuses_replicas_past_the_machine() -> None:
    # 64 replicas x 0.045 = 2.88 cores idle, past 1.52: the machine refuses, not the switch
    choice = largest_scale(_flat(), Load(1e7, 100.0, 64))
    assert choice.scale is None and choice.bound_by == "machine CPU"
    assert "2.88 cores" in choice.reason and "polling CPU not priced" in choice.reason
