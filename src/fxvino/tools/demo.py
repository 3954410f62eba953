"""``python -m fxvino.tools.demo``: compile BERT-base with fxvino and compare it with eager PyTorch.

Prints progress while it works, then a small table: median latency of eager and fxvino, the
largest absolute difference of their outputs, and what ran on OpenVINO.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable

import torch

import fxvino
from fxvino.tools import zoo


def _median_ms(fn: Callable[[], object], seconds: float, min_calls: int = 10) -> float:
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < min_calls or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _hidden(out: object) -> torch.Tensor:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out  # type: ignore[return-value]


# Building a transformers model imports torchao, which logs that its CUDA kernels did not load and
# registers enums that torch's pytree deprecates: nothing a newcomer running the demo must act on.
_QUIET_LOGGERS = ("torchao", "torch.utils._pytree")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert", choices=sorted(zoo.MODELS))
    parser.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    parser.add_argument("--seconds", type=float, default=3.0, help="timing budget per backend and round")
    args = parser.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())

    def say(msg: str) -> None:
        print(f"[demo] {msg}", file=sys.stderr, flush=True)

    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    say(f"building {args.model} from its config with random weights")
    model, inputs = zoo.build(args.model)
    say("compiling with fxvino (Dynamo + AOTAutograd + lowering + OpenVINO compile)")
    compiled = torch.compile(model, backend="fxvino", options={"precision": args.precision})
    with torch.no_grad(), fxvino.collect_reports() as report:
        t0 = time.perf_counter()
        out = compiled(*inputs)
        first_call = time.perf_counter() - t0
        ref = model(*inputs)
        err = (_hidden(out).float() - _hidden(ref)).abs().max().item()
        say(f"first call took {first_call:.1f} s; timing eager and fxvino in alternating rounds")
        eager_ms, fx_ms = [], []
        for rnd in range(2):
            say(f"round {rnd + 1}/2")
            eager_ms.append(_median_ms(lambda: model(*inputs), args.seconds))
            fx_ms.append(_median_ms(lambda: compiled(*inputs), args.seconds))
    eager, fx = statistics.median(eager_ms), statistics.median(fx_ms)
    fallbacks = report.fallbacks
    rows = [
        ("model", f"{args.model} ({args.precision}, {torch.get_num_threads()} threads)"),
        ("eager median", f"{eager:.2f} ms"),
        ("fxvino median", f"{fx:.2f} ms"),
        ("speed-up", f"{eager / fx:.2f}x"),
        ("max abs error", f"{err:.2e}"),
        ("first call", f"{first_call:.1f} s"),
        ("OpenVINO partitions", str(report.num_ov_partitions)),
        ("ops on OpenVINO", str(sum(report.ov_ops.values()))),
        ("ops in PyTorch", str(sum(report.torch_ops.values()))),
        ("fallbacks", str(len(fallbacks)) + "".join(f"\n    {f.where}: {f.reason}" for f in fallbacks)),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
