"""A private two-node Ray cluster on loopback, for the tests and the benchmark.

Both nodes are ``ray start ... --block`` processes in their own session, on 127.0.0.1 (Ray
otherwise advertises the machine's external address and cannot reach its own GCS), with a GCS
port outside the default worker port range, no dashboard and a temporary directory of their
own. Stopping never uses ``ray stop`` (it stops every Ray on the machine): it signals the
sessions started here, then any process left whose command line names this cluster's temporary
directory, by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fxvino.serving.net import free_port, http

BIN = Path(sys.executable).parent
APP = "fxvino"


class LocalRayCluster:
    """``with LocalRayCluster(workdir) as cluster:`` a head and one more node, each with ``cpus_per_node``."""

    def __init__(self, workdir: Path, *, env: Mapping[str, str] | None = None, cpus_per_node: int = 1):
        self.workdir = Path(workdir)
        self.env = dict(env or {})
        self.cpus = cpus_per_node
        # Ray's socket paths live under the temp dir and must stay short (AF_UNIX: 107 bytes).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="fxray-", dir="/tmp"))
        self.gcs_port = free_port(6380, 7000)  # outside the default worker ports 10002-19999
        self.http_port = free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.nodes: list[subprocess.Popen] = []
        self.retries = 0
        self._lock = threading.Lock()
        self._connected = False

    # -- lifecycle

    def _start_node(self, head: bool) -> subprocess.Popen:
        ports = ["--node-manager-port", "--object-manager-port", "--metrics-export-port", "--runtime-env-agent-port"]
        ports += ["--dashboard-agent-listen-port", "--dashboard-agent-grpc-port"]
        cmd = [str(BIN / "ray"), "start", "--block", "--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}"]
        cmd += ["--disable-usage-stats"]
        for flag in ports:
            cmd += [flag, str(free_port())]
        if head:
            cmd += [f"--port={self.gcs_port}", "--head", "--include-dashboard=false", f"--temp-dir={self.temp_dir}"]
            cmd += ["--ray-client-server-port", str(free_port())]
        else:
            cmd += [f"--address={self.address}"]
        self.workdir.mkdir(parents=True, exist_ok=True)
        name = "head" if head else f"node{len(self.nodes)}"
        env = {**os.environ, **self.env, "RAY_USAGE_STATS_ENABLED": "0"}
        with open(self.workdir / f"ray-{name}.out", "ab") as out:
            return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout: float = 240.0) -> LocalRayCluster:
        self.nodes.append(self._start_node(head=True))
        self._wait(lambda: self._gcs_up(), timeout, "the head node's GCS")
        self.nodes.append(self._start_node(head=False))
        import ray

        ray.init(address=self.address, _node_ip_address="127.0.0.1", logging_level="warning", log_to_driver=False)
        self._connected = True
        self._wait(lambda: self.node_count() == 2, timeout, "two alive nodes")
        from ray import serve

        # A request whose replica dies under it is not answered by the proxy: time it out there,
        # so the client sees a 408 and can send it again.
        serve.start(http_options={"host": "127.0.0.1", "port": self.http_port, "request_timeout_s": 30})
        return self

    def _gcs_up(self) -> bool:
        for node in self.nodes:
            if node.poll() is not None:
                raise RuntimeError(f"ray start exited with {node.returncode}; see {self.workdir}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.gcs_port)) == 0

    def _wait(self, ready: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.5)
        raise TimeoutError(f"{what} not ready within {timeout:.0f}s; see {self.workdir}")

    def stop(self) -> None:
        if self._connected:  # disconnect the driver; Serve goes down with the cluster's processes
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
            self._connected = False
        # The sessions started here (ray start --block and its children): SIGTERM, a grace
        # period, then SIGKILL; then anything left that names this cluster's temporary directory.
        for node in reversed(self.nodes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=max(0.1, deadline - time.monotonic()))
        for node in self.nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
        for pid in self._own_processes():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=10)
        self.nodes = []
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def _own_processes(self) -> list[int]:
        """Pids whose command line names this cluster's temporary directory or GCS address."""
        import psutil

        marks = (str(self.temp_dir), f"127.0.0.1:{self.gcs_port}")
        own = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            cmdline = " ".join(p.info["cmdline"] or [])
            if p.info["pid"] != os.getpid() and any(m in cmdline for m in marks):
                own.append(p.info["pid"])
        return own

    def __enter__(self) -> LocalRayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what runs on it

    def node_count(self) -> int:
        import ray

        return sum(1 for n in ray.nodes() if n.get("Alive"))

    def deploy(self, replicas: int = 1, **args: Any) -> str:
        """Run the fxvino deployment as the app ``fxvino`` at ``/fxvino``, built by
        :func:`fxvino.serving.ray.build_app` from ``args`` (what ``serve run`` and KubeRay use)."""
        from ray import serve

        from fxvino.serving.ray import build_app

        self._deploy_args = args
        serve.run(build_app({**args, "num_replicas": replicas}), name=APP, route_prefix=f"/{APP}")
        return APP

    def deploy_image_classifier(self, model_dir: Path, size: int, *, cache_dir: Path, replicas: int = 1) -> str:
        return self.deploy(
            replicas,
            model=str(model_dir),
            task="image_classifier",
            input_shape=f"3,{size},{size}",  # as serve run passes it
            cache_dir=str(cache_dir),
            threads=1,
        )

    def scale(self, app: str, replicas: int) -> None:
        """Redeploy with another replica count (existing replicas keep serving)."""
        self.deploy(replicas, **self._deploy_args)

    def replicas(self, app: str, tries: int = 40) -> dict[int, dict[str, Any]]:
        """The replicas' describe answers by pid (requests land on replicas at random: ask until all answered)."""
        from ray import serve

        status = serve.status().applications[app].deployments["FxvinoDeployment"]
        want = status.replica_states.get("RUNNING", 0)
        seen: dict[int, dict[str, Any]] = {}
        for _ in range(tries):
            code, body = self.request("GET", f"/{app}/describe")
            if code == 200:
                d = json.loads(body)
                seen[d["pid"]] = d
            if len(seen) >= want:
                break
        return seen

    def wait_replicas(
        self, app: str, count: int, exclude: Any = (), timeout: float = 300.0
    ) -> dict[int, dict[str, Any]]:
        """Wait until ``count`` replicas run, one of them not in ``exclude`` (pids) if given, and
        return their describe answers."""
        from ray import serve

        found: dict[int, dict[str, Any]] = {}

        def ready() -> bool:
            status = serve.status().applications[app].deployments["FxvinoDeployment"]
            if status.replica_states.get("RUNNING", 0) < count:
                return False
            found.clear()
            found.update(self.replicas(app))
            return len(found) >= count and (not exclude or any(pid not in exclude for pid in found))

        self._wait(ready, timeout, f"{count} running replicas")
        return found

    def kill_one_replica(self, app: str) -> dict[str, Any]:
        """Kill one running replica actor (``ray.kill``); Serve starts a replacement."""
        import ray

        names = [
            a
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "serve" and "SERVE_REPLICA" in a["name"] and app in a["name"]
        ]
        if not names:
            raise RuntimeError(f"no replica actor of app {app!r} found")
        victim = names[0]
        ray.kill(ray.get_actor(victim["name"], namespace="serve"), no_restart=True)
        return {"actor": victim["name"], "replicas_before": len(names)}

    # -- HTTP

    def request(self, method: str, path: str, body: bytes | None = None, timeout: float = 300.0) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        return http(method, f"http://127.0.0.1:{self.http_port}{path}", body, headers, timeout)

    def predict(self, app: str, body: bytes, retries: int = 0) -> tuple[int, bytes]:
        """POST one request; with ``retries``, a 5xx, a 408 or a dropped connection is sent again."""
        for attempt in range(retries + 1):
            try:
                code, answer = self.request("POST", f"/{app}", body, timeout=60 if retries else 300)
            except OSError as e:  # refused, reset, timed out (URLError is an OSError too)
                if not retries:
                    raise
                code, answer = 599, str(e).encode()
            if (code < 500 and code != 408) or attempt == retries:
                return code, answer
            with self._lock:
                self.retries += 1
            time.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")
