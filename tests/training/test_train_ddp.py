"""DistributedDataParallel: two processes started by torchrun (gloo on 127.0.0.1), compiled with
fxvino, train as eager DDP does."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("ddp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_torchrun_two_processes(tmp_path):
    out = tmp_path / "rank0.json"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--nnodes", "1",
        "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(WORKER), str(out),
    ]  # fmt: skip
    src = str(Path(__file__).parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    for i, (a, b) in enumerate(zip(result["fxvino"], result["eager"], strict=True)):
        assert abs(a - b) <= 1e-4 * abs(b), f"step {i}: {a} vs eager {b}"
    assert result["weight_diff"] <= 1e-4, result
    assert result["rank_diff"] == 0.0, result
    kinds = [k for k, _ in result["graphs"]]
    # Dynamo's DDP optimizer split the model at bucket boundaries: one forward/backward pair per bucket.
    assert kinds.count("forward") >= 2 and kinds.count("forward") == kinds.count("backward"), result["report"]
    assert all(parts >= 1 for _, parts in result["graphs"]), result["report"]
    assert result["torch_ops"] == 0 and not result["fallbacks"], result["report"]
