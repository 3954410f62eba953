"""A Ray Serve deployment that compiles its model with fxvino in every replica.

::

    from fxvino.serving.ray import FxvinoDeployment
    app = FxvinoDeployment.options(num_replicas=2).bind(
        model="/models/resnet50",          # save_pretrained files, or "package.module:function"
        task="image_classifier",
        input_shape=[3, 224, 224],
        fxvino={"model_caching": True, "cache_dir": "/shared/fxvino-cache"},
    )
    serve.run(app, route_prefix="/resnet")

Each replica builds the model, compiles it with fxvino and warms it up at batch size 1 and
``max_batch_size`` before it takes traffic (Serve routes to a replica once its constructor has
returned). With ``model_caching`` on a directory every replica can read, a new replica (scale-up,
a replaced replica, another machine with the directory on shared storage) imports the compiled
partitions instead of compiling them. Requests are batched with ``@serve.batch``; the batch runs
on a worker thread, so the replica keeps accepting requests meanwhile.

HTTP: ``POST {"data": <one sample as a nested list>}``, or the sample as a ``.npy`` file
(``numpy.save``; far smaller than JSON for images), answers ``{"logits": [...]}`` (the model's
output row); a malformed body answers 400 saying what was expected. ``GET .../describe``
answers the replica's load summary and compile report (see :meth:`LoadedModel.describe`), with
its process id and node.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from fxvino.serving.inputs import NPY_MAGIC, BadRequest, dtype_named, tensor_from_json, tensor_from_npy
from fxvino.serving.loading import ServingConfigError, load_model


def build_model(model: str, task: str | None = None, kwargs: Mapping[str, Any] | None = None) -> torch.nn.Module:
    """A directory of ``save_pretrained`` files (with ``task``), or ``"module:function"`` returning a module."""
    if Path(model).is_dir():
        from fxvino.serving.models import load_pretrained

        if task is None:
            raise ServingConfigError(f"{model} is a directory: say task='image_classifier' or 'text_classifier'")
        return load_pretrained(model, task)
    module, sep, function = model.partition(":")
    if not sep:
        raise ServingConfigError(f"model {model!r} is neither a directory nor 'package.module:function'")
    return getattr(importlib.import_module(module), function)(**dict(kwargs or {}))


@serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=32, health_check_period_s=5)
class FxvinoDeployment:
    def __init__(
        self,
        model: str,
        input_shape: Sequence[int],
        *,
        task: str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        input_dtype: str = "float32",
        backend: str = "fxvino",
        fxvino: Mapping[str, Any] | None = None,
        max_batch_size: int = 8,
        batch_wait_timeout_s: float = 0.005,
        threads: int | None = None,
    ):
        if threads:
            torch.set_num_threads(int(threads))
        self.shape, self.dtype = tuple(input_shape), dtype_named(input_dtype)
        module = build_model(model, task, model_kwargs)
        warmup = [(self._example(n),) for n in sorted({1, int(max_batch_size)})]
        self.loaded = load_model(module, warmup, backend=backend, fxvino=fxvino)
        self.predict.set_max_batch_size(int(max_batch_size))
        self.predict.set_batch_wait_timeout_s(float(batch_wait_timeout_s))
        self.where = {"pid": os.getpid(), "node": socket.gethostname(), "node_id": _node_id()}
        print(self.loaded.summary(), flush=True)  # the replica's log

    def _example(self, batch: int) -> torch.Tensor:
        if self.dtype.is_floating_point:
            return torch.randn(batch, *self.shape, dtype=self.dtype)
        return torch.zeros(batch, *self.shape, dtype=self.dtype)

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def predict(self, samples: list[torch.Tensor]) -> list[list[Any]]:
        with self.loaded.preparing():
            batch = torch.stack(samples)
        output = await asyncio.to_thread(self.loaded, batch)
        return [row.tolist() for row in output]

    async def __call__(self, request: Request) -> Any:
        if request.method == "GET" and request.url.path.rstrip("/").endswith("/describe"):
            return self.describe()
        data = await request.body()
        try:
            with self.loaded.preparing():
                if data.startswith(NPY_MAGIC):
                    sample = tensor_from_npy(data, self.shape, self.dtype)
                else:
                    sample = tensor_from_json(json.loads(data), self.shape, self.dtype)
        except BadRequest as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        except ValueError as e:  # neither JSON nor .npy
            return JSONResponse({"error": f'expected {{"data": [...]}} as JSON, or a .npy file: {e}'}, status_code=400)
        return {"logits": await self.predict(sample)}

    def describe(self) -> dict[str, Any]:
        return {**self.loaded.describe(), **self.where}


def _node_id() -> str | None:
    import ray

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - outside a Ray worker
        return None


def build_app(args: Mapping[str, Any]) -> Any:
    """Application builder for ``serve run`` and Serve config files (KubeRay's ``serveConfigV2``)::

        serve run fxvino.serving.ray:build_app model=/models/resnet50 task=image_classifier \\
            input_shape=3,224,224 cache_dir=/shared/fxvino-cache num_replicas=2

    ``args``: ``model``, ``input_shape`` (list or comma-separated), and optionally ``task``,
    ``num_replicas``, ``max_batch_size``, ``threads``, ``backend``, ``cache_dir`` (turns
    ``model_caching`` on) and ``fxvino`` (a mapping of further options). Strings are accepted
    for numbers, as ``serve run`` passes them.
    """
    args = dict(args)
    unknown = set(args) - {"model", "input_shape", "task", "num_replicas", "max_batch_size", "threads", "backend"}
    unknown -= {"cache_dir", "fxvino", "input_dtype"}
    if unknown or "model" not in args or "input_shape" not in args:
        raise ServingConfigError(
            f"build_app needs model and input_shape; unknown: {sorted(unknown)}; valid: model, input_shape, task, "
            "num_replicas, max_batch_size, threads, backend, cache_dir, fxvino, input_dtype"
        )
    shape = args["input_shape"]
    if isinstance(shape, str):
        shape = [int(d) for d in shape.split(",") if d.strip()]
    options = dict(args.get("fxvino") or {})
    if args.get("cache_dir"):
        options |= {"model_caching": True, "cache_dir": str(args["cache_dir"])}
    deployment = FxvinoDeployment.options(num_replicas=int(args.get("num_replicas", 1)))
    return deployment.bind(
        model=str(args["model"]),
        input_shape=shape,
        task=args.get("task"),
        input_dtype=args.get("input_dtype", "float32"),
        backend=args.get("backend", "fxvino"),
        fxvino=options,
        max_batch_size=int(args.get("max_batch_size", 8)),
        threads=int(args["threads"]) if args.get("threads") else None,
    )
