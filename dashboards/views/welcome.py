"""First run: there is no serving snapshot, or it holds no jobs yet. Say what to do, not a traceback."""
from __future__ import annotations

import streamlit as st

from dashboards import queries, ui

state = queries.current().state()
# Viewers see the warehouse's file name only (the page may be served through a proxy); the server log, which
# only the operator reads, names the full path.
name = state.db_path.name
ui.log.info("welcome page: warehouse %s (%s)", state.db_path,
            "snapshot without jobs" if state.exists else "exists, no snapshot" if state.db_path.exists()
            else "absent")
st.title("Welcome to gpuledger")
st.markdown("Capacity and cost governance for shared GPU clusters, from Slurm accounting and GPU telemetry.")

if not state.exists:
    if state.db_path.exists():
        st.warning(f"The warehouse `{name}` exists, but no dashboard snapshot has been published from it yet.",
                   icon=":material/sync_problem:")
        st.markdown("Publish one (it is also done after every ingest):")
        st.code(f"gpuledger --db {name} refresh   # from its directory (the server log names the full path)",
                language="bash")
    else:
        st.info(f"There is no warehouse at `{name}` yet (the server log names the full path).", icon=":material/database:")
else:
    st.info(f"The snapshot of `{name}` holds no jobs yet. Load accounting, and this page turns into "
            "the dashboards.", icon=":material/inbox:")

st.subheader("Try it on a demo cluster")
st.code("gpuledger demo        # builds data/demo.duckdb from a synthetic cluster and serves it here", language="bash")
st.subheader("Or load your own cluster")
st.code(f"""export GPULEDGER_DB=/path/to/{name}
sacct --allusers --parsable2 --allocations --duplicates -S 2026-01-01 -E now > jobs.psv
gpuledger ingest sacct jobs.psv              # or: gpuledger ingest sacct --live
scontrol show node -o > nodes.txt && gpuledger ingest nodes nodes.txt
sacctmgr -P show event All_Time > events.psv && gpuledger ingest events events.psv
gpuledger ingest governance governance.toml  # teams, entitlements, rates (see data/governance.example.toml)
gpuledger dashboard""", language="bash")
st.caption("The dashboard reads a read-only snapshot that every ingest republishes; it never locks the warehouse, "
           "so ingests can run while it is open. Reload the page after an ingest.")
