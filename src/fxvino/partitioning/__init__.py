"""Splitting an ATen graph into OpenVINO partitions and PyTorch leftovers, and isolating failures."""
