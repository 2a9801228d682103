"""Overview: the week's governance figures against the previous period."""
from __future__ import annotations

from dashboards import ui

ctx = ui.context()
ui.header("Overview", "How well is the cluster used, is it fair, what did it cost, and when do we need more?", ctx)
ui.not_landed("The overview", "models.utilization", 5)
