"""Models exported once per session for the exporter's tests: small configs, random weights.

Exports take seconds (torch.export's trace, then lowering); every test of a model shares one
export and one saved directory, and checks what it needs against eager on this machine.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from export_helpers import Exported
from torch.export import Dim

import fxvino


def _export(tmp_path_factory, name: str, model: torch.nn.Module, *args: Any, **kw: Any) -> Exported:
    exported = fxvino.export(model, *args, **kw)
    saved = exported.save(tmp_path_factory.mktemp(name) / "ir")
    return Exported(model.eval(), exported, saved)


class MLP(torch.nn.Module):
    """Returns a dict holding a tuple: the manifest's structure has to round-trip."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        y = self.body(x)
        return {"logits": y, "extra": (y.softmax(-1), x.shape[0] > 0)}


@pytest.fixture(scope="session")
def mlp(tmp_path_factory) -> Exported:
    torch.manual_seed(0)
    batch = Dim("batch", min=1, max=32)
    return _export(tmp_path_factory, "mlp", MLP(), (torch.randn(4, 16),), dynamic_shapes=({0: batch},))


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(config)


@pytest.fixture(scope="session")
def gpt2(tmp_path_factory) -> Exported:
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 8))
    dims = {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=1, max=64)}
    return _export(
        tmp_path_factory,
        "gpt2",
        _gpt2(),
        (),
        {"input_ids": ids, "use_cache": False},
        dynamic_shapes={"input_ids": dims, "use_cache": None},
    )


@pytest.fixture(scope="session")
def bert(tmp_path_factory) -> Exported:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=128,
        max_position_embeddings=64,
    )
    ids = torch.randint(0, 128, (2, 8))
    dims = {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=1, max=64)}
    return _export(
        tmp_path_factory,
        "bert",
        BertModel(config),
        (),
        {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
        dynamic_shapes={"input_ids": dims, "attention_mask": dims},
    )
