"""Elementwise accuracy of fxvino against eager, both judged by float64, on this CPU class.

Every unary and binary ufunc of PyTorch's OpInfo database, compiled alone with fxvino. In float32
the worst error over magnitudes 1e-8..1e3 of both signs (clipped to the op's domain) is counted in
f32 steps of the float64 result (normal results only: the CPU plugin flushes subnormals); in bf16
and f16 the values off the float64 result rounded once are counted, static or ``--dynamic``.
An op is flagged where fxvino is clearly worse than eager (f32: over 4x eager's worst and 4 steps
more; 16-bit: 0.5% more values off). Session 44 on the Zen 4 found log1p, expm1, erf and
softplus up to 8.4e6 steps off in f32 and 16-bit composites (SELU, log2, atan2, ...) off in up to
70% of values; they are fixed (docs/user-guide/guarantees.md).

    .venv/bin/python -m benchmarks.accuracy                     # f32, bf16 and f16, static
    .venv/bin/python -m benchmarks.accuracy --dtypes bf16 --dynamic --flagged-only
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from benchmarks.bench import machine_class, machine_info

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TINY = torch.finfo(torch.float32).tiny


def _ops() -> list[tuple[Any, int]]:
    from torch.testing._internal.common_methods_invocations import binary_ufuncs, unary_ufuncs

    seen: set[str] = set()
    out = []
    for op, arity in [(o, 1) for o in unary_ufuncs] + [(o, 2) for o in binary_ufuncs]:
        if op.name in seen or op.name.startswith("_refs") or op.name.startswith("jiterator"):
            continue
        seen.add(op.name)
        out.append((op, arity))
    return out


def _domain(op: Any) -> tuple[float | None, float | None]:
    lo, hi = getattr(op, "domain", (None, None)) or (None, None)
    return lo, hi


def _f32_inputs(op: Any, n: int, gen: torch.Generator) -> torch.Tensor:
    """Magnitudes log-uniform over 1e-8..1e3, random signs, folded into the op's domain."""
    x = 10 ** (torch.rand(n, generator=gen, dtype=torch.float64) * 11 - 8)
    x = torch.where(torch.rand(n, generator=gen) < 0.5, -x, x)
    lo, hi = _domain(op)
    if lo is not None:
        x = torch.where(x < lo, lo + x.abs() % 1.0, x).clamp(min=lo)
    if hi is not None:
        x = torch.where(x > hi, hi - x.abs() % 1.0, x).clamp(max=hi)
    return x.float()


