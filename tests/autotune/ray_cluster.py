"""A real Ray cluster of several nodes on 127.0.0.1 for tests: each node a `ray start --block`
in its own session (process group) with its own --temp-dir and free ports.

    cluster = RayCluster(tmp_path, resources={"tir-device:KEY": 1})
    cluster.add_node(resources=...)          # a second node joins
    cluster.kill_node(1)                     # SIGKILL to its process group: the node dies
    cluster.stop()

`ray stop` would end every Ray process of this user on the machine (other sessions' too),
so a node is stopped by killing its own process group, then any process still naming its
temp dir on its command line (workers the raylet started), by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

RAY = Path(sys.executable).with_name("ray")
START_TIMEOUT_S = 60.0
# A killed node is declared dead after ~2 s (Ray's defaults: 3 s x 5 missed checks, more under
# load), so the builds and runs it took are re-queued within a test's time bound.
HEALTH_CHECKS = {
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 4,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


class RayNode:
    def __init__(self, root: Path, name: str, args: list[str]) -> None:
        self.temp_dir = root / name
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        self.log = root / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(RAY), "start", "--block", "--temp-dir", str(self.temp_dir), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=ray_env(),
                start_new_session=True,
            )

    def wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if "Ray runtime started" in text:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"ray start did not finish in {START_TIMEOUT_S:.0f} s:\n{text[-3000:]}")

    def kill(self) -> None:
        """SIGKILL to the node's process group, then to any process left naming its temp dir."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        for pid in self.stray_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stray_pids(self) -> list[int]:
        mark = str(self.temp_dir).encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if mark in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
        return pids


class RayCluster:
    """A head node (1 CPU and `resources`) on 127.0.0.1, more nodes by add_node."""

    def __init__(self, root: Path, resources: dict[str, float], cpus: int = 1) -> None:
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[RayNode] = []
        args = [
            "--head",
            "--port",
            str(self.port),
            "--ray-client-server-port",
            str(free_port()),
            "--dashboard-port",
            str(free_port()),
            "--include-dashboard=false",
            "--system-config",
            json.dumps(HEALTH_CHECKS),
        ]
        self._start("head", args, resources, cpus)

    def add_node(self, resources: dict[str, float], cpus: int = 1) -> RayNode:
        return self._start(f"node{len(self.nodes)}", ["--address", self.address], resources, cpus)

    def _start(self, name: str, args: list[str], resources: dict[str, float], cpus: int) -> RayNode:
        args = [
            *args,
            "--node-ip-address",
            "127.0.0.1",
            "--num-cpus",
            str(cpus),
            "--resources",
            json.dumps(resources),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--dashboard-agent-grpc-port",
            str(free_port()),
            "--metrics-export-port",
            str(free_port()),
            "--runtime-env-agent-port",
            str(free_port()),
            "--disable-usage-stats",
        ]
        node = RayNode(self.root, name, args)
        self.nodes.append(node)
        try:
            node.wait_started()
        except Exception:
            self.stop()
            raise
        return node

    def kill_node(self, k: int) -> None:
        self.nodes[k].kill()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.kill()
