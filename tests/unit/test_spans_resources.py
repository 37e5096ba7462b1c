"""ProcessResources: resource attributes of a process from a fixture /proc tree."""

import os
from pathlib import Path

import pytest

from otel_ebpf import __version__
from otel_ebpf.spans.resources import (
    ProcessResources,
    container_id,
    parse_resource_attributes,
    python_service_name,
)

CID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"


def make_proc(
    root: Path,
    pid: int,
    args: list[str],
    *,
    exe: str | None = None,
    environ: dict[str, str] | None = None,
    cgroup: str = "0::/user.slice\n",
    comm: str = "",
    start: int = 4242,
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    comm = comm or os.path.basename(args[0])[:15]
    # field 22 (starttime) is the 20th field after the closing parenthesis of comm
    rest = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 30
    (d / "stat").write_text(f"{pid} ({comm}) {' '.join(rest)}\n")
    (d / "comm").write_text(comm + "\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in args))
    env = {"PATH": "/usr/bin", **(environ or {})}
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    (d / "cgroup").write_text(cgroup)
    if (d / "exe").is_symlink():
        (d / "exe").unlink()
    if exe:
        (d / "exe").symlink_to(exe)  # readlink needs no target


@pytest.fixture
def proc(tmp_path):
    return tmp_path / "proc"


def test_otel_service_name_from_environ_wins(proc):
    make_proc(
        proc,
        10,
        ["/venv/bin/python", "-m", "uvicorn", "app:app"],
        exe="/usr/bin/python3.11",
        environ={
            "OTEL_SERVICE_NAME": "checkout",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=ignored,deployment.environment.name=prod,team=a%2Cb",
        },
    )
    attrs = ProcessResources(proc_root=str(proc)).get(10, "python")
    assert attrs["service.name"] == "checkout"
    assert attrs["deployment.environment.name"] == "prod"
    assert attrs["team"] == "a,b"  # percent-decoded


def test_resource_attributes_service_name_beats_derived(proc):
    make_proc(
        proc, 11, ["/usr/bin/nginx"], exe="/usr/sbin/nginx",
        environ={"OTEL_RESOURCE_ATTRIBUTES": "service.name=edge"},
    )
    assert ProcessResources(proc_root=str(proc)).get(11)["service.name"] == "edge"


def test_python_module(proc):
    make_proc(proc, 12, ["python3", "-u", "-m", "vllm.entrypoints.openai.api_server"], exe="/usr/bin/python3.12")
    assert ProcessResources(proc_root=str(proc)).get(12)["service.name"] == "vllm.entrypoints.openai.api_server"


def test_python_script_through_shebang(proc):
    # a console script run directly: the kernel turns it into `python /venv/bin/uvicorn ...`
    make_proc(proc, 13, ["/venv/bin/python", "/venv/bin/uvicorn", "app:app"], exe="/usr/bin/python3.11")
    attrs = ProcessResources(proc_root=str(proc)).get(13)
    assert attrs["service.name"] == "uvicorn"
    assert attrs["process.executable.name"] == "python3.11"
    assert attrs["process.executable.path"] == "/usr/bin/python3.11"
    assert "process.command_args" not in attrs  # opt-in: the executable and service name say who
    on = ProcessResources(proc_root=str(proc), command_args=True).get(13)
    assert on["process.command_args"] == ["/venv/bin/python", "/venv/bin/uvicorn", "app:app"]


def test_command_args_opt_in_and_redacted(proc):
    make_proc(proc, 30, ["curl", "-H", "Authorization: Bearer tok123", "http://127.0.0.1:1/"],
              exe="/usr/bin/curl")
    assert "process.command_args" not in ProcessResources(proc_root=str(proc)).get(30)
    attrs = ProcessResources(proc_root=str(proc), command_args=True).get(30)
    assert attrs["process.command_args"] == [
        "curl", "-H", "Authorization: REDACTED", "http://127.0.0.1:1/"]


def test_python_script_with_py_suffix(proc):
    make_proc(proc, 14, ["python", "-X", "dev", "/srv/rag_server.py", "--port", "8000"], exe="/usr/bin/python3.11")
    assert ProcessResources(proc_root=str(proc)).get(14)["service.name"] == "rag_server"


def test_python_dash_c_falls_back_to_comm(proc):
    make_proc(proc, 15, ["python3", "-c", "import x"], exe="/usr/bin/python3.11", comm="python3")
    assert ProcessResources(proc_root=str(proc)).get(15)["service.name"] == "python3"


def test_plain_binary_uses_executable_basename(proc):
    # argv[0] rewritten by the process (nginx's title): the executable is the truth
    make_proc(proc, 16, ["nginx: worker process"], exe="/usr/sbin/nginx", comm="nginx")
    attrs = ProcessResources(proc_root=str(proc)).get(16)
    assert attrs["service.name"] == "nginx"
    assert attrs["process.pid"] == 16
    assert attrs["telemetry.distro.name"] == "otel-ebpf"
    assert attrs["telemetry.distro.version"] == __version__
    assert attrs["host.name"]


def test_unreadable_exe_uses_argv0(proc):
    make_proc(proc, 17, ["/opt/qdrant/qdrant", "--config", "x"], exe=None)
    attrs = ProcessResources(proc_root=str(proc)).get(17)
    assert attrs["service.name"] == "qdrant"
    assert "process.executable.path" not in attrs


def test_comm_with_spaces_and_parens_in_stat(proc):
    make_proc(proc, 18, ["/bin/weird"], exe="/bin/weird", comm="a) (b c", start=777)
    res = ProcessResources(proc_root=str(proc))
    assert res._start_time(18) == 777


def test_vanished_process_unknown(proc):
    attrs = ProcessResources(proc_root=str(proc)).get(99, "curl")
    assert attrs["service.name"] == "curl"
    assert attrs["process.pid"] == 99
    assert attrs["host.name"]


def test_vanished_process_keeps_primed_attributes(proc):
    make_proc(proc, 20, ["/usr/bin/curl", "http://x"], exe="/usr/bin/curl")
    res = ProcessResources(proc_root=str(proc))
    res.prime(20)
    for name in ("stat", "cmdline", "environ", "cgroup", "comm", "exe"):
        (proc / "20" / name).unlink()
    attrs = res.get(20, "curl")
    assert attrs["process.executable.path"] == "/usr/bin/curl"


def test_pid_reuse_gets_fresh_attributes(proc):
    make_proc(proc, 21, ["/usr/bin/first"], exe="/usr/bin/first", start=100)
    res = ProcessResources(proc_root=str(proc))
    assert res.get(21)["service.name"] == "first"
    make_proc(proc, 21, ["/usr/bin/second"], exe="/usr/bin/second", start=200)
    assert res.get(21)["service.name"] == "second"


def test_cache_is_bounded_lru(proc):
    for pid in range(30, 36):
        make_proc(proc, pid, [f"/bin/p{pid}"], exe=f"/bin/p{pid}")
    res = ProcessResources(proc_root=str(proc), max_entries=4)
    for pid in range(30, 36):
        res.get(pid)
    assert len(res._cache) == 4
    assert {key[0] for key in res._cache} == {32, 33, 34, 35}
    assert set(res._latest) == {32, 33, 34, 35}


def test_cached_answer_does_not_reread(proc):
    make_proc(proc, 40, ["/bin/a"], exe="/bin/a")
    res = ProcessResources(proc_root=str(proc))
    first = res.get(40)
    (proc / "40" / "cmdline").write_bytes(b"/bin/changed\0")  # same start time: same process
    assert res.get(40) is first


def test_zombie_is_not_cached(proc):
    make_proc(proc, 41, ["x"], exe=None, comm="dying")
    (proc / "41" / "cmdline").write_bytes(b"")
    res = ProcessResources(proc_root=str(proc))
    assert res.get(41)["service.name"] == "dying"
    assert not res._cache


def test_container_id_attribute(proc):
    make_proc(proc, 50, ["/app"], exe="/app", cgroup=f"0::/system.slice/docker-{CID}.scope\n")
    assert ProcessResources(proc_root=str(proc)).get(50)["container.id"] == CID


@pytest.mark.parametrize(
    "cgroup",
    [
        # docker, cgroup v1
        f"12:memory:/docker/{CID}\n11:cpu,cpuacct:/docker/{CID}\n0::/system.slice/containerd.service\n",
        # docker, cgroup v2 with the systemd driver
        f"0::/system.slice/docker-{CID}.scope\n",
        # docker, cgroup v2 with the cgroupfs driver
        f"0::/docker/{CID}\n",
        # kubernetes + containerd, cgroup v1 (cgroupfs)
        f"4:memory:/kubepods/burstable/pod7f1e2d3c-aaaa-bbbb-cccc-0123456789ab/{CID}\n",
        # kubernetes + containerd, cgroup v2 (systemd)
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod7f1e2d3c_aaaa_bbbb_cccc_0123456789ab.slice/cri-containerd-{CID}.scope\n",
        # cri-o
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podabc.slice/crio-{CID}.scope\n",
        # podman rootful, cgroup v2
        f"0::/machine.slice/libpod-{CID}.scope/container\n",
        # podman rootless, cgroup v2
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container\n",
        # podman, cgroup v1
        f"10:memory:/machine.slice/libpod-{CID}.scope\n",
    ],
)
def test_container_id_formats(cgroup):
    assert container_id(cgroup) == CID


@pytest.mark.parametrize(
    "cgroup",
    [
        "0::/\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "4:memory:/process_api/20364af7f0d2accb140cfa29883b40b3\n",  # 32 hex is no container
        "0::/kubepods.slice/kubepods-pod7f1e2d3c_aaaa_bbbb_cccc_0123456789ab.slice\n",
        f"0::/docker/{CID}ab\n",  # 66 hex: not an ID
        "",
    ],
)
def test_no_container_id(cgroup):
    assert container_id(cgroup) is None


@pytest.mark.parametrize(
    "args, expected",
    [
        (["python", "-m", "uvicorn", "app:app"], "uvicorn"),
        (["python", "-mhttp.server"], "http.server"),
        (["python", "-uBm", "pkg.mod"], "pkg.mod"),
        (["python", "-W", "ignore", "-X", "dev", "serve.py"], "serve"),
        (["python", "-Wignore", "serve.py"], "serve"),
        (["python", "--check-hash-based-pycs", "never", "a.py"], "a"),
        (["python", "--", "/x/b.py", "-m", "nope"], "b"),
        (["python", "-c", "print()"], None),
        (["python", "-"], None),
        (["python"], None),
    ],
)
def test_python_service_name(args, expected):
    assert python_service_name(args) == expected


def test_parse_resource_attributes():
    assert parse_resource_attributes(" a = 1 ,b=x%20y,bad,=v,c=") == {"a": "1", "b": "x y", "c": ""}


def test_real_proc_self_never_raises():
    attrs = ProcessResources().get(os.getpid(), "pytest")
    assert attrs["process.pid"] == os.getpid()
    assert attrs["service.name"]
