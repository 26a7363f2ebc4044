"""The cores a run counts on: CPU affinity within a container's CPU quota (cgroup v1 and v2),
and TVM's kernel threads kept within it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tune_orchestrator import host


def cgroup(root: Path, membership: str, files: dict[str, str]) -> Path:
    """A cgroup mount under `root` holding `files` (path -> text); /proc/self/cgroup as
    `membership`; returns the membership file."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = root.parent / "cgroup"
    proc.write_text(membership)
    return proc


def test_a_pod_limited_to_two_cpus_counts_two_on_cgroup_v2(tmp_path):
    root = tmp_path / "fs"
    # In a container the mount's root is the pod's own group, whatever the path says.
    proc = cgroup(root, "0::/kubepods/pod1/abc\n", {"cpu.max": "200000 100000\n"})
    assert host.cgroup_cpus(root, proc) == 2


def test_the_lowest_quota_along_the_hierarchy_holds_and_a_fraction_rounds_down(tmp_path):
    root = tmp_path / "fs"
    proc = cgroup(
        root,
        "0::/batch/job\n",
        {
            "cpu.max": "max 100000\n",
            "batch/cpu.max": "150000 100000\n",  # 1.5 CPUs: a second thread is throttled
            "batch/job/cpu.max": "800000 100000\n",
        },
    )
    assert host.cgroup_cpus(root, proc) == 1


def test_cgroup_v1_reads_the_cpu_controllers_mount(tmp_path):
    root = tmp_path / "fs"
    files = {
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "400000\n",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
    }
    proc = cgroup(root, "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n", files)
    assert host.cgroup_cpus(root, proc) == 4


