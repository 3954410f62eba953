"""1-d transposed convolutions (an audio decoder's upsampling) in fxvino's two lowerings, against eager.

The CPU plugin runs some 1-d transposed convolutions on its generic GEMM kernel; fxvino then lowers
them as 2-d of height 1 (``lowering/ops/conv.py``), which the plugin runs on its brgemm kernel.
This times, in one process and interleaved, eager PyTorch and fxvino with and without that choice
(the "1-d" contender forces the plain 1-d lowering) over the upsampling layers of EnCodec's 24 kHz
decoder and a DAC-like one, and prints the kernel each fxvino contender ran on:

    python -m benchmarks.upsampling
    python -m benchmarks.upsampling --rounds 20
"""

from __future__ import annotations

import argparse
import copy
import statistics
from typing import Any

from benchmarks.bench import interleaved_times, machine_info

# (in channels, out channels, kernel, stride, input length): EnCodec 24 kHz, 1 s of audio at its
# 75 Hz frame rate, then a DAC-like decoder's first upsampling.
LAYERS = [
    (512, 256, 16, 8, 75),
    (256, 128, 10, 5, 600),
    (128, 64, 8, 4, 3000),
    (64, 32, 4, 2, 12000),
    (1024, 512, 16, 8, 100),
]


def _deconvolution_kernel(report: Any) -> str:
    kinds = {
        op.get_rt_info()["primitiveType"].astype(str)
        for g in report.graphs
        for p in g.ov_partitions
        for op in p.compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Deconvolution"
    }
    return ",".join(sorted(kinds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of 5 calls each")
    args = parser.parse_args(argv)

    import torch

    import fxvino
    from fxvino.lowering.ops import conv

    torch.set_num_threads(2)
    m = machine_info()
    print(f"machine: {m['cpu']} | ISA: {m.get('isa', '?')} | {m['logical_cores']} logical cores")
    print(f"fxvino {m['fxvino_commit']} | {args.rounds} interleaved rounds of 5 calls | medians")
    print(
        "| layer (in, out, kernel, stride, length) | eager ms | fxvino 1-d ms | fxvino ms "
        "| fxvino / 1-d | fxvino / eager | kernels (1-d / fxvino) |"
    )
    print("|---|--:|--:|--:|--:|--:|---|")
    chosen = conv._height_one
    for c_in, c_out, k, s, length in LAYERS:
        torch.manual_seed(0)
        layer = torch.nn.ConvTranspose1d(c_in, c_out, k, s).eval()
        x = torch.randn(1, c_in, length)
        contenders: dict[str, Any] = {"eager": layer}
        kernels = {}
        for name, height_one in (("1-d", lambda *a: False), ("fxvino", chosen)):
            conv._height_one = height_one  # read when the graph is lowered, on the first call
            try:
                # a module of its own: Dynamo compiles anew for it (its guards name the module)
                compiled = torch.compile(copy.deepcopy(layer), backend="fxvino", dynamic=False)
                with fxvino.collect_reports() as report, torch.no_grad():
                    torch.testing.assert_close(compiled(x), layer(x), rtol=1e-4, atol=1e-4)
            finally:
                conv._height_one = chosen
            contenders[name] = compiled
            kernels[name] = _deconvolution_kernel(report)
        with torch.no_grad():
            times = interleaved_times(contenders, x, rounds=args.rounds)
        med = {name: 1e3 * statistics.median(t) for name, t in times.items()}
        print(
            f"| {c_in}, {c_out}, {k}, {s}, {length} | {med['eager']:.2f} | {med['1-d']:.2f} | {med['fxvino']:.2f} "
            f"| {med['fxvino'] / med['1-d']:.2f} | {med['fxvino'] / med['eager']:.2f} "
            f"| {kernels['1-d']} / {kernels['fxvino']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
