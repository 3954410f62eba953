"""Side-by-side benchmarks of fxvino against eager, Inductor and OpenVINO (see README.md).

``python -m benchmarks.bench`` drives the run; ``python -m benchmarks.worker`` measures one
(model, backend) pair in a fresh process.
"""