@pytest.mark.parametrize(
    "membership, files",
    [
        ("0::/\n", {"cpu.max": "max 100000\n"}),  # no quota
        ("0::/\n", {}),  # no cpu controller enabled here
        ("4:cpu,cpuacct:/\n", {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n"}),
        ("0::/\n", {"cpu.max": "garbage\n"}),
        ("not a membership line\n", {}),
    ],
)
def test_no_quota_or_none_readable_limits_nothing(tmp_path, membership, files):
    root = tmp_path / "fs"
    root.mkdir()
    assert host.cgroup_cpus(root, cgroup(root, membership, files)) is None


def test_without_proc_there_is_no_limit(tmp_path):
    assert host.cgroup_cpus(tmp_path, tmp_path / "missing") is None


def test_host_cores_is_affinity_within_the_quota(monkeypatch):
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(host, "cgroup_cpus", lambda: 2)
    assert host.host_cores() == 2
    monkeypatch.setattr(host, "cgroup_cpus", lambda: None)
    assert host.host_cores() == 64
    monkeypatch.setattr(host, "cgroup_cpus", lambda: 128)
    assert host.host_cores() == 64


def test_tvm_runs_kernels_on_no_more_threads_than_the_quota(monkeypatch):
    """TVM's runtime would take half the node's 64 CPUs on x86-64: 32 threads on 2 CPUs."""
    monkeypatch.setattr(host.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(host, "cgroup_cpus", lambda: 2)
    env: dict[str, str] = {}
    assert host.limit_tvm_threads(env) == 2 and env == {"TVM_NUM_THREADS": "2"}
    for users in ({"TVM_NUM_THREADS": "8"}, {"OMP_NUM_THREADS": "8"}):
        assert host.limit_tvm_threads(dict(users)) is None  # the user's choice stands
    monkeypatch.setattr(host, "cgroup_cpus", lambda: 40)  # TVM's 32 fit: left alone
    env = {}
    assert host.limit_tvm_threads(env) is None and env == {}
    monkeypatch.setattr(host, "cgroup_cpus", lambda: None)
    assert host.limit_tvm_threads(env) is None and env == {}
    # A cpuset of 4 (taskset, Kubernetes' static CPU manager): TVM counts the node's CPUs.
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert host.limit_tvm_threads(env) == 4 and env == {"TVM_NUM_THREADS": "4"}


def test_the_caveat_of_a_small_host_says_how_many_threads_the_kernels_run_on():
    from tune_orchestrator.run.measuring import cpu_caveat

    assert cpu_caveat(2, 1).startswith("this host has 2 cores and the kernels run on 1 of them: ")
    assert cpu_caveat(1, 1).startswith("this host has 1 core and the kernels run on all of them")
    assert cpu_caveat(8, 4) is None


def test_tvm_threads_are_the_users_else_tvms_own_count(monkeypatch):
    monkeypatch.setattr(host.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    assert host.tvm_threads({}) == 1  # TVM halves the online CPUs on x86-64
    assert host.tvm_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert host.tvm_threads({"TVM_NUM_THREADS": "2", "OMP_NUM_THREADS": "3"}) == 2
    monkeypatch.setattr(host.platform, "machine", lambda: "aarch64")
    assert host.tvm_threads({}) == 2


def test_cores_tvm_leaves_idle_are_named_only_where_the_cpu_has_no_hyper_threads(
    tmp_path, monkeypatch
):
    smt = tmp_path / "active"
    monkeypatch.setattr(host, "host_cores", lambda: 2)
    monkeypatch.setattr(host.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(host.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    smt.write_text("0\n")
    assert host.idle_cores(smt) == (
        "TVM's runtime runs each kernel on 1 of the 2 cores here: it halves the online CPUs on "
        "x86-64, for hyper-threads this CPU does not have; with TVM_NUM_THREADS=2 set for the "
        "run and where model.so runs, kernels use them all"
    )
    smt.write_text("1\n")  # hyper-threads: TVM's halving is meant for them
    assert host.idle_cores(smt) is None
    assert host.idle_cores(tmp_path / "unknown") is None
    monkeypatch.setenv("TVM_NUM_THREADS", "1")  # the user chose
    assert host.idle_cores(smt) is None


def test_an_omp_num_threads_set_for_other_libraries_is_named_where_it_idles_cores(
    tmp_path, monkeypatch
):
    """Container images often set OMP_NUM_THREADS=1; TVM reads it too."""
    monkeypatch.setattr(host, "host_cores", lambda: 8)
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    said = host.idle_cores(tmp_path / "unknown")
    assert said is not None and said.startswith(
        "OMP_NUM_THREADS=1 has TVM's runtime run each kernel on 1 of the 8 cores here "
    )
    assert said.endswith(
        "with TVM_NUM_THREADS=8 set for the run and where model.so runs, kernels use them all"
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert host.idle_cores(tmp_path / "unknown") is None


def test_a_pod_without_a_cpu_limit_starts_no_more_build_workers_than_its_memory_holds(tmp_path):
    """A 64-core node, a 4 GiB pod, no CPU limit: 64 workers of a few hundred MB each were
    started, past what the pod's memory limit lets live (the kernel's OOM killer ends the run,
    and its resume, with SIGKILL)."""
    root = tmp_path / "fs"
    proc = cgroup(root, "0::/kubepods/pod1\n", {"memory.max": f"{4 << 30}\n", "cpu.max": "max"})
    limit = host.memory_limit(root, proc)
    assert limit == 4 << 30 and host.cgroup_cpus(root, proc) is None
    assert host.workers_that_fit(64, limit) == 4  # 2 GiB kept for the run, 512 MiB a worker
    assert host.workers_that_fit(2, limit) == 2
    assert host.workers_that_fit(64, 1 << 30) == 1  # always one


def test_memory_limits_in_cgroup_v1_and_none(tmp_path):
    root = tmp_path / "fs"
    files = {
        "memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
        "memory/job/memory.limit_in_bytes": f"{8 << 30}\n",
    }
    proc = cgroup(root, "7:memory:/job\n", files)
    assert host.memory_limit(root, proc) == 8 << 30
    (root / "memory/job/memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert host.memory_limit(root, proc) is None


def test_without_a_memory_limit_every_core_gets_a_worker(monkeypatch):
    monkeypatch.setattr(host, "memory_limit", lambda: None)
    assert host.workers_that_fit(64) == 64


def test_the_temporary_folder_needs_room_for_twice_the_models_weights(tmp_path, monkeypatch):
    import shutil
    import tempfile

    from onnx import numpy_helper

    import onnx_models
    from tune_orchestrator.errors import InputError
    from tune_orchestrator.model.loading import load_model

    model = load_model(onnx_models.tiny_cnn(tmp_path / "tiny.onnx"))
    floats = sum(numpy_helper.to_array(t).size for t in model.proto.graph.initializer)
    assert model.weight_bytes() == 4 * floats  # float32 weights
    free = {"bytes": 0}
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real = shutil.disk_usage
    monkeypatch.setattr(
        host.shutil, "disk_usage", lambda path: real(path)._replace(free=free["bytes"])
    )
    weights = 100 << 20
    free["bytes"] = (32 << 20) + 2 * weights
    host.check_temp_room(weights)
    free["bytes"] -= 1
    with pytest.raises(InputError, match=r"has 232 MiB free and the run writes up to ~232 MiB"):
        host.check_temp_room(weights)
