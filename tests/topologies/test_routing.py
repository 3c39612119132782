"""Deterministic shortest-path routing, ECMP spreading and job link sets."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import permutations

import pytest

from scheduler.workloads.traffic import JobRouter as Router
from topologies.errors import UserInputError
from topologies.generators import cassini_testbed, cassini_testbed_2gpu, fat_tree, leaf_spine


@pytest.fixture(scope="module")
def router() -> Router:
    return Router(cassini_testbed())


def test_paths_are_shortest_and_well_formed(router: Router) -> None:
    assert router.path("s01", "s01") == ("s01",)
    assert router.path("s01", "s02") == ("s01", "tor1", "s02")
    same_pod = router.path("s01", "s05")
    assert len(same_pod) == 5 and same_pod[1] == "tor1" and same_pod[3] == "tor2"
    assert same_pod[2] in ("agg1", "agg2")
    cross = router.path("s01", "s13")
    assert len(cross) == 7 and cross[1] == "tor1" and cross[5] == "tor4"
    assert cross[2] in ("agg1", "agg2") and cross[3].startswith("core")
    assert cross[4] in ("agg3", "agg4")
    topo = router.topology
    cables = {frozenset((ln.a, ln.b)) for ln in topo.links}
    for src, dst in permutations(topo.server_names(), 2):
        path = router.path(src, dst)
        assert path[0] == src and path[-1] == dst
        assert len(set(path)) == len(path)
        assert all(frozenset(hop) in cables for hop in router.path_links(path))
        assert path in router.paths(src, dst)


def test_ecmp_path_sets(router: Router) -> None:
    assert len(router.paths("s01", "s02")) == 1
    assert len(router.paths("s01", "s05")) == 2  # two aggs
    assert len(router.paths("s01", "s13")) == 2 * 3 * 2  # agg x core x agg
    ft = Router(fat_tree(4))
    assert len(ft.paths("s01", "s16")) == 4
    assert len(ft.paths("s01", "s03")) == 2


def test_ecmp_spreads_flows_by_flow_key(router: Router) -> None:
    chosen = {router.path("s01", "s13", f"flow{i}") for i in range(64)}
    assert len(chosen) >= 6
    assert chosen <= set(router.paths("s01", "s13"))
    ls = Router(leaf_spine(4, 8, 4))
    spines = {ls.path("s01", "s16", str(i))[2] for i in range(64)}
    assert len(spines) >= 6
    # different sources spread over the uplinks even with the empty flow key
    uplinks = {router.path(src, "s13")[2] for src in ("s01", "s02", "s03", "s04")}
    assert uplinks == {"agg1", "agg2"}


def test_routing_is_deterministic_within_and_across_processes(router: Router) -> None:
    pairs = [("s01", "s13", ""), ("s02", "s20", "jobA"), ("s07", "s24", "x"), ("s03", "s06", "k")]
    here = [list(router.path(*p)) for p in pairs]
    assert here == [list(Router(cassini_testbed()).path(*p)) for p in pairs]
    code = (
        "import json, sys\n"
        "from topologies.generators import cassini_testbed\n"
        "from topologies.routing import Router\n"
        "r = Router(cassini_testbed())\n"
        "print(json.dumps([list(r.path(*p)) for p in json.loads(sys.argv[1])]))\n"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(pairs)],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout
        assert json.loads(out) == here


def test_job_links_ring_across_two_tors(router: Router) -> None:
    servers = ["s01", "s02", "s05", "s06"]
    assert router.job_flows(servers, "data", "j1") == (
        ("s01", "s02"),
        ("s02", "s05"),
        ("s05", "s06"),
        ("s06", "s01"),
    )
    links = router.job_links(servers, "data", "j1")
    nic = {("s01", "tor1"), ("tor1", "s02"), ("s02", "tor1"), ("tor2", "s05")}
    nic |= {("s05", "tor2"), ("tor2", "s06"), ("s06", "tor2"), ("tor1", "s01")}
    assert nic <= links
    up_1 = [lk for lk in links if lk[0] == "tor1" and lk[1].startswith("agg")]
    up_2 = [lk for lk in links if lk[0] == "tor2" and lk[1].startswith("agg")]
    assert len(up_1) == 1 and len(up_2) == 1  # one flow leaves each rack
    down_1 = [lk for lk in links if lk[1] == "tor1" and lk[0].startswith("agg")]
    down_2 = [lk for lk in links if lk[1] == "tor2" and lk[0].startswith("agg")]
    assert len(down_1) == 1 and len(down_2) == 1
    assert not any(lk[0].startswith("core") or lk[1].startswith("core") for lk in links)
    assert len(links) == 12
    expected = set()
    for src, dst in router.job_flows(servers, "data", "j1"):
        expected |= set(router.path_links(router.path(src, dst)))
    assert links == frozenset(expected)


def test_job_links_edge_cases(router: Router) -> None:
    assert router.job_links(["s01"], "data", "j") == frozenset()
    assert router.job_links(["s01", "s01", "s01"], "data", "j") == frozenset()
    # two workers on one server share it: the ring is over distinct servers
    two = router.job_flows(["s01", "s01", "s02", "s02"], "data", "j")
    assert two == (("s01", "s02"), ("s02", "s01"))
    assert router.job_links(["s01", "s02"], "tensor", "j") == frozenset(
        {("s01", "tor1"), ("tor1", "s02"), ("s02", "tor1"), ("tor1", "s01")}
    )


def test_pipeline_pattern(router: Router) -> None:
    flows = router.job_flows(["s01", "s05", "s13"], "pipeline", "p")
    assert set(flows) == {
        ("s01", "s05"),
        ("s05", "s01"),
        ("s05", "s13"),
        ("s13", "s05"),
        ("s13", "s01"),
    }
    assert len(flows) == len(set(flows))
    assert router.job_flows(["s01", "s05", "s13"], "hybrid", "h") == (
        ("s01", "s05"),
        ("s05", "s13"),
        ("s13", "s01"),
    )


def test_per_job_ecmp_changes_paths_by_job() -> None:
    r = Router(cassini_testbed(), per_job_ecmp=True)
    servers = ["s01", "s13", "s05", "s17"]
    sets = {r.job_links(servers, "data", f"job{i}") for i in range(16)}
    assert len(sets) > 1
    assert Router(cassini_testbed()).job_links(servers, "data", "a") == Router(
        cassini_testbed()
    ).job_links(servers, "data", "b")


def test_unknown_names(router: Router) -> None:
    with pytest.raises(UserInputError, match=r"no server named 's99'"):
        router.path("s01", "s99")
    with pytest.raises(UserInputError, match=r"no server named 's1'"):
        router.job_links(["s1", "s02"], "data", "j")
    with pytest.raises(UserInputError, match=r"no parallelism named 'dat'. Did you mean 'data'"):
        router.job_flows(["s01", "s02"], "dat", "j")


def test_router_on_two_gpu_variant_and_large_leaf_spine() -> None:
    r = Router(cassini_testbed_2gpu())
    assert len(r.paths("s01", "s03")) == 2
    big = Router(leaf_spine(16, 8, 16))
    names = big.topology.server_names()
    assert len(names) == 256
    for dst in names[::17]:
        assert len(big.path(names[0], dst)) in (1, 3, 5)
    assert len(big.paths(names[0], names[-1])) == 8


def test_bounded_caches_do_not_change_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    import topologies.routing as routing

    reference = Router(cassini_testbed())
    monkeypatch.setattr(routing, "CACHE_LIMIT", 3)
    small = Router(cassini_testbed())
    for i in range(40):
        key = f"f{i}"
        assert small.path("s01", "s20", key) == reference.path("s01", "s20", key)
        servers = ["s01", f"s{(i % 22) + 2:02d}", "s24"]
        assert small.job_links(servers, "data", key) == reference.job_links(servers, "data", key)
    assert len(small._path) <= 3 and len(small._job) <= 3
