"""LLMs for OpenVINO GenAI: ``export_llm(model, tokenizer, path)`` writes a directory that
``openvino_genai.LLMPipeline(path, "CPU")`` loads.

The decoder goes through ``fxvino.export`` (torch.export, fxvino's decompositions and lowering
registry: the graph ``torch.compile(backend="fxvino")`` would run) as a function of flat KV
tensors (``decoder.py``); its cache then becomes OpenVINO state (``stateful.py``), and its weights
int8 or int4 on request (``weights.py``). The tokenizer becomes OpenVINO tokenizer/detokenizer IRs
(``tokenizer.py``).

The directory, as GenAI reads it (``llm/pipeline.cpp``, ``tokenizer/tokenizer_impl.cpp``):

- ``openvino_model.xml``/``.bin``: inputs ``input_ids``, ``attention_mask``, ``position_ids`` (i64),
  ``beam_idx`` (i32), output ``logits``; the model's rt_info ``runtime_options`` holds compile
  properties OpenVINO applies by itself (``KV_CACHE_PRECISION``).
- ``openvino_tokenizer.xml``, ``openvino_detokenizer.xml`` and the Hugging Face tokenizer files.
- ``config.json`` (special token ids), ``generation_config.json`` (GenAI's default generation
  settings: eos, max length).
"""

from __future__ import annotations

from .api import WEIGHTS, export_llm

__all__ = ["export_llm", "WEIGHTS"]
