"""Cost of the per-call frozen-weight check (issue 13's goal: <= 5 µs for 1,000 parameters).

Every call of a graph with frozen weights asks whether those weights are still the tensors, and the
contents, OpenVINO's constants were made from (fxvino.runtime.weight_check). This times the native check
and the Python one side by side, interleaved, on the parameters of real module layouts: 1,000
tensors of a stack of Linear+LayerNorm blocks, and BERT-base's 201 when transformers is installed.

    python -m benchmarks.weight_check [--rounds 7] [--number 2000]
"""

from __future__ import annotations

import argparse
import statistics
import timeit

import torch

from benchmarks.bench import machine_info
from fxvino import native
from fxvino.runtime.weight_check import NativeCheck, PythonCheck


def _layouts() -> dict[str, tuple[torch.Tensor, ...]]:
    blocks = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)) for _ in range(250)]
    )
    layouts = {"1,000 parameters (250 Linear+LayerNorm)": tuple(blocks.parameters())}
    try:
        from transformers import BertConfig, BertModel

        bert = BertModel(BertConfig())
        layouts[f"BERT-base ({len(list(bert.parameters()))} parameters)"] = tuple(bert.parameters())
    except ImportError:
        pass
    return layouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000, help="checks per timed round")
    args = parser.parse_args()
    info = machine_info()
    print(f"# {info.get('cpu')} ({info.get('isa')}), torch {info.get('torch')}, fxvino {info.get('fxvino_commit')}")
    helper = native.load("weight_stamp")
    if helper is None:
        raise SystemExit("the native helper is unavailable here (see the log above); nothing to compare")
    print("| parameters | native µs median (min) | Python µs median (min) | Python / native |")
    print("|---|--:|--:|--:|")
    for name, tensors in _layouts().items():
        positions = tuple(range(1, len(tensors) + 1))
        call_args = [torch.randn(2), *tensors]
        checks = {"native": NativeCheck(helper, tensors, positions), "python": PythonCheck(tensors, positions)}
        times: dict[str, list[float]] = {k: [] for k in checks}
        for _ in range(args.rounds):  # interleaved: the machine's noise hits both alike
            for kind, check in checks.items():
                assert check.same(call_args)
                seconds = timeit.timeit(lambda c=check, a=call_args: c.same(a), number=args.number)
                times[kind].append(seconds / args.number * 1e6)
        nat, py = times["native"], times["python"]
        print(
            f"| {name} | {statistics.median(nat):.2f} ({min(nat):.2f}) | {statistics.median(py):.1f} ({min(py):.1f}) "
            f"| {statistics.median(py) / statistics.median(nat):.0f}x |"
        )


if __name__ == "__main__":
    main()