def _sixteen_bit_inputs(op: Any, n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    lo, hi = _domain(op)
    lo = -4.0 if lo is None else max(lo, -4.0)
    hi = 4.0 if hi is None else min(hi, 4.0)
    return (torch.rand(n, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def _compiled(fn: Callable, args: Sequence[torch.Tensor], dynamic: bool) -> tuple[torch.Tensor, bool]:
    """fxvino's result and whether anything ran in PyTorch."""
    import fxvino

    torch._dynamo.reset()
    with fxvino.collect_reports() as report, torch.no_grad():
        out = torch.compile(fn, backend="fxvino", dynamic=dynamic)(*args)
    return out, bool(report.torch_ops) or bool(report.fallbacks)


def _f32_steps(value: torch.Tensor, exact: torch.Tensor) -> float:
    """The worst distance in f32 steps of ``exact`` over its normal finite values."""
    ok = exact.isfinite() & value.isfinite() & (exact.abs() >= TINY)
    if not ok.any():
        return 0.0
    step = exact[ok].abs() * 2.0**-23
    return ((value[ok].double() - exact[ok]).abs() / step).max().item()


def measure_f32(op: Any, arity: int, n: int, dynamic: bool) -> dict[str, Any] | None:
    gen = torch.Generator().manual_seed(0)
    args = [_f32_inputs(op, n, gen) for _ in range(arity)]
    fn = op.op
    eager = fn(*args)
    if not eager.dtype.is_floating_point:
        return None
    exact = fn(*[a.double() for a in args]).float().double()  # rounded to f32 first: overflow is inf
    out, in_torch = _compiled(fn, args, dynamic)
    fx, ea = _f32_steps(out, exact), _f32_steps(eager, exact)
    return {"fxvino": fx, "eager": ea, "in_torch": in_torch, "flag": fx > max(4 * ea, ea + 4)}


def measure_sixteen_bit(op: Any, arity: int, n: int, dtype: torch.dtype, dynamic: bool) -> dict[str, Any] | None:
    gen = torch.Generator().manual_seed(0)
    args = [_sixteen_bit_inputs(op, n, dtype, gen) for _ in range(arity)]
    fn = op.op
    eager = fn(*args)
    if not eager.dtype.is_floating_point:
        return None
    exact = fn(*[a.double() for a in args]).to(dtype)
    out, in_torch = _compiled(fn, args, dynamic)
    finite = exact.isfinite()

    def off(v: torch.Tensor) -> int:
        return int(((v != exact) & finite & ~(v.isnan() & exact.isnan())).sum())

    fx, ea = off(out), off(eager)
    return {"fxvino": fx, "eager": ea, "in_torch": in_torch, "flag": fx > ea + n * 0.005}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", default="f32,bf16,f16", help="comma-separated subset of f32,bf16,f16")
    p.add_argument("--dynamic", action="store_true", help="compile with dynamic=True")
    p.add_argument("--values", type=int, default=4096, help="values per operand (f32 uses twice as many)")
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (default: every ufunc)")
    p.add_argument(
        "--skip", default="", help="comma-separated OpInfo names to leave out (those that crash an emulator)"
    )
    p.add_argument("--flagged-only", action="store_true", help="print only the ops fxvino is clearly worse at")
    args = p.parse_args(argv)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        p.error(f"unknown dtype {unknown[0]!r}; valid: {', '.join(DTYPES)}")
    warnings.filterwarnings("ignore")
    wanted = {o.strip() for o in args.ops.split(",") if o.strip()}
    skipped = {o.strip() for o in args.skip.split(",") if o.strip()}
    every = _ops()
    unknown_ops = sorted((wanted | skipped) - {op.name for op, _ in every})
    if unknown_ops:
        p.error(f"unknown op {unknown_ops[0]!r}; valid: the OpInfo names of unary and binary ufuncs (abs, add, ...)")
    ops = [(op, arity) for op, arity in every if (not wanted or op.name in wanted) and op.name not in skipped]
    print(f"CPU class: {machine_class(machine_info())}; dynamic={args.dynamic}; {len(ops)} ops", flush=True)
    flagged = 0
    for name in dtypes:
        dtype = DTYPES[name]
        unit = "worst f32 steps" if dtype == torch.float32 else f"values of {args.values} off"
        print(f"\n## {name}\n\n| op | fxvino {unit} | eager | note |\n|---|--:|--:|---|", flush=True)
        for op, arity in ops:
            if dtype not in op.supported_dtypes("cpu"):
                continue
            try:
                if dtype == torch.float32:
                    row = measure_f32(op, arity, 2 * args.values, args.dynamic)
                else:
                    row = measure_sixteen_bit(op, arity, args.values, dtype, args.dynamic)
            except Exception as e:  # noqa: BLE001 - an op the generic call cannot drive is skipped
                print(f"{op.name}: skipped ({type(e).__name__})", file=sys.stderr)
                continue
            if row is None or (args.flagged_only and not row["flag"]):
                continue
            flagged += row["flag"]
            note = ("**worse than eager**" if row["flag"] else "") + (" (ran in PyTorch)" if row["in_torch"] else "")
            fmt = "{:.3g}" if dtype == torch.float32 else "{}"
            print(f"| {op.name} | {fmt.format(row['fxvino'])} | {fmt.format(row['eager'])} | {note} |", flush=True)
    print(f"\n{flagged} flagged", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
