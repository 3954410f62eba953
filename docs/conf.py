"""Sphinx configuration of fxvino's documentation (MyST Markdown; ``make docs`` builds it).

The pages are Markdown that GitHub also renders, so links between them are relative ``.md``
paths. Links to files of the repository outside ``docs/`` (benchmark results, examples, tests)
become downloads of those files in the site (``repo_file_links`` below), not cross-references
that Sphinx could not resolve.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# Document the work tree's own package, as the tests do (pyproject's pythonpath = src), unless
# PYTHONPATH names one explicitly (it then stays first).
_given = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path in sys.path]
sys.path.insert(max((sys.path.index(path) + 1 for path in _given), default=0), str(ROOT / "src"))

project = "fxvino"
author = "the fxvino authors"
copyright = "2026, the fxvino authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "conftest.py", "README.md"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = "fxvino"
# Room for 100-column code blocks (the examples keep to ruff's 120 at most).
html_theme_options = {"page_width": "1180px", "body_max_width": "none"}
html_static_path: list[str] = []

# Quiet: autodoc imports fxvino (torch and openvino, a few seconds) and compiles nothing. The
# TorchServe handlers' autodoc
# imports TorchServe's base handler, which logs the optional accelerators it lacks and imports
# the OpenVINO wheel's torch backend (a torch deprecation warning): neither is about fxvino.
logging.getLogger("ts.torch_handler.base_handler").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", message=".*inline_inbuilt_nn_modules", category=FutureWarning)


# ----------------------------------------------------------------------------- repository links
# A page links a repository file outside docs/ (benchmarks/results.md, tests/..., examples/...) by
# its relative path, which GitHub follows. Sphinx would take a ``.md`` target for a page of the
# site and fail to find it; MyST's ``path:`` scheme makes it a download of the file instead.
_LINK = re.compile(r"\]\((?P<target>\.\./[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")


def repo_file_links(app, docname: str, source: list[str]) -> None:
    page_dir = (DOCS / docname).parent

    def rewrite(match: re.Match) -> str:
        target = (page_dir / match["target"]).resolve()
        if target.is_relative_to(DOCS):
            return match[0]
        return f"](path:{match['target']})"

    source[0] = _LINK.sub(rewrite, source[0])


def setup(app) -> None:
    app.connect("source-read", repo_file_links)
