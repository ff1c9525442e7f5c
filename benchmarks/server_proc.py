"""A Harmony server as a child process on a given port and state directory, for benchmarks
that restart it (``kill -9``) on the same store, and the facts a result file records."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import urllib3

from benchmarks.machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]


class ServerChild:
    """``python -m harmony_server --port P --state-dir D``; :meth:`start` waits for /healthz."""

    def __init__(self, state: Path, port: int) -> None:
        self.state, self.port = state, port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pool = urllib3.HTTPConnectionPool("127.0.0.1", port, retries=False)

    def start(self, timeout: float = 180.0) -> float:
        """Start the server and wait until it answers; the seconds that took."""
        started = time.monotonic()
        env = {**os.environ, "HARMONY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "harmony_server", "--port",
                                      str(self.port), "--state-dir", str(self.state)], cwd=ROOT,
                                     env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            try:
                if self.pool.request("GET", "/healthz", timeout=2.0).status == 200:
                    return time.monotonic() - started
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the server on port {self.port} did not answer within {timeout} s")

    def kill9(self) -> None:
        """SIGKILL, as the OOM killer or a power cut would end it."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def internal_errors(self) -> float:
        """``harmony_server_errors_total{kind="internal"}`` (500s the server logged)."""
        text = self.pool.request("GET", "/metrics", timeout=10.0).data.decode()
        found = re.search(r'harmony_server_errors_total\{kind="internal"\} ([0-9.e+]+)', text)
        return float(found.group(1)) if found else 0.0


def machine() -> dict[str, object]:
    """The machine facts every result file carries: CPU, cores and the load average."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True,
                                     check=False).stdout.strip()}
