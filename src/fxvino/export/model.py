"""``ExportedModel``: the result of ``fxvino.export``, an ``ov.Model`` with what calls it.

It can be saved (the IR and the manifest: ``save``), run here (``__call__``: compiled on first
call, for ``options["device"]``), or handed to OpenVINO as it is (``ov_model``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import openvino as ov

from fxvino.devices import core
from fxvino.options import Options
from fxvino.report import GraphReport

from .manifest import MODEL_XML, Manifest
from .runner import Runner
from .signature import Signature


class ExportedModel:
    """One OpenVINO model for a whole PyTorch model, with its inputs and outputs named.

    ``ov_model`` reads its weights from the PyTorch model's own tensors (no copy), which this
    object keeps alive; a saved IR owns its weights.
    """

    def __init__(self, ov_model: ov.Model, manifest: Manifest, options: Options, report: GraphReport, keep: Any):
        self.ov_model = ov_model
        self.manifest = manifest
        self.options = options
        self.report = report
        self._keep = keep  # the frozen graph: the tensors ov_model's Constants read
        self._runner: Runner | None = None
        self._lock = threading.Lock()

    @property
    def signature(self) -> Signature:
        return self.manifest.signature

    def save(self, path: str | Path) -> Path:
        """Write ``path/openvino_model.xml`` + ``.bin`` (weights as they are: f32 stays f32,
        int8/int4 stay compressed) and ``path/fxvino_manifest.json``; returns the directory."""
        directory = Path(path).expanduser()
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(
                f"ExportedModel.save: {directory} is a file; give a directory to write the IR into"
            )
        directory.mkdir(parents=True, exist_ok=True)
        ov.save_model(self.ov_model, directory / MODEL_XML, compress_to_fp16=False)
        self.manifest.write(directory)
        return directory

    @property
    def compiled_model(self) -> ov.CompiledModel:
        """``ov_model`` compiled for the export's ``device`` and ``config`` (on first use)."""
        return self._compiled().compiled

    def _compiled(self) -> Runner:
        with self._lock:
            if self._runner is None:
                t0 = time.perf_counter()
                config = self.options.compile_config(self.manifest.graph_config)
                compiled = core().compile_model(self.ov_model, self.options.device, config)
                self._runner = Runner(compiled, self.signature)
                self.report.partitions[0].compile_seconds = time.perf_counter() - t0
            return self._runner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the IR on torch tensors structured as the exported call was; returns the model's structure."""
        runner = self._runner or self._compiled()
        return runner(*args, **kwargs)

    def __repr__(self) -> str:
        ins = ", ".join(leaf.describe() for leaf in self.signature.inputs)
        outs = ", ".join(leaf.describe() for leaf in self.signature.outputs)
        return f"ExportedModel({ins} -> {outs}; {sum(self.report.ov_ops.values())} ops on OpenVINO)"
