"""``F.interpolate`` under fxvino, native OpenVINO and eager PyTorch, side by side in one process.

Inference graphs keep ``F.interpolate`` whole (``fxvino/capture/resample.py``) so it runs as one
Interpolate; before, AOTAutograd's tracing turned it into index arithmetic that OpenVINO ran as
GatherND. Each case is a resize followed by a multiply (so the graph is more than its input), on a
feature map of the size decoders and segmentation heads resize:

    .venv/bin/python -m benchmarks.resample
    .venv/bin/python -m benchmarks.resample --rounds 5 --shape 1,64,128,128

"fxvino, decomposed" is fxvino with that step patched out, for the before and after in one run.
Contenders run in blocks (a pause, one untimed call, ``--calls`` timed calls), alternating in
ABBA order over ``--rounds``; the table shows the median and min per call and fxvino's ratio to
each other contender (below 1: fxvino faster).
"""

from __future__ import annotations

import argparse
import statistics
import unittest.mock

CASES = {
    "nearest x2": {"scale_factor": 2.0, "mode": "nearest"},
    "bilinear x2": {"scale_factor": 2.0, "mode": "bilinear"},
    "bilinear x0.5": {"scale_factor": 0.5, "mode": "bilinear"},
    "bicubic x2, align_corners": {"scale_factor": 2.0, "mode": "bicubic", "align_corners": True},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="1,128,64,64", help="input N,C,H,W (default 1,128,64,64)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args(argv)
    shape = [int(d) for d in args.shape.split(",")]
    if len(shape) != 4 or min(shape) < 1:
        parser.error(f"--shape must be four positive sizes N,C,H,W, got {args.shape!r}")

    import openvino as ov
    import torch
    import torch.nn.functional as F

    import fxvino
    import fxvino.capture.resample
    from benchmarks.bench import machine_info
    from benchmarks.models import time_in_blocks

    torch.set_num_threads(2)
    info = machine_info()
    print(f"CPU: {info.get('cpu')} ({info.get('isa')}); input {shape}, float32, 2 threads; ms median / min")
    head = ["case", "eager", "fxvino", "fxvino, decomposed", "native"]
    head += ["fxvino / eager", "fxvino / decomposed", "fxvino / native"]
    print("| " + " | ".join(head) + " |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    for label, kwargs in CASES.items():

        class Resize(torch.nn.Module):
            def forward(self, t: torch.Tensor, kwargs: dict = kwargs) -> torch.Tensor:
                return F.interpolate(t, **kwargs) * 1.5

        model = Resize().eval()
        torch._dynamo.reset()
        with torch.no_grad():
            compiled = torch.compile(model, backend="fxvino")
            with fxvino.collect_reports() as report:
                torch.testing.assert_close(compiled(x), model(x))
            if report.ov_ops["fxvino.upsample.default"] != 1:
                raise RuntimeError(f"{label}: F.interpolate did not run whole on OpenVINO:\n{report}")
            decomposed = torch.compile(lambda t, kwargs=kwargs: F.interpolate(t, **kwargs) * 1.5, backend="fxvino")
            with (
                unittest.mock.patch.object(fxvino.capture.resample, "keep_resizes_whole", lambda gm: False),
                fxvino.collect_reports() as before,
            ):
                torch.testing.assert_close(decomposed(x), model(x))
            if "fxvino.upsample.default" in before.ov_ops:
                raise RuntimeError(f"{label}: the decomposed contender kept F.interpolate whole")
            native = ov.Core().compile_model(
                ov.convert_model(model, example_input=x), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
            )
            request = native.create_infer_request()
            contenders = {
                "eager": lambda model=model: model(x),
                "fxvino": lambda compiled=compiled: compiled(x),
                "decomposed": lambda decomposed=decomposed: decomposed(x),
                "native": lambda request=request: torch.from_numpy(request.infer([x.numpy()])[0].copy()),
            }
            times = time_in_blocks(contenders, args.rounds, args.calls)
        med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        low = {k: 1e3 * min(v) for k, v in times.items()}
        cells = " | ".join(f"{med[k]:.2f} / {low[k]:.2f}" for k in contenders)
        ratios = " | ".join(f"{med['fxvino'] / med[k]:.2f}" for k in ("eager", "decomposed", "native"))
        print(f"| {label} | {cells} | {ratios} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
