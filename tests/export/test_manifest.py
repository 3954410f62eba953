"""The saved export: the manifest's content, save/load round trips, and loading in a process
that has never traced anything."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import textwrap

import openvino as ov
import torch
from export_helpers import Exported

import fxvino
from fxvino.export.manifest import Manifest


def test_manifest_of_gpt2(gpt2: Exported):
    manifest = json.loads((gpt2.saved / "fxvino_manifest.json").read_text())
    assert manifest["format"] == "fxvino.export" and manifest["format_version"] == 1
    assert manifest["versions"] == {
        "fxvino": fxvino.__version__,
        "openvino": ov.get_version(),
        "torch": torch.__version__,
    }
    batch, seq = {"name": "batch", "min": 1, "max": 4}, {"name": "seq", "min": 1, "max": 64}
    assert manifest["inputs"] == [
        {"name": "input_ids", "kind": "tensor", "dtype": "int64", "shape": [batch, seq], "port": 0},
        {"name": "use_cache", "kind": "constant", "value": False},
    ]
    assert manifest["outputs"] == [
        {"name": "logits", "kind": "tensor", "dtype": "float32", "shape": [batch, seq, 128], "port": 0}
    ]
    assert manifest["dynamic_dims"] == {"batch": {"min": 1, "max": 4}, "seq": {"min": 1, "max": 64}}
    assert manifest["out_spec"][1]["type"] == "transformers.modeling_outputs.CausalLMOutputWithCrossAttentions"
    assert manifest["compile_config"]["INFERENCE_PRECISION_HINT"] == "f32"
    report = manifest["report"]
    assert report["ops_on_openvino"] == dict(gpt2.exported.report.ov_ops)
    assert report["op_nodes"] == sum(report["ops_on_openvino"].values()) > 100
    assert report["ops_on_openvino"]["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 2
    assert report["frozen_inputs"] > 0
    # What is read back is what was exported.
    read = Manifest.read(gpt2.saved)
    assert read.signature.inputs == gpt2.exported.signature.inputs
    assert read.signature.outputs == gpt2.exported.signature.outputs
    assert read.signature.in_spec == gpt2.exported.signature.in_spec
    assert read.signature.out_spec == gpt2.exported.signature.out_spec
    # The IR carries the names and bounds too, for users of plain OpenVINO.
    model = ov.Core().read_model(gpt2.saved / "openvino_model.xml")
    assert [(p.any_name, str(p.get_partial_shape())) for p in model.inputs] == [("input_ids", "[1..4,1..64]")]
    assert [p.any_name for p in model.outputs] == ["logits"]


def test_round_trip_keeps_the_structure(mlp: Exported, tmp_path):
    x = torch.randn(5, 16)
    direct = mlp.exported(x)
    loaded = fxvino.load(mlp.saved / "fxvino_manifest.json")  # the manifest's path works too
    again = loaded(x)
    assert again.keys() == direct.keys() and isinstance(again["extra"], tuple)
    torch.testing.assert_close(again["logits"], direct["logits"], rtol=0, atol=0)
    torch.testing.assert_close(again["extra"][0], direct["extra"][0], rtol=0, atol=0)
    assert again["extra"][1] is True
    # Saved twice, the same bytes: nothing in the IR or manifest depends on the save.
    second = mlp.exported.save(tmp_path / "again")
    assert (second / "openvino_model.bin").read_bytes() == (mlp.saved / "openvino_model.bin").read_bytes()


def test_a_function_exports_too():
    """Inputs named after the function's parameters; a boolean output stays boolean in the IR; the
    same value twice gets names of its own; an output that is an input is not in the IR (the
    manifest says which input it returns) and comes back as the caller's tensor."""
    x, w = torch.randn(3, 4), torch.randn(4, 2)

    def fn(a, b):
        y = (a @ b).relu() + 1
        return y, y > 1.5, a, y

    exported = fxvino.export(fn, (x, w))
    model = exported.ov_model
    assert [p.get_names() for p in model.inputs] == [{"a"}, {"b"}]
    assert [p.get_names() for p in model.outputs] == [{"output.0"}, {"output.1"}, {"output.3"}]
    assert exported.signature.outputs[2].to_json() == {
        "name": "output.2",
        "kind": "input",
        "dtype": "float32",
        "shape": [3, 4],
        "input": "a",
        "copy": False,
    }
    assert model.output("output.1").get_element_type() == ov.Type.boolean
    y, mask, a, again = exported(x, w)
    expected = (x @ w).relu() + 1
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(again, expected)
    assert mask.dtype == torch.bool and torch.equal(mask, expected > 1.5)
    assert a is x


def test_an_unknown_result_type_comes_back_as_a_dict(gpt2: Exported, tmp_path, caplog):
    moved = tmp_path / "moved"
    shutil.copytree(gpt2.saved, moved)
    manifest = json.loads((moved / "fxvino_manifest.json").read_text())
    manifest["out_spec"][1]["type"] = "fxvino_no_such_package.ModelOutput"
    (moved / "fxvino_manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        loaded = fxvino.load(moved)
    assert "fxvino_no_such_package.ModelOutput cannot be imported here" in caplog.text
    ids = torch.randint(0, 128, (1, 6))
    out = loaded(input_ids=ids)
    assert type(out) is dict and list(out) == ["logits"]
    with torch.no_grad():
        torch.testing.assert_close(
            out["logits"], gpt2.model(input_ids=ids, use_cache=False).logits, rtol=1e-4, atol=1e-5
        )


_FRESH = textwrap.dedent(
    """
    import json, sys
    import torch
    import fxvino

    model = fxvino.load(sys.argv[1])
    x, expected = torch.load(sys.argv[2])
    out = model(x)
    compiler = ("torch._dynamo", "torch._inductor", "fxvino.backend", "fxvino.capture",
                "fxvino.lowering.ops.elementwise", "transformers")
    print(json.dumps({
        "diff": float((out["logits"] - expected).abs().max()),
        "imported": sorted(m for m in compiler if m in sys.modules),
    }))
    """
)


def test_load_needs_no_tracing(mlp: Exported, tmp_path):
    """A process that only loads and runs an export imports neither Dynamo nor the compiler (the
    lowerings, capture)."""
    x = torch.randn(3, 16)
    with torch.no_grad():
        torch.save((x, mlp.model(x)["logits"]), tmp_path / "case.pt")
    run = subprocess.run(
        [sys.executable, "-c", _FRESH, str(mlp.saved), str(tmp_path / "case.pt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["imported"] == []
    assert result["diff"] < 1e-5
