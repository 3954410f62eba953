"""What the exporter and the loader refuse, and how they say it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from export_helpers import Exported

import fxvino
from fxvino.export import ExportError


class TwoBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        return torch.tanh(self.b(h)) + torch.relu(h)


def test_every_unsupported_op_is_listed_at_once():
    model = TwoBlocks()
    options = {"disabled_ops": ["aten.relu.default", "aten.tanh.default"]}
    with pytest.raises(ExportError) as caught:
        fxvino.export(model, (torch.randn(2, 8),), options=options)
    error = caught.value
    assert isinstance(error, ValueError)
    assert [(u.node, u.op) for u in error.unsupported] == [
        ("relu", "aten.relu.default"),
        ("tanh", "aten.tanh.default"),
        ("relu_1", "aten.relu.default"),
    ]
    assert all(u.reason == "listed in disabled_ops" for u in error.unsupported)
    # The model's own lines, not torch's: this file, the line of each call.
    assert error.unsupported[0].source.endswith("in forward: h = torch.relu(self.a(x))")
    assert error.unsupported[1].source.endswith("in forward: return torch.tanh(self.b(h)) + torch.relu(h)")
    assert __file__ in error.unsupported[0].source
    message = str(error)
    assert "3 of" in message and "aten.relu.default, aten.tanh.default" in message
    assert message.count("listed in disabled_ops") == 3 and message.count(" at ") == 3


def test_export_argument_errors():
    model = TwoBlocks()
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="unknown option 'disabled_op'; valid: .*disabled_ops"):
        fxvino.export(model, (x,), options={"disabled_op": []})
    with pytest.raises(ExportError, match="args must be a tuple"):
        fxvino.export(model, x)
    program = torch.export.export(model, (x,))
    with pytest.raises(ExportError, match="ExportedProgram carries its own example inputs"):
        fxvino.export(program, (x,))
    exported = fxvino.export(program)  # an ExportedProgram as it is
    with torch.no_grad():
        torch.testing.assert_close(exported(x), model(x), rtol=1e-4, atol=1e-5)


def test_state_written_in_place_is_refused():
    class Counter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            return x * 2

    with pytest.raises(ExportError, match=r"writes state in place \(calls \(buffer_mutation\)\)"):
        fxvino.export(Counter(), (torch.ones(3),))


def test_bad_inputs_say_what_is_valid(gpt2: Exported):
    loaded = fxvino.load(gpt2.saved)
    ids = torch.randint(0, 128, (2, 9))
    expected = "input_ids (int64, [batch[1..4], seq[1..64]]), use_cache=False (fixed at export)"
    for model in (gpt2.exported, loaded):
        with pytest.raises(TypeError, match=r"takes 0 positional input\(s\) and keyword\(s\) input_ids, use_cache"):
            model(ids)
        with pytest.raises(TypeError, match=r"missing input 'input_ids'; the exported model takes: ") as caught:
            model()
        assert expected in str(caught.value)
        with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'attention_masks'"):
            model(input_ids=ids, attention_masks=ids)
        with pytest.raises(TypeError, match="input input_ids has dtype torch.int32; expected torch.int64"):
            model(input_ids=ids.int())
        with pytest.raises(TypeError, match="input input_ids must be a torch.Tensor, got list"):
            model(input_ids=ids.tolist())
        with pytest.raises(ValueError, match=r"input input_ids has shape \[9\]; expected rank 2"):
            model(input_ids=ids[0])
        with pytest.raises(ValueError, match=r"size 5 in dim 0 \(shape \[5, 9\]\); expected batch in \[1, 4\]"):
            model(input_ids=torch.zeros(5, 9, dtype=torch.long))
        with pytest.raises(ValueError, match="use_cache was False when the model was exported"):
            model(input_ids=ids, use_cache=True)


def test_inputs_sharing_a_dim_must_agree(bert: Exported):
    ids = torch.randint(0, 128, (2, 9))
    with pytest.raises(ValueError, match="input attention_mask has size 8 in dim 1, input input_ids has 9 in dim 1"):
        bert.exported(input_ids=ids, attention_mask=torch.ones(2, 8, dtype=torch.long))


def test_bad_paths_and_manifests(mlp: Exported, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; give the directory ExportedModel.save wrote"):
        fxvino.load(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="has no fxvino_manifest.json; found: nothing"):
        fxvino.load(tmp_path)
    bare = tmp_path / "bare"
    shutil.copytree(mlp.saved, bare)
    (bare / "fxvino_manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="an IR without fxvino's manifest: read it with openvino.Core"):
        fxvino.load(bare)
    with pytest.raises(NotADirectoryError, match="is a file"):
        fxvino.load(_file(tmp_path))
    broken = tmp_path / "broken"
    shutil.copytree(mlp.saved, broken)
    manifest = json.loads((broken / "fxvino_manifest.json").read_text())
    (broken / "fxvino_manifest.json").write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(ValueError, match="format_version 99; this fxvino reads versions up to 2"):
        fxvino.load(broken)
    (broken / "fxvino_manifest.json").write_text("{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        fxvino.load(broken)
    (broken / "fxvino_manifest.json").write_text(
        json.dumps({**manifest, "inputs": [{"name": "y", "kind": "tensor", "port": 0}]})
    )
    with pytest.raises(ValueError, match=r"takes inputs \['x'\], its manifest names \['y'\]"):
        fxvino.load(broken)
    (broken / "openvino_model.xml").unlink()
    with pytest.raises(FileNotFoundError, match="has a manifest but no openvino_model.xml"):
        fxvino.load(broken)
    with pytest.raises(ValueError, match="OpenVINO has no device 'TPU'"):
        fxvino.load(mlp.saved, device="TPU")


def _file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not an export")
    return path
