"""The real agent as a benchmark peer: `otel-ebpf run` with a generated config in a work
folder, optionally pinned to a CPU, waited for until ready, stopped with SIGINT (its flush
and exit summary), plus the /proc readings the benches take of it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 60.0
READY_LINE = "otel-ebpf ready"


def proc_cpu_s(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def proc_status_kib(pid: int, key: str) -> int:
    """A kB figure of /proc/PID/status (VmRSS, VmHWM), 0 when the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class AgentProcess:
    """`otel-ebpf run -c <workdir>/agent.yaml` (config_yaml written there), its stderr in
    <workdir>/agent.err; on `cpu`, under taskset (which execs: the pid is the agent's)."""

    def __init__(self, workdir: Path, config_yaml: str, cpu: int | str | None = None,
                 stop_timeout_s: float = 60.0) -> None:
        self.err_path = workdir / "agent.err"
        self.stop_timeout_s = stop_timeout_s
        self.exit_code: int | None = None
        cfg = workdir / "agent.yaml"
        cfg.write_text(config_yaml)
        cmd = [str(VENV_BIN / "otel-ebpf"), "run", "-c", str(cfg)]
        if cpu is not None:
            cmd = ["taskset", "-c", str(cpu), *cmd]
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=workdir)
        self.pid = self.proc.pid
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE not in self.stderr:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"agent did not start (exit {self.proc.returncode}):\n"
                                   f"{self.stderr[-2000:]}")
            time.sleep(0.1)

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def rss_kib(self) -> int:
        return proc_status_kib(self.pid, "VmRSS")

    def hwm_kib(self) -> int:
        return proc_status_kib(self.pid, "VmHWM")

    def stop(self) -> int | None:
        """SIGINT (the agent flushes and prints its totals), SIGKILL after the timeout."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.exit_code = self.proc.returncode
        return self.exit_code

    def summary(self) -> dict[str, int]:
        """otel_ebpf.* totals from the exit summary table on stderr."""
        return {m[1]: int(m[2]) for m in
                re.finditer(r"otel_ebpf\.([a-z_.]+)\s*\S\s*(\d+)", self.stderr)}


@contextlib.contextmanager
def agent_tree(tree: Path):
    """The agent started inside imports otel_ebpf from `tree` and loads its BPF objects
    (PYTHONPATH comes before the venv's editable install of whichever checkout made it)."""
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "OTEL_EBPF_BPF_DIR")}
    os.environ["PYTHONPATH"] = str(tree)
    os.environ["OTEL_EBPF_BPF_DIR"] = str(tree / "bpf" / "build")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
