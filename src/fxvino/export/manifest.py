"""``fxvino_manifest.json``: what a saved IR needs beside its ``.xml``/``.bin`` to be called
like the model it came from, and what it was made of.

It is small, human-readable JSON: the signature (input and output names, their pytree
structure, dtypes, shapes with dynamic dims and bounds), the compile properties fxvino would
use, the versions that made it, and the op report. Plain OpenVINO never reads it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .signature import Signature

MANIFEST = "fxvino_manifest.json"
MODEL_XML = "openvino_model.xml"
MODEL_BIN = "openvino_model.bin"
FORMAT = "fxvino.export"
# 2: outputs of kind "input" (an input returned unchanged, which the IR does not output). A
# manifest without them is written as version 1, which older fxvino reads as well.
FORMAT_VERSION = 2


@dataclasses.dataclass
class Manifest:
    signature: Signature
    precision: str  # fxvino's ``precision`` option at export ("f32": results equal eager's)
    # Plugin properties the graph asks for, under the user's config (compilation/plugin_config.py).
    graph_config: dict[str, Any]
    # Every OpenVINO property fxvino compiled with on the export's device: for users of plain
    # OpenVINO (on a CPU with bf16 kernels OpenVINO computes in bf16 unless told f32).
    compile_config: dict[str, Any]
    report: dict[str, Any]  # ops on OpenVINO by name, op nodes, frozen and folded counts
    versions: dict[str, str]
    model_xml: str = MODEL_XML

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": 2 if any(leaf.kind == "input" for leaf in self.signature.outputs) else 1,
            "model": self.model_xml,
            "versions": self.versions,
            **self.signature.to_json(),
            "precision": self.precision,
            "graph_config": self.graph_config,
            "compile_config": self.compile_config,
            "report": self.report,
        }

    def write(self, directory: Path) -> Path:
        path = directory / MANIFEST
        path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")
        return path

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str = MANIFEST) -> Manifest:
        if d.get("format") != FORMAT:
            raise ValueError(
                f"{where} is not an fxvino export manifest (format {d.get('format')!r}, expected {FORMAT!r})"
            )
        version = d.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(
                f"{where} has format_version {version!r}; this fxvino reads versions up to {FORMAT_VERSION} "
                f"(it was written by fxvino {d.get('versions', {}).get('fxvino', '?')})"
            )
        try:
            return cls(
                signature=Signature.from_json(d),
                precision=d.get("precision", "f32"),
                graph_config=dict(d.get("graph_config") or {}),
                compile_config=dict(d.get("compile_config") or {}),
                report=dict(d.get("report") or {}),
                versions=dict(d.get("versions") or {}),
                model_xml=d.get("model", MODEL_XML),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"{where} is damaged: {type(e).__name__}: {e}") from e

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON: {e}") from e
        return cls.from_json(data, str(path))


def versions() -> dict[str, str]:
    import openvino as ov
    import torch

    from fxvino._version import __version__

    return {"fxvino": __version__, "openvino": ov.get_version(), "torch": torch.__version__}
