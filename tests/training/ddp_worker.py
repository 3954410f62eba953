"""One rank of the DistributedDataParallel test (started by torchrun from test_train_ddp.py).

Trains the same model twice from the same weights, eager DDP and ``torch.compile(ddp_model,
backend="fxvino")``, each rank on its own shard of every batch, and writes what rank 0 saw (losses,
final weights' largest difference, fxvino's report) as JSON to the path given.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import fxvino


class _Net(torch.nn.Module):
    """A user module: Dynamo skips top-level frames of torch's own (an nn.Sequential's forward)."""

    def __init__(self, layers: torch.nn.Module) -> None:
        super().__init__()
        self.layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    # Three 1 MB layers: with DDP's 1 MB buckets, Dynamo's DDP optimizer splits the graph.
    return _Net(torch.nn.Sequential(
        torch.nn.Linear(16, 512), torch.nn.GELU(), torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.GELU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 4),
    ))  # fmt: skip


def _train(model: torch.nn.Module, compiled: bool, steps: int, rank: int) -> list[float]:
    ddp = DistributedDataParallel(model, bucket_cap_mb=1)
    fn = torch.compile(ddp, backend="fxvino", options={"aot_autograd": True}) if compiled else ddp
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        x, y = x[rank * 4 : rank * 4 + 4], y[rank * 4 : rank * 4 + 4]  # this rank's shard
        opt.zero_grad()
        loss = F.cross_entropy(fn(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    model = _model()
    twin = copy.deepcopy(model)
    eager = _train(twin, compiled=False, steps=20, rank=rank)
    with fxvino.collect_reports() as report:
        ours = _train(model, compiled=True, steps=20, rank=rank)
    diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), twin.parameters(), strict=True))
    # Ranks must also agree with each other: DDP averaged the same gradients everywhere.
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weights)
    if rank == 0:
        result = {
            "eager": eager,
            "fxvino": ours,
            "weight_diff": diff,
            "rank_diff": max((g - weights).abs().max().item() for g in gathered),
            "graphs": [[g.kind, len(g.ov_partitions)] for g in report.graphs],
            "torch_ops": sum(report.torch_ops.values()),
            "fallbacks": [str(f) for f in report.fallbacks],
            "report": str(report),
        }
        with open(sys.argv[1], "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
    # Skip interpreter finalization. Gloo's worker thread may still be destroying the last
    # collective's work, whose tensors hold Python objects: a decref that needs the GIL while the
    # interpreter finalizes ends the thread inside a noexcept destructor, and the rank aborts
    # ("terminate called without an active exception"; pytorch/pytorch#190489, eager DDP too).
    # Everything this rank owes is written above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
