"""The job-class entries: which class each job gets and what the two tables hold."""

from __future__ import annotations

import pytest

from controlplane.entries import TableEntry
from controlplane.job_classes import (
    JOB_CLASSES,
    JobSockets,
    assign_job_classes,
    class_names,
    job_class_entries,
)
from controlplane.p4names import JOB_COUNTERS
from topologies.errors import UserInputError


def test_entries_of_two_jobs_written_out_by_hand(index):
    jobs = [
        JobSockets("resnet50-0", (("10.0.0.1", 47000), ("10.0.0.2", 47001))),
        JobSockets("vgg16-1", (("10.0.0.1", 47002),)),  # shares server 10.0.0.1
    ]
    dst, src, act = (
        "CassiniEgress.job_by_dst",
        "CassiniEgress.job_by_src",
        "CassiniEgress.set_job_class",
    )
    a1, a2 = 0x0A000001, 0x0A000002
    assert job_class_entries(jobs) == [
        TableEntry(dst, {"dst_addr": a1, "dst_port": 47000}, act, {"job_class": 1}),
        TableEntry(src, {"src_addr": a1, "src_port": 47000}, act, {"job_class": 1}),
        TableEntry(dst, {"dst_addr": a2, "dst_port": 47001}, act, {"job_class": 1}),
        TableEntry(src, {"src_addr": a2, "src_port": 47001}, act, {"job_class": 1}),
        TableEntry(dst, {"dst_addr": a1, "dst_port": 47002}, act, {"job_class": 2}),
        TableEntry(src, {"src_addr": a1, "src_port": 47002}, act, {"job_class": 2}),
    ]
    # They encode against the P4Info (names, widths).
    for entry in job_class_entries(jobs):
        assert entry.to_proto(index).table_id in (
            index.table("job_by_dst").id,
            index.table("job_by_src").id,
        )


def test_class_count_matches_the_p4info(index):
    width = index.action("set_job_class").param("job_class").bitwidth
    assert 2**width == JOB_CLASSES
    for name in JOB_COUNTERS:
        assert index.counter(name).size == 512 * JOB_CLASSES


def test_classes_and_names():
    classes = assign_job_classes(["a", "b"])
    assert classes == {"a": 1, "b": 2}
    assert class_names(classes)[:4] == ["other", "a", "b", "other"]


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([JobSockets(f"j{i}", ()) for i in range(16)], "16 jobs at once"),
        ([JobSockets("a", ()), JobSockets("a", ())], "job 'a' is listed twice"),
        ([JobSockets("other", ())], "may not be named 'other'"),
        ([JobSockets("a", (("10.0.0.300", 1),))], "'10.0.0.300' is not an IPv4 address"),
        ([JobSockets("a", (("10.0.0.1", 0),))], "port 0 is not"),
        (
            [JobSockets("a", (("10.0.0.1", 47000),)), JobSockets("b", (("10.0.0.1", 47000),))],
            "jobs 'a' and 'b' both listen on 10.0.0.1:47000",
        ),
    ],
)
def test_bad_job_lists_are_one_line(jobs, message):
    with pytest.raises(UserInputError, match=message):
        job_class_entries(jobs)
