"""A graph with ops left in PyTorch between OpenVINO partitions: what running them on one thread gains.

PyTorch's parallel ops leave their OpenMP threads spinning for milliseconds, on the cores the next
OpenVINO partition needs; fxvino therefore runs a graph's small PyTorch ops on one thread when the
graph also holds OpenVINO partitions (``runtime/torch_threads.py``). This times, in one process
and interleaved, each model:

- eager PyTorch;
- fxvino with every op on OpenVINO;
- fxvino with an op left in PyTorch (``disabled_ops``) between partitions, as fxvino runs it
  (``1 thread``) and with PyTorch's own thread count (``PyTorch's threads``, the rule turned off
  while compiling).

Models: a DAC decoder (transformers ``DacModel``, 16 kHz config, random weights, 0.5 s of audio)
with its Snake activations' ``sin`` in PyTorch, and a stack of eight convolutions with a Snake
activation after each:

    python -m benchmarks.mixed_graph
    python -m benchmarks.mixed_graph --rounds 10 --models snake-stack
"""

from __future__ import annotations

import argparse
import copy
import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.bench import interleaved_times, machine_info

LEFT_IN_PYTORCH = {"disabled_ops": ["aten.sin.default"]}


def _dac() -> tuple[Any, tuple[Any, ...]]:
    import torch
    from transformers import DacConfig, DacModel

    torch.manual_seed(0)
    config = DacConfig(
        sampling_rate=16000,
        decoder_hidden_size=256,
        upsampling_ratios=[8, 5, 4, 2],
        downsampling_ratios=[2, 4, 5, 8],
        hop_length=320,
    )
    decoder = DacModel(config).eval().decoder
    return decoder, (torch.randn(1, config.hidden_size, 8000 // 320),)


def _snake_stack() -> tuple[Any, tuple[Any, ...]]:
    import torch

    class Snake(torch.nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.alpha = torch.nn.Parameter(torch.rand(1, channels, 1) + 0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Conv1d(128, 128, 7, padding=3), Snake(128)]
    return torch.nn.Sequential(*layers).eval(), (torch.randn(1, 128, 960),)


MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...]]]] = {"dac-decoder": _dac, "snake-stack": _snake_stack}


def _contenders(model: Any, inputs: tuple[Any, ...]) -> dict[str, Callable[..., Any]]:
    import torch

    from fxvino.runtime import torch_threads

    def compiled(options: dict[str, Any]) -> Callable[..., Any]:
        return torch.compile(copy.deepcopy(model), backend="fxvino", options=options)

    out = {
        "eager": model,
        "fxvino, all on OpenVINO": compiled({}),
        "sin in PyTorch, 1 thread": compiled(LEFT_IN_PYTORCH),
    }
    spinning = compiled(LEFT_IN_PYTORCH)
    limit = torch_threads.ONE_THREAD_WORK
    torch_threads.ONE_THREAD_WORK = -1  # decided at compile time: this one keeps PyTorch's threads
    try:
        spinning(*inputs)
    finally:
        torch_threads.ONE_THREAD_WORK = limit
    out["sin in PyTorch, PyTorch's threads"] = spinning
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds of 5 calls each")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(MODELS)}")

    import torch

    torch.set_num_threads(2)
    m = machine_info()
    print(f"machine: {m['cpu']} | ISA: {m.get('isa', '?')} | {m['logical_cores']} logical cores")
    print(f"fxvino {m['fxvino_commit']} | {args.rounds} interleaved rounds of 5 calls | ms per call, median (min)")
    for name in names:
        model, inputs = MODELS[name]()
        with torch.no_grad():
            contenders = _contenders(model, inputs)
            for fn in contenders.values():  # compile and warm up
                fn(*inputs)
                fn(*inputs)
            times = interleaved_times(contenders, *inputs, rounds=args.rounds)
        medians = {k: statistics.median(v) for k, v in times.items()}
        print(f"\n{name}")
        for k, v in times.items():
            print(f"  {k:36} {medians[k] * 1e3:8.2f} ({min(v) * 1e3:.2f})")
        gain = medians["sin in PyTorch, PyTorch's threads"] / medians["sin in PyTorch, 1 thread"]
        print(f"  PyTorch's threads / 1 thread: {gain:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
