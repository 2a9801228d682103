"""The marts `gpuledger refresh` builds, by the names they record in ``mart_state`` (one freshness rule:
ingest/warehouse/mart_state.py). Builders record themselves under these names; readers check them."""
from __future__ import annotations

TIMELINE = "timeline"                # models/marts/timeline.py: occupancy and its daily rollups
EFFICIENCY = "efficiency"            # models/marts/efficiency.py: telemetry per job and hour
DEMAND = "demand"                    # models/marts/demand.py: daily demand series
OPEN_STATEMENTS = "open_statements"  # models/pipeline/open_statements.py: the newest open months' statements
LOSSES = "losses"                    # models/marts/losses.py: lost GPU-hours by cause, jobs ended per node and day
EFFICIENCY_NOTEL = "efficiency_notel"  # models/marts/efficiency_notel.py: days of jobs without telemetry

ALL = (TIMELINE, EFFICIENCY, DEMAND, OPEN_STATEMENTS, LOSSES, EFFICIENCY_NOTEL)
