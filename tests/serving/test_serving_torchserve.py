"""End to end on a real TorchServe (Java frontend, Python workers) on 127.0.0.1.

One server runs the whole scenario of :func:`benchmarks.serving.torchserve_scenario` (every
answer is checked against eager PyTorch there); the tests below check what it recorded.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from benchmarks.serving import TABLE_HEADER, torchserve_scenario

# FXVINO_SERVING=full (make test-serving): ResNet-50 and BERT-base, Inductor as a third backend.
FULL = os.environ.get("FXVINO_SERVING", "").strip().lower() == "full"
REQUESTS, CLIENTS = 200, 8

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="TorchServe needs Java (make installs it)")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    return torchserve_scenario(
        tmp_path_factory.mktemp("torchserve"),
        tiny=not FULL,
        requests=REQUESTS,
        concurrency=CLIENTS,
        names=("resnet", "bert"),
        backends=("fxvino", "eager", "inductor") if FULL else ("fxvino", "eager"),
        compare=None if FULL else ("resnet",),
    )


def test_every_prediction_equals_eager_under_8_concurrent_clients(served):
    for name in ("resnet_fxvino", "resnet_eager", "bert_fxvino"):
        result = served[name]
        assert len(result.answers) == REQUESTS and all(status == 200 for status, _ in result.answers)
    print("\n" + TABLE_HEADER + "\n" + "\n".join(served["table"]))


def test_the_compile_report_is_in_the_worker_log(served):
    log = served["log"]
    assert "fxvino serving: fxvino (asked: fxvino), loaded in" in log
    assert "on OpenVINO in 1 partition(s), 0 in PyTorch" in log
    assert "fxvino serving: eager (asked: eager)" in log


def test_a_second_worker_starts_warm_from_the_shared_model_cache(served):
    workers = sorted(served["workers"].items(), key=lambda kv: int(kv[0]))
    assert len(workers) == 2, workers
    (_, first), (_, second) = workers
    assert first["hits"] == 0 and second["hits"] >= 2 and second["serving"] == "fxvino"
    print(f"\nworker load (compile + warm-up): cold {first['seconds']:.2f}s, warm {second['seconds']:.2f}s")


def test_malformed_requests_get_a_400_and_the_worker_keeps_serving(served):
    for status, body in served["malformed"]:
        assert status == 400 and "expected" in json.loads(body)["error"]
    assert served["after_malformed"] == [200] * 4  # and equal to eager (checked in the scenario)


def test_a_model_whose_openvino_compile_fails_still_serves(served):
    described = served["broken"]
    assert described["serving"] == "fxvino"
    (fallback,) = described["fallbacks"]
    assert fallback["ran_on"] == "inductor" and "INFERENCE_NUM_THREADS" in fallback["reason"]
    assert "fallback: g0/0.0.fused_0" in served["log"]
