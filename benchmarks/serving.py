"""Serving end to end: a real TorchServe and a real two-node Ray cluster, on loopback.

    python -m benchmarks.serving                      # ResNet-50 + BERT-base, 200 requests, 8 clients
    python -m benchmarks.serving --tiny --requests 40 # what the tests run
    python -m benchmarks.serving --only torchserve --backends fxvino,eager,inductor

TorchServe (:func:`torchserve_scenario`): each model is archived once per backend (the same
fxvino handler with ``handler.backend`` fxvino, eager or inductor), 8 concurrent clients send
the requests, every answer's logits are checked against eager PyTorch on the same input, and
p50/p99 latency and throughput are printed per backend. Then: a second worker of the fxvino
model starts on the model cache the first one filled (its load time and cache hits); malformed
requests get a 400 and the worker keeps answering; a model whose OpenVINO compile fails
(an invalid OpenVINO property) still serves, with the fallback in its report.

Ray Serve (:func:`ray_scenario`): a head and a second node started with ``ray start`` on
127.0.0.1, the fxvino deployment with one then two replicas (throughput of each), and one
replica killed in the middle of a load, with every request answered (retried if its replica
died under it) and checked.

The tests (tests/serving/) run both with tiny models; ``make bench-serving`` runs this full.
Figures from a shared machine are noisy: compare backends within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from fxvino.serving import inputs as serving_inputs
from fxvino.serving import models
from fxvino.serving.loadgen import TABLE_HEADER, LoadResult, run_load

SRC = str(Path(__file__).resolve().parents[1] / "src")
ATOL = RTOL = 1e-3  # float32 OpenVINO against eager PyTorch

# A model file for the tensor handler (torch-model-archiver --model-file: one nn.Module class).
MLP_FILE = """import torch


class TinyMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)
"""


def worker_env() -> dict[str, str]:
    """Workers import this checkout's fxvino (the tests run without installing it)."""
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": SRC + (os.pathsep + path if path else "")}


# -- requests


def png(seed: int, size: int) -> bytes:
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (size, size, 3), dtype=torch.uint8, generator=g)
    buf = io.BytesIO()
    Image.fromarray(pixels.numpy()).save(buf, format="PNG")
    return buf.getvalue()


def npy(x: torch.Tensor) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, x.numpy(), allow_pickle=False)
    return buf.getvalue()


class ImageWorkload:
    """Requests for the image classifier: PNG files (every 8th a JSON pixel tensor), and eager logits."""

    def __init__(self, model: torch.nn.Module, count: int, size: int):
        self.bodies: list[tuple[bytes, str]] = []
        pixels = []
        for i in range(count):
            image = png(i, size + 8)  # not square-sized: resize and crop are exercised
            x = serving_inputs.image_tensor(image, size)
            pixels.append(x)
            if i % 8 == 7:
                self.bodies.append((json.dumps({"data": x.tolist()}).encode(), "application/json"))
            else:
                self.bodies.append((image, "image/png"))
        with torch.no_grad():
            self.expected = torch.cat([model(torch.stack(pixels[i : i + 32])).logits for i in range(0, count, 32)])


