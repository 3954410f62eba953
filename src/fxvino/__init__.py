"""fxvino: run torch.compile graphs on OpenVINO.

model = torch.compile(model, backend="fxvino", options={"device": "CPU"})
"""

from __future__ import annotations

from fxvino.backend import fxvino
from fxvino.explain import explain
from fxvino.options import Options
from fxvino.report import GraphReport, Report, collect_reports

__version__ = "0.1.0"
__all__ = ["fxvino", "explain", "collect_reports", "Options", "Report", "GraphReport", "__version__"]
