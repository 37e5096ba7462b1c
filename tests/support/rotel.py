"""Test helpers shared by unit and kernel tests: a real OTLP receiver
(rotel's collector binary from PyPI) whose debug output the tests read."""

import os
import socket
import subprocess
import time

from tests.support.ports import free_port  # noqa: F401 (its users import it from here too)

# rotel is a declared test dependency (pyproject's `test` extra, installed by `make
# install`): without it the tests that need a real OTLP receiver fail, never skip
try:
    import rotel
except ImportError as exc:
    raise ImportError("the rotel package (an OTLP receiver for the tests) is missing: "
                      "run `make install`, or `.venv/bin/pip install -e '.[test]'`") from exc
ROTEL_AGENT = os.path.join(os.path.dirname(rotel.__file__), "rotel-agent")
if not os.access(ROTEL_AGENT, os.X_OK):
    raise ImportError(f"rotel's collector binary {ROTEL_AGENT} is missing or not executable: "
                      "reinstall rotel (`make install`)")

START_TIMEOUT_S = 15.0
SEEN_TIMEOUT_S = 20.0


def wait_listening(port: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rotel exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"rotel not listening on {port}")


class Rotel:
    """`grpc_port`/`http_port` given: listen there (a receiver restarted on its old ports);
    its output is appended to tmp_path/rotel.out across restarts."""

    def __init__(self, tmp_path, grpc_port: int | None = None, http_port: int | None = None):
        self.grpc_port, self.http_port = grpc_port or free_port(), http_port or free_port()
        self.out = tmp_path / "rotel.out"
        self._out_file = open(self.out, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                ROTEL_AGENT, "start",
                "--otlp-grpc-endpoint", f"127.0.0.1:{self.grpc_port}",
                "--otlp-http-endpoint", f"127.0.0.1:{self.http_port}",
                "--exporter", "blackhole",
                "--debug-log", "traces", "--debug-log", "metrics",
                "--debug-log-verbosity", "detailed",
                "--batch-timeout", "50ms",
                # its own files, so parallel runs never share the default /tmp/rotel-agent.pid
                "--pid-file", str(tmp_path / "rotel.pid"),
                "--log-file", str(tmp_path / "rotel.log"),
            ],
            stdout=self._out_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            wait_listening(self.grpc_port, self.proc, deadline)
            wait_listening(self.http_port, self.proc, deadline)
        except Exception:
            self.stop()
            raise

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, *needles: str) -> str:
        deadline = time.monotonic() + SEEN_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.output()
            if all(n in text for n in needles):
                return text
            time.sleep(0.1)
        missing = [n for n in needles if n not in self.output()]
        raise AssertionError(f"rotel never printed {missing}; it printed:\n{self.output()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._out_file.close()


