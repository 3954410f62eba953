"""TorchServe handlers that compile the model with fxvino.

TorchServe's stock ``BaseHandler`` only compiles with the ``pt2`` backends it knows, so it
refuses ``fxvino``. These handlers read an ``fxvino:`` section of ``model-config.yaml`` (the
options of ``torch.compile(..., backend="fxvino")``, plus ``mode``) and a ``handler:`` section
(what the handler itself needs), compile and warm the model up in ``initialize``, and write
fxvino's compile report to the worker log. The same report, as JSON, answers TorchServe's
customized describe (``GET /models/NAME?customized=true``).

TorchServe loads a handler module that defines exactly one class, so each handler has its
own module:

- ``--handler fxvino.serving.torchserve.tensor_handler``: JSON tensors in and out, for any
  ``torch.nn.Module`` archived with ``--model-file`` (and a state dict as ``--serialized-file``);
- ``--handler fxvino.serving.torchserve.image_classifier``: images (or JSON pixel tensors) to
  top-k classes, for a transformers image classifier saved with ``save_pretrained``;
- ``--handler fxvino.serving.torchserve.text_classifier``: text (with the archived tokenizer) or
  token ids to labels, for a transformers sequence classifier saved with ``save_pretrained``.

Each request of a batch is checked on its own: a malformed one gets a 400 answer saying what
was expected, and the others in its batch are served.
"""

from __future__ import annotations

from fxvino.serving.torchserve.base import FxvinoHandler
from fxvino.serving.torchserve.image_classifier import FxvinoImageClassifier
from fxvino.serving.torchserve.tensor_handler import FxvinoTensorHandler
from fxvino.serving.torchserve.text_classifier import FxvinoTextClassifier

__all__ = ["FxvinoHandler", "FxvinoImageClassifier", "FxvinoTensorHandler", "FxvinoTextClassifier"]
