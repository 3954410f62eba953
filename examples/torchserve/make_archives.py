"""Build the example archives: ResNet-50 and BERT-base sequence classification, random weights.

    python examples/torchserve/make_archives.py [--store model_store] [--tiny]

Writes ``resnet50.mar`` and ``bert.mar`` into the model store. Each archive holds the model's
``save_pretrained`` files, the two-line handler file that selects fxvino's handler, and the
model-config.yaml beside this script (``--tiny``: small configurations, for a quick try).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import yaml

from fxvino.serving import models
from fxvino.serving.torchserve.launch import archive

HERE = Path(__file__).resolve().parent


def build(name: str, handler: str, model, config_file: Path, store: Path, tokenizer: bool = False) -> Path:
    config = yaml.safe_load(config_file.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / name
        models.save(model, directory)
        if tokenizer:
            models.save_tokenizer(directory)
        files = sorted(p for p in directory.iterdir() if p.is_file())
        weights = next(f for f in files if f.suffix == ".safetensors")
        extra = [f for f in files if f != weights]
        return archive(name, handler, store, config=config, serialized_file=weights, extra_files=extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="model_store")
    parser.add_argument("--tiny", action="store_true", help="small configurations instead of ResNet-50 / BERT-base")
    args = parser.parse_args()
    store = Path(args.store)
    resnet = models.image_classifier(**(models.TINY_RESNET if args.tiny else {}))
    bert = models.text_classifier(**(models.TINY_BERT if args.tiny else {}))
    print(build("resnet50", "image_classifier", resnet, HERE / "resnet50-config.yaml", store))
    print(build("bert", "text_classifier", bert, HERE / "bert-config.yaml", store, tokenizer=True))


if __name__ == "__main__":
    main()
