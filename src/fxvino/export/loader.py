"""``fxvino.load``: a saved export as a callable over torch tensors.

Loading reads the manifest and the IR and compiles it; calling binds the arguments as the
manifest says. Nothing here traces or imports the compiler (no Dynamo, no torch.export, no
lowerings): a serving process pays for ``import torch``, OpenVINO and the compile of the IR only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openvino as ov

from fxvino.devices import core
from fxvino.options import Options
from fxvino.quantization.saturation import saturation_note

from .manifest import MANIFEST, Manifest
from .runner import Runner
from .signature import Signature


class LoadedModel:
    """A saved export, compiled for one device; call it as the exported model was called.

    ``notes`` says what this device computes differently from PyTorch that the exporting machine
    may not have (int8 products that may saturate on a CPU without VNNI), as a report's notes do.
    """

    def __init__(self, directory: Path, manifest: Manifest, compiled: ov.CompiledModel, notes: list[str]):
        self.path = directory
        self.manifest = manifest
        self.compiled_model = compiled
        self.notes = notes  # what this device computes differently from PyTorch, as a report's notes
        self._runner = Runner(compiled, manifest.signature)

    @property
    def signature(self) -> Signature:
        return self.manifest.signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._runner(*args, **kwargs)

    def __repr__(self) -> str:
        ins = ", ".join(leaf.describe() for leaf in self.signature.inputs)
        return f"LoadedModel({self.path}: {ins})"


def load(path: str | Path, device: str = "CPU", config: Mapping[str, Any] | None = None) -> LoadedModel:
    """Load what ``ExportedModel.save(path)`` wrote and compile it for ``device``.

    ``config`` holds OpenVINO properties, applied over the ones fxvino compiles with (the
    export's precision, the graph's own wishes), as in ``torch.compile``'s ``options["config"]``.
    """
    directory = _directory(path)
    manifest = Manifest.read(directory)
    xml = directory / manifest.model_xml
    if not xml.is_file():
        raise FileNotFoundError(
            f"fxvino.load: {directory} has a manifest but no {manifest.model_xml} (the IR it describes)"
        )
    options = Options.parse({"device": device, "config": config, "precision": manifest.precision})
    model = core().read_model(xml)
    _check_ports(model, manifest, xml)
    compiled = core().compile_model(model, options.device, options.compile_config(manifest.graph_config))
    # The IR was exported where its int8 products may not saturate; this CPU may be one where they do.
    notes = []
    if (saturation := saturation_note(compiled, options.device)) is not None:
        saturation.log(f"fxvino.load of {directory}")
        notes.append(saturation.text)
    return LoadedModel(directory, manifest, compiled, notes)


def _directory(path: str | Path) -> Path:
    """The export's directory: ``path`` itself, or the directory of its manifest or IR file."""
    p = Path(path).expanduser()
    if p.is_file() and (p.name == MANIFEST or p.suffix in (".xml", ".bin")):
        p = p.parent
    if not p.exists():
        raise FileNotFoundError(f"fxvino.load: {p} does not exist; give the directory ExportedModel.save wrote")
    if not p.is_dir():
        raise NotADirectoryError(f"fxvino.load: {p} is a file; give the directory ExportedModel.save wrote")
    if not (p / MANIFEST).is_file():
        found = sorted(x.name for x in p.iterdir())[:10]
        hint = (
            " (an IR without fxvino's manifest: read it with openvino.Core().read_model)"
            if any(name.endswith(".xml") for name in found)
            else ""
        )
        raise FileNotFoundError(f"fxvino.load: {p} has no {MANIFEST}{hint}; found: {', '.join(found) or 'nothing'}")
    return p


def _check_ports(model: ov.Model, manifest: Manifest, xml: Path) -> None:
    """The IR's ports must be the ones the manifest names, in its order: a manifest copied next
    to another model would otherwise bind inputs to the wrong ports."""
    want = [leaf.name for leaf in manifest.signature.tensor_inputs]
    have = [next(iter(sorted(p.get_names())), "?") for p in model.inputs]
    have_all = [p.get_names() for p in model.inputs]
    if len(want) != len(have) or any(w not in names for w, names in zip(want, have_all, strict=False)):
        raise ValueError(
            f"fxvino.load: {xml} takes inputs {have}, its manifest names {want}: they do not belong together"
        )
