"""Logarithms and their kin on large tensors: fxvino against eager, Inductor and the OpenVINO wheel.

The CPU plugin has no vectorized kernel for OpenVINO's Log (nor Sin, Atan, ...): it runs a scalar
reference loop, 8-40x an Add's time per element. This times, in one process and interleaved,
eager PyTorch, Inductor, the OpenVINO wheel's ``torch.compile`` backend, fxvino, and fxvino on one
thread (what a static graph of at most 2^18 elements got as "tiny" before a reference loop's
element counted its cost in Adds, ``compilation/plugin_config.py``) over functions that compute a
logarithm or another such op of every element, and prints each one's median (min) time and
fxvino's ratios:

    python -m benchmarks.elementwise
    python -m benchmarks.elementwise --rounds 20 --size 80x3000
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

from benchmarks.bench import interleaved_times, machine_info


def _functions() -> dict[str, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    return {
        "log": torch.log,
        "log2": torch.log2,
        "log10": torch.log10,
        "log1p": torch.log1p,
        "log-mel (log10 of clamp)": lambda x: torch.log10(torch.clamp(x, min=1e-10)),
        "binary cross-entropy": lambda x: F.binary_cross_entropy(torch.sigmoid(x), (x > 1).float()),
        "xlogy (entropy)": lambda x: -torch.xlogy(x, x).sum(-1),
        "softplus": F.softplus,
        "logsigmoid": F.logsigmoid,
        "sin": torch.sin,
        "atan": torch.atan,
        "exp (for scale)": torch.exp,
    }


def _contenders(fn: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    import torch

    out: dict[str, Callable[..., Any]] = {"eager": fn, "inductor": torch.compile(fn, dynamic=False)}
    try:
        import openvino.torch  # noqa: F401  (registers backend="openvino")

        out["openvino wheel"] = torch.compile(fn, backend="openvino", dynamic=False)
    except ImportError:
        pass
    out["fxvino"] = torch.compile(fn, backend="fxvino", dynamic=False)
    one_thread = {"config": {"INFERENCE_NUM_THREADS": 1, "ENABLE_CPU_PINNING": "NO"}}
    out["fxvino 1 thread"] = torch.compile(fn, backend="fxvino", dynamic=False, options=one_thread)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of 5 calls each")
    parser.add_argument("--size", default="64x4096", help="the input's shape, as ROWSxCOLUMNS")
    args = parser.parse_args(argv)
    try:
        shape = tuple(int(d) for d in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size {args.size!r}: expected ROWSxCOLUMNS such as 64x4096")

    import torch

    torch.set_num_threads(2)
    m = machine_info()
    print(f"machine: {m['cpu']} | ISA: {m.get('isa', '?')} | {m['logical_cores']} logical cores")
    print(
        f"fxvino {m['fxvino_commit']} | input {args.size} f32 | {args.rounds} interleaved rounds of 5 calls"
        " | median (min)"
    )
    names = None
    for label, fn in _functions().items():
        torch._dynamo.reset()  # the contenders of one function compile the same code: stay under Dynamo's limit
        torch.manual_seed(0)
        x = torch.rand(shape) * 4 + 1e-3  # in (0, 4]: every function is defined there
        contenders = _contenders(fn)
        expected = fn(x)
        with torch.no_grad():
            for name, compiled in contenders.items():  # compile, warm up, check against eager
                for _ in range(3):
                    out = compiled(x)
                torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6, msg=f"{label}: {name}")
            if names is None:
                names = list(contenders)
                print(
                    "| function | " + " | ".join(f"{n} µs" for n in names) + " | fxvino / eager | fxvino / inductor |"
                    " fxvino / 1 thread |"
                )
                print("|---|" + "--:|" * (len(names) + 3))
            times = interleaved_times(contenders, x, rounds=args.rounds)
        med = {name: 1e6 * statistics.median(t) for name, t in times.items()}
        low = {name: 1e6 * min(t) for name, t in times.items()}
        cells = [f"{med[n]:.0f} ({low[n]:.0f})" if n in med else "—" for n in names]
        print(
            f"| {label} | " + " | ".join(cells) + f" | {med['fxvino'] / med['eager']:.2f} "
            f"| {med['fxvino'] / med['inductor']:.2f} | {med['fxvino'] / med['fxvino 1 thread']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
