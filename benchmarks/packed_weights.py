"""How many packed copies of shared weights the OpenVINO CPU plugin keeps, by how graphs are compiled.

    python -m benchmarks.packed_weights              # 8 f32 4096x4096 products, 0.54 GB of weights
    python -m benchmarks.packed_weights --layers 4 --size 2048

Why: generate() compiles a prefill and a decode graph over the same weights. As two compiled
models each holds its own packed copy (issue 12's f32 peak RSS); the question is whether one
compiled model holding both would pack them once, and what an idle branch costs. Each layout runs
in a fresh process (RSS growth after compile and one inference, from /proc/self/statm), and times
a one-row inference of the first branch (median of 30). The weights are constants over the same
numpy memory in every branch, as fxvino's frozen weights are over the same torch tensors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

LAYOUTS = {
    "one": "one branch only (reference)",
    "separate": "two compiled models",
    "branches": "one model, two branches (the idle one fed 0 rows)",
    "if": "one model, an If choosing the branch",
}
RESULT = "PACKED-RESULT "


def _rss_gb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 1e9


def worker(layout: str, layers: int, size: int) -> dict:
    import numpy as np
    import openvino as ov
    import openvino.opset16 as ops

    weights = [np.random.default_rng(i).standard_normal((size, size), dtype=np.float32) for i in range(layers)]

    def chain(x):
        for w in weights:
            x = ops.matmul(x, ops.constant(ov.Tensor(w, shared_memory=True), shared_memory=True), False, True)
        return x

    core, config = ov.Core(), {"INFERENCE_PRECISION_HINT": "f32"}
    row = np.ones((1, size), np.float32)
    before = _rss_gb()
    if layout in ("one", "separate"):
        p = ops.parameter([1, size], ov.Type.f32)
        request = core.compile_model(ov.Model([chain(p)], [p]), "CPU", config).create_infer_request()
        inputs = [row]
        if layout == "separate":
            q = ops.parameter([4, size], ov.Type.f32)
            other = core.compile_model(ov.Model([chain(q)], [q]), "CPU", config).create_infer_request()
            other.infer([np.ones((4, size), np.float32)])
    elif layout == "branches":
        p, q = ops.parameter([1, size], ov.Type.f32), ops.parameter([-1, size], ov.Type.f32)
        request = core.compile_model(ov.Model([chain(p), chain(q)], [p, q]), "CPU", config).create_infer_request()
        request.infer([row, np.ones((4, size), np.float32)])  # both branches packed and run once
        inputs = [row, np.ones((0, size), np.float32)]
    else:
        cond, x = ops.parameter([], ov.Type.boolean), ops.parameter([-1, size], ov.Type.f32)
        tp, ep = ops.parameter([-1, size], ov.Type.f32), ops.parameter([-1, size], ov.Type.f32)
        then_body, else_body = ov.Model([ops.result(chain(tp))], [tp]), ov.Model([ops.result(chain(ep))], [ep])
        branch = ops.if_op(cond)
        branch.set_then_body(then_body)
        branch.set_else_body(else_body)
        branch.set_input(x.output(0), tp, ep)
        out = branch.set_output(then_body.get_results()[0], else_body.get_results()[0])
        request = core.compile_model(ov.Model([out], [cond, x]), "CPU", config).create_infer_request()
        request.infer([np.array(False), row])  # the else body packed and run once
        inputs = [np.array(True), row]
    request.infer(inputs)
    grown = _rss_gb() - before
    times = []
    for _ in range(33):
        t0 = time.perf_counter()
        request.infer(inputs)
        times.append(time.perf_counter() - t0)
    return {"layout": layout, "rss_growth_gb": grown, "infer_ms": 1e3 * statistics.median(times[3:])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--worker", choices=sorted(LAYOUTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.layers < 1 or args.size < 1:
        parser.error(f"--layers and --size must be positive (got {args.layers} and {args.size})")
    if args.worker:
        print(RESULT + json.dumps(worker(args.worker, args.layers, args.size)), flush=True)
        return 0
    gb = args.layers * args.size * args.size * 4 / 1e9
    print(f"{args.layers} f32 {args.size}x{args.size} products, {gb:.2f} GB of weights\n")
    print("| how the two uses of the weights are compiled | RSS growth GB | 1-row inference ms |")
    print("|---|--:|--:|")
    for layout, what in LAYOUTS.items():
        cmd = [sys.executable, "-m", "benchmarks.packed_weights", "--worker", layout]
        cmd += ["--layers", str(args.layers), "--size", str(args.size)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith(RESULT)), None)
        if line is None:
            err = (done.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"| {what} | failed: {err} | |")
            continue
        r = json.loads(line[len(RESULT) :])
        print(f"| {what} | {r['rss_growth_gb']:.2f} | {r['infer_ms']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
