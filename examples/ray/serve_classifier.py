"""Serve an image classifier with fxvino on a running Ray cluster.

    ray start --head ...                        # see README.md for the cluster
    python examples/ray/serve_classifier.py --address 127.0.0.1:6390 --replicas 2 \
        --cache-dir /shared/fxvino-cache
    python -c "import numpy as np; np.save('x.npy', np.random.rand(3, 224, 224).astype('float32'))"
    curl -X POST http://127.0.0.1:8000/classifier --data-binary @x.npy   # or -d '{"data": [[[...]]]}'

Builds ResNet-50 with random weights (``--tiny``: a small ResNet) into ``--model-dir`` (every node
must see it: shared storage, or the same path built on each), deploys
:class:`fxvino.serving.ray.FxvinoDeployment` and returns; the application keeps running on the
cluster until ``serve shutdown`` (or the cluster stops).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import ray
from ray import serve

from fxvino.serving import models
from fxvino.serving.ray import FxvinoDeployment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="auto")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--model-dir", default="/tmp/fxvino-example-resnet")
    parser.add_argument("--cache-dir", default="/tmp/fxvino-serving-cache")
    parser.add_argument("--http-host", default="127.0.0.1")
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    size = 224
    if not (Path(args.model_dir) / "config.json").exists():
        models.save(models.image_classifier(**(models.TINY_RESNET if args.tiny else {})), Path(args.model_dir))
    ray.init(address=args.address)
    serve.start(http_options={"host": args.http_host, "port": args.http_port, "request_timeout_s": 60})
    app = FxvinoDeployment.options(num_replicas=args.replicas).bind(
        model=args.model_dir,
        task="image_classifier",
        input_shape=[3, size, size],
        fxvino={"model_caching": True, "cache_dir": args.cache_dir},
        max_batch_size=8,
    )
    serve.run(app, name="classifier", route_prefix="/classifier")
    print(f"serving at http://{args.http_host}:{args.http_port}/classifier (describe: .../classifier/describe)")


if __name__ == "__main__":
    main()
