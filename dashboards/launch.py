"""``python -m dashboards.launch run APP [options]``: Streamlit's own command line, started the way the dashboard
needs (dashboards/server.py runs it).

Two things happen before Streamlit listens, so the first visitor after a (re)start does not pay for them:
the modules every page imports (Polars, DuckDB, plotly, the models and their numba kernels) are imported here,
in the server process that will run the pages, instead of on the first page view (about 2-3 s on 2 cores); and
the warm-up of the serving snapshot (dashboards/prewarm.py) is started as soon as Streamlit's runtime exists,
instead of when the first visitor arrives. Everything else is ``streamlit.web.cli.main``.
"""
from __future__ import annotations

import logging
import sys

import duckdb  # noqa: F401  (imported for the first page view's sake, see above)
import plotly.graph_objects  # noqa: F401
import polars  # noqa: F401
from streamlit.web import cli

# The pages' modules declare their caches when imported; before Streamlit's runtime exists it warns once per
# cache that it has none yet (the caches are created on first use, inside the runtime): not worth a log line.
logging.getLogger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)
from dashboards import charts, exports, forecast_charts, model_reads, prewarm, queries, sidebar, ui  # noqa: E402,F401


def main() -> int:
    prewarm.watch()            # a daemon thread; it waits for the runtime, and does nothing unless enabled
    sys.argv[0] = "streamlit"
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