class TextWorkload:
    """Requests for the text classifier: text (tokenized by the archived tokenizer) or token ids."""

    WORDS = ("this", "movie", "is", "good", "bad", "very", "not", "great", "the", "of", "it")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, count: int, max_length: int):
        g = torch.Generator().manual_seed(0)
        self.bodies, expected = [], []
        for i in range(count):
            n = int(torch.randint(3, max(4, max_length // 3), (1,), generator=g))
            words = [self.WORDS[int(j)] for j in torch.randint(0, len(self.WORDS), (n,), generator=g)]
            text = " ".join(words)
            ids = tokenizer(text, truncation=True, max_length=max_length)["input_ids"]
            body = {"text": text} if i % 2 == 0 else {"input_ids": ids}
            self.bodies.append((json.dumps(body).encode(), "application/json"))
            with torch.no_grad():  # eager on the unpadded sequence: padding must not change the answer
                expected.append(model(input_ids=torch.tensor([ids])).logits[0])
        self.expected = torch.stack(expected)


def check_answers(result: LoadResult, expected: torch.Tensor, name: str) -> None:
    """Every answer 200 and its logits equal to eager's; raises with the first few differences."""
    bad = []
    for i, (status, body) in enumerate(result.answers):
        if status != 200:
            bad.append(f"request {i}: HTTP {status} {body[:200]!r}")
            continue
        got = torch.tensor(json.loads(body)["logits"])
        if not torch.allclose(got, expected[i], atol=ATOL, rtol=RTOL):
            bad.append(f"request {i}: max abs diff {float((got - expected[i]).abs().max()):.2e}")
    if bad:
        raise AssertionError(f"{name}: {len(bad)} of {len(result.answers)} answers wrong:\n" + "\n".join(bad[:10]))


# -- TorchServe


def _archive_models(root: Path, tiny: bool, names: Sequence[str], backends: Sequence[str], cache_dir: Path) -> dict:
    from fxvino.serving.torchserve.launch import archive

    store, made = root / "store", {}
    batch = 4
    if "resnet" in names:
        config = models.TINY_RESNET if tiny else {}
        size = 64 if tiny else 224
        model = models.image_classifier(**config)
        files = models.save(model, root / "resnet")
        for backend in backends:
            cfg = {
                "batchSize": batch,
                "maxBatchDelay": 5,
                "responseTimeout": 600,
                "startupTimeout": 900,
                "fxvino": {"model_caching": True, "cache_dir": str(cache_dir)},
                "handler": {"backend": backend, "image_size": size, "return_logits": True},
            }
            weights = next(f for f in files if f.suffix == ".safetensors")
            extra = [f for f in files if f != weights]
            archive(
                f"resnet_{backend}", "image_classifier", store, config=cfg, serialized_file=weights, extra_files=extra
            )
        made["resnet"] = (model, size)
    if "bert" in names:
        config = models.TINY_BERT if tiny else {}
        max_length = 32 if tiny else 128
        model = models.text_classifier(**config)
        files = models.save(model, root / "bert")
        tokenizer = models.save_tokenizer(root / "bert")
        files = sorted(p for p in (root / "bert").iterdir() if p.is_file())
        for backend in backends:
            cfg = {
                "batchSize": batch,
                "maxBatchDelay": 5,
                "responseTimeout": 600,
                "startupTimeout": 900,
                "fxvino": {"model_caching": True, "cache_dir": str(cache_dir)},
                "handler": {"backend": backend, "max_length": max_length, "return_logits": True},
            }
            weights = next(f for f in files if f.suffix == ".safetensors")
            extra = [f for f in files if f != weights]
            archive(f"bert_{backend}", "text_classifier", store, config=cfg, serialized_file=weights, extra_files=extra)
        made["bert"] = (model, tokenizer, max_length)
    return made


def _archive_broken(root: Path) -> torch.nn.Module:
    """A model whose OpenVINO compile fails: an OpenVINO property with an invalid value."""
    from fxvino.serving.torchserve.launch import archive

    model_file = root / "mlp" / "tiny_mlp.py"
    model_file.parent.mkdir(parents=True, exist_ok=True)
    model_file.write_text(MLP_FILE)
    namespace: dict[str, Any] = {}
    exec(compile(MLP_FILE, str(model_file), "exec"), namespace)  # noqa: S102 - our own constant
    torch.manual_seed(0)
    model = namespace["TinyMLP"]().eval()
    weights = root / "mlp" / "tiny_mlp.pt"
    torch.save(model.state_dict(), weights)
    cfg = {
        "batchSize": 1,
        "responseTimeout": 600,
        "startupTimeout": 900,
        "fxvino": {"config": {"INFERENCE_NUM_THREADS": "not-a-number"}},
        "handler": {"input_shape": [16]},
    }
    archive("broken", "tensor", root / "store", config=cfg, serialized_file=weights, model_file=model_file)
    return model


LOADED = re.compile(
    r"W-(\d+)-(\w+?)_1\.0.*fxvino serving: (\w+) \(asked: (\w+)\), loaded in ([\d.]+)s(?:; model cache: (\d+) hit)?"
)


def worker_loads(log: str, model: str) -> dict[str, dict[str, Any]]:
    """Each worker's load line in the TorchServe log: worker id -> load seconds, cache hits."""
    loads = {}
    for m in LOADED.finditer(log):
        if m.group(2) == model:
            loads[m.group(1)] = {"seconds": float(m.group(5)), "hits": int(m.group(6) or 0), "serving": m.group(3)}
    return loads


def torchserve_scenario(
    workdir: Path,
    *,
    tiny: bool = True,
    requests: int = 200,
    concurrency: int = 8,
    names: Sequence[str] = ("resnet", "bert"),
    backends: Sequence[str] = ("fxvino", "eager"),
    compare: Sequence[str] | None = None,
    extras: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the TorchServe scenario; raises AssertionError on any wrong or missing answer.

    Every model in ``names`` is served with fxvino; those in ``compare`` (default: all) also with
    the other ``backends``.
    """
    from fxvino.serving.torchserve.launch import TorchServe

    cache_dir = workdir / "fxvino-cache"
    made = _archive_models(workdir, tiny, names, backends, cache_dir)
    broken = _archive_broken(workdir) if extras else None
    results: dict[str, Any] = {"load": {}, "table": []}
    with TorchServe(workdir / "store", workdir / "server", env=worker_env()) as ts:
        log(f"torchserve on {ts.inference_url} (management {ts.management_url})")
        for name in names:
            if name == "resnet":
                model, size = made["resnet"]
                work: Any = ImageWorkload(model, requests, size)
            else:
                model, tokenizer, max_length = made["bert"]
                work = TextWorkload(model, tokenizer, requests, max_length)
            for backend in backends:
                if backend != "fxvino" and compare is not None and name not in compare:
                    continue
                served = f"{name}_{backend}"
                t0 = time.perf_counter()
                ts.register(f"{served}.mar")
                results["load"][served] = time.perf_counter() - t0
                result = run_load(lambda i, s=served, w=work: ts.predict(s, *w.bodies[i]), requests, concurrency)
                check_answers(result, work.expected, served)
                results["table"].append(result.row(served))
                results[served] = result
                if backend != "fxvino":
                    ts.request("DELETE", f"{ts.management_url}/models/{served}")  # free the cores
        if extras and "fxvino" in backends:
            results |= _torchserve_extras(ts, names[0], made, broken, log)
        results["log"] = ts.logs()
    log(TABLE_HEADER + "\n" + "\n".join(results["table"]))
    return results


def _torchserve_extras(ts: Any, name: str, made: dict, broken: torch.nn.Module, log: Callable[[str], None]) -> dict:
    served = f"{name}_fxvino"
    out: dict[str, Any] = {}
    # A second worker on the cache the first filled.
    t0 = time.perf_counter()
    ts.scale(served, 2)
    out["scale_seconds"] = time.perf_counter() - t0
    out["workers"] = worker_loads(ts.logs(), served)
    log(f"{served} workers (id: load seconds, cache hits): {out['workers']}; scaling took {out['scale_seconds']:.1f}s")
    # Malformed requests: a 400 each, and the worker still answers.
    bad_bodies = [(b"\x89PNG not really", "image/png"), (b'{"data": [[1, 2], [3]]}', "application/json")]
    if name == "bert":
        bad_bodies = [(b'{"input_ids": [-1, "x"]}', "application/json"), (b"[1, 2]", "application/json")]
    out["malformed"] = [ts.predict(served, *b) for b in bad_bodies]
    model = made[name][0]
    if name == "resnet":
        work: Any = ImageWorkload(model, 4, made[name][1])
    else:
        work = TextWorkload(model, made[name][1], 4, made[name][2])
    after = run_load(lambda i: ts.predict(served, *work.bodies[i]), 4, 2)
    check_answers(after, work.expected, f"{served} after malformed requests")
    out["after_malformed"] = [a[0] for a in after.answers]
    # The model whose compile fails.
    ts.register("broken.mar")
    x = torch.randn(8, 16)
    bodies = [npy(row) if i % 2 else json.dumps({"data": row.tolist()}).encode() for i, row in enumerate(x)]
    answers = [ts.predict("broken", body, "application/octet-stream") for body in bodies]
    with torch.no_grad():
        expected = broken(x)
    for (status, body), want in zip(answers, expected, strict=True):
        assert status == 200, (status, body)
        torch.testing.assert_close(torch.tensor(json.loads(body)), want, atol=ATOL, rtol=RTOL)
    (desc,) = ts.describe("broken")
    out["broken"] = desc.get("customizedMetadata")
    log(f"broken model: {len(answers)} answers equal to eager; fallbacks {out['broken']['fallbacks']}")
    return out


# -- Ray Serve


def ray_scenario(
    workdir: Path,
    *,
    tiny: bool = True,
    requests: int = 200,
    concurrency: int = 8,
    compare_replicas: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the Ray scenario on a fresh local two-node cluster; raises AssertionError on a lost or wrong answer.

    With ``compare_replicas`` the deployment starts with one replica (measured), then scales to
    two (Serve restarts both replicas: both start warm on the cache the first filled); without,
    it starts with two.
    """
    from fxvino.serving.ray_cluster import LocalRayCluster

    model = models.image_classifier(**(models.TINY_RESNET if tiny else {}))
    size = 64 if tiny else 224
    model_dir = workdir / "resnet"
    models.save(model, model_dir)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(requests, 3, size, size, generator=g)
    with torch.no_grad():
        expected = torch.cat([model(xs[i : i + 32]).logits for i in range(0, requests, 32)])
    bodies = [json.dumps({"data": x.tolist()}).encode() if i % 8 == 7 else npy(x) for i, x in enumerate(xs)]
    results: dict[str, Any] = {"table": []}
    with LocalRayCluster(workdir / "ray", env=worker_env()) as cluster:
        log(f"ray cluster: {cluster.address}, nodes {cluster.node_count()}")
        results["nodes"] = cluster.node_count()
        first = 1 if compare_replicas else 2
        app = cluster.deploy_image_classifier(model_dir, size, cache_dir=workdir / "fxvino-cache", replicas=first)
        if not compare_replicas:
            results["replicas"] = cluster.wait_replicas(app, 2)
        for replicas in range(first, 3):
            if replicas == 2 and compare_replicas:
                results["first_replicas"] = cluster.replicas(app)
                t0 = time.perf_counter()
                cluster.scale(app, 2)
                results["scale_seconds"] = time.perf_counter() - t0
                results["replicas"] = cluster.replicas(app)
                log(f"second replica up in {results['scale_seconds']:.1f}s: {results['replicas']}")
            result = run_load(lambda i: cluster.predict(app, bodies[i]), requests, concurrency)
            check_answers(result, expected, f"ray, {replicas} replica(s)")
            results[f"replicas_{replicas}"] = result
            results["table"].append(result.row(f"ray serve, {replicas} replica(s)"))
        # Kill one replica in the middle of a load: every request is answered (retried if needed).
        killed: dict[str, Any] = {}

        def send(i: int) -> tuple[int, bytes]:
            if i == requests // 4:
                killed.update(cluster.kill_one_replica(app))
            return cluster.predict(app, bodies[i], retries=5)

        result = run_load(send, requests, concurrency)
        check_answers(result, expected, "ray, replica killed mid-load")
        results["killed"] = killed
        results["retries"] = cluster.retries
        results["table"].append(result.row("ray serve, one replica killed"))
        # Serve replaced it: warm from the cache.
        results["after_kill"] = cluster.wait_replicas(app, 2, exclude=results["replicas"])
        log(f"killed replica {killed}; all {requests} answered and correct, {cluster.retries} retried")
    log(TABLE_HEADER + "\n" + "\n".join(results["table"]))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny models (what the tests run)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--only", choices=("torchserve", "ray"))
    parser.add_argument("--models", default="resnet,bert")
    parser.add_argument("--backends", default="fxvino,eager,inductor")
    parser.add_argument("--workdir", help="keep archives, logs and caches here (default: a temporary directory)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the clients: leave the cores to the servers
    with contextlib.ExitStack() as stack:
        workdir = Path(args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="fxvino-serving-")))
        if args.only != "ray":
            torchserve_scenario(
                workdir / "torchserve",
                tiny=args.tiny,
                requests=args.requests,
                concurrency=args.clients,
                names=args.models.split(","),
                backends=args.backends.split(","),
            )
        if args.only != "torchserve":
            ray_scenario(workdir / "ray", tiny=args.tiny, requests=args.requests, concurrency=args.clients)
    if args.only != "ray":
        print("(TorchServe table above, Ray below; every answer was checked against eager PyTorch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
