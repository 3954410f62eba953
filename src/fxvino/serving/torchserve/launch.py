"""Archive a model and run a private TorchServe on loopback: what the tests, the benchmark and
the example use.

:class:`TorchServe` starts ``torchserve --foreground`` in its own session, bound to 127.0.0.1
on free ports, with its own temporary directory (TorchServe keeps a pid file there and refuses
to start beside another instance's), and stops exactly the processes it started (its session:
the Java frontend and the Python workers), whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fxvino.serving.net import free_port, http

BIN = Path(sys.executable).parent


# The handler classes, by the name ``archive`` takes.
HANDLERS = {
    "image_classifier": "fxvino.serving.torchserve.image_classifier:FxvinoImageClassifier",
    "text_classifier": "fxvino.serving.torchserve.text_classifier:FxvinoTextClassifier",
    "tensor": "fxvino.serving.torchserve.tensor_handler:FxvinoTensorHandler",
}


HANDLER_FILE = '''"""TorchServe handler: fxvino's {cls}."""

from {module} import {cls}


class Handler({cls}):
    pass
'''


def handler_file(kind: str, directory: Path) -> Path:
    """The two-line handler file an archive needs: torch-model-archiver copies the handler as a
    file, and TorchServe instantiates the one class that file defines."""
    if kind not in HANDLERS:
        raise ValueError(f"unknown handler {kind!r}; valid: {', '.join(HANDLERS)}")
    module, cls = HANDLERS[kind].split(":")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fxvino_handler.py"
    path.write_text(HANDLER_FILE.format(module=module, cls=cls))
    return path


def archive(
    name: str,
    handler: str,
    export_dir: Path,
    *,
    config: Mapping[str, Any],
    serialized_file: Path | None = None,
    model_file: Path | None = None,
    extra_files: Sequence[Path] = (),
) -> Path:
    """Build ``export_dir/name.mar`` with torch-model-archiver.

    ``handler`` is a key of :data:`HANDLERS` or the path of a handler file; ``config`` becomes the
    archive's model-config.yaml. The archiver stages files in ``$TMPDIR/<name>``, so it gets a
    private ``TMPDIR`` (two archivers of one name would otherwise mix their files).
    """
    export_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fxvino-mar-") as tmp:
        staging = Path(tmp)
        handler_path = handler_file(handler, staging / "handler") if handler in HANDLERS else Path(handler)
        config_path = staging / "model-config.yaml"
        config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        cmd = [str(BIN / "torch-model-archiver"), "--model-name", name, "--version", "1.0"]
        cmd += ["--handler", str(handler_path), "--export-path", str(export_dir), "--config-file", str(config_path)]
        cmd += ["--force"]
        if serialized_file is not None:
            cmd += ["--serialized-file", str(serialized_file)]
        if model_file is not None:
            cmd += ["--model-file", str(model_file)]
        if extra_files:
            cmd += ["--extra-files", ",".join(str(f) for f in extra_files)]
        env = {**os.environ, "TMPDIR": str(staging)}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"torch-model-archiver failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return export_dir / f"{name}.mar"


class TorchServe:
    """A TorchServe of our own: ``with TorchServe(model_store, workdir) as ts: ts.register(...)``."""

    def __init__(self, model_store: Path, workdir: Path, *, env: Mapping[str, str] | None = None):
        self.model_store, self.workdir = Path(model_store), Path(workdir)
        self.ports = {k: free_port() for k in ("inference", "management", "metrics")}
        self.env = dict(env or {})
        self.process: subprocess.Popen | None = None

    @property
    def inference_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['inference']}"

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['management']}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def config_properties(self) -> str:
        return "\n".join(
            [
                f"inference_address=http://127.0.0.1:{self.ports['inference']}",
                f"management_address=http://127.0.0.1:{self.ports['management']}",
                f"metrics_address=http://127.0.0.1:{self.ports['metrics']}",
                f"model_store={self.model_store}",
                "disable_token_authorization=true",
                "enable_model_api=true",
                "default_workers_per_model=1",
                "number_of_netty_threads=2",
                "job_queue_size=1000",
                "install_py_dep_per_model=false",
                "enable_metrics_api=false",
                "",
            ]
        )

    def start(self, timeout: float = 180.0) -> TorchServe:
        tmp = self.workdir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.properties"
        config.write_text(self.config_properties())
        env = {**os.environ, "TMPDIR": str(tmp), "LOG_LOCATION": str(self.log_dir), **self.env}
        env["METRICS_LOCATION"] = str(self.log_dir)
        cmd = [str(BIN / "torchserve"), "--start", "--foreground", "--ncs", "--disable-token-auth"]
        cmd += ["--model-store", str(self.model_store), "--ts-config", str(config)]
        with open(self.workdir / "torchserve.out", "ab") as out:
            self.process = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"torchserve exited with {self.process.returncode}; see {self.workdir}/torchserve.out"
                )
            with contextlib.suppress(OSError):
                if self.request("GET", f"{self.inference_url}/ping", timeout=5)[0] == 200:
                    return self
            time.sleep(0.5)
        raise TimeoutError(f"torchserve did not answer /ping within {timeout:.0f}s; see {self.workdir}")

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM our session (frontend and workers), then SIGKILL what is left of it."""
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the session leader's pid is the group id
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(pgid):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=0.2)
            if not _group_alive(pgid):
                break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self.process = None

    def __enter__(self) -> TorchServe:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the APIs

    @staticmethod
    def request(
        method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout=300.0
    ) -> tuple[int, bytes]:
        return http(method, url, body, headers, timeout)

    def register(self, mar: str, *, workers: int = 1, timeout: float = 600.0) -> dict[str, Any]:
        """Register ``mar`` (a file name in the model store) and wait until its workers are up."""
        url = f"{self.management_url}/models?url={mar}&initial_workers={workers}&synchronous=true"
        status, body = self.request("POST", url, timeout=timeout)
        if status != 200:
            raise RuntimeError(f"registering {mar} failed ({status}): {body.decode(errors='replace')}")
        return json.loads(body)

    def scale(self, model: str, workers: int, timeout: float = 600.0) -> None:
        url = f"{self.management_url}/models/{model}?min_worker={workers}&max_worker={workers}&synchronous=true"
        status, body = self.request("PUT", url, timeout=timeout)
        if status not in (200, 202):
            raise RuntimeError(f"scaling {model} to {workers} failed ({status}): {body.decode(errors='replace')}")

    def describe(self, model: str) -> list[dict[str, Any]]:
        """TorchServe's description of ``model``, with each worker's handler description (customized)."""
        status, body = self.request("GET", f"{self.management_url}/models/{model}?customized=true")
        if status != 200:
            raise RuntimeError(f"describing {model} failed ({status}): {body.decode(errors='replace')}")
        return json.loads(body)

    def predict(self, model: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        headers = {"Content-Type": content_type}
        return self.request("POST", f"{self.inference_url}/predictions/{model}", body, headers)

    def logs(self) -> str:
        """Everything the workers logged so far (model_log.log)."""
        path = self.log_dir / "model_log.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
