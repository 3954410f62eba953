"""Runs every Python block of the user guide (docs/user-guide/*.md) as a test, with Sybil.

The blocks of one page run in order in one namespace, so a page reads as one script. Models are
built from small configs with random weights (nothing is downloaded). A block that needs a
server or a long run is preceded by a MyST comment ``% skip: next "why; which make target runs
it"``: Sybil reports it as skipped with that reason, and the page says so in its text.
Setup that a reader need not see (a tiny model standing in for "your model") goes in
``% invisible-code-block: python`` comments.

Each page starts from a clean Dynamo state and ends with ``fxvino.reset()``, so compiled models
of one page neither serve nor hold memory for the next.
"""

from __future__ import annotations

import os
from pathlib import Path

from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

REPO = str(Path(__file__).resolve().parents[1])


def _setup(namespace: dict) -> None:
    import torch

    namespace["REPO"] = REPO  # pages that reach test helpers (tests/diffusion) find them here
    namespace["_cwd"] = os.getcwd()

    torch._dynamo.reset()
    torch.manual_seed(0)


def _teardown(namespace: dict) -> None:
    import fxvino

    os.chdir(namespace["_cwd"])  # a page may work in its temporary directory
    fxvino.reset()  # first: Dynamo keeps entries in the page's globals (the namespace) until then
    namespace.clear()


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser()],
    patterns=["user-guide/*.md"],
    setup=_setup,
    teardown=_teardown,
    fixtures=["tmp_path"],
).pytest()
