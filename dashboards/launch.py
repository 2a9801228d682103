"""``python -m dashboards.launch run APP [options]``: Streamlit's own command line, started the way the dashboard
needs (dashboards/server.py runs it).

Two things happen before Streamlit listens, so the first visitor after a (re)start does not pay for them:
the modules every page imports (Polars, DuckDB, plotly, the models and their numba kernels) are imported here,
in the server process that will run the pages, instead of on the first page view (about 2-3 s on 2 cores); and
the warm-up of the serving snapshot (dashboards/prewarm.py) is started as soon as Streamlit's runtime exists,
instead of when the first visitor arrives. For the dashboard's own entry script, Streamlit's page shell also gets
the chart code preloaded (dashboards/page_shell.py). Everything else is ``streamlit.web.cli.main``.
"""
from __future__ import annotations

import logging
import sys

import duckdb  # noqa: F401  (imported for the first page view's sake, see above)
# plotly imports pandas lazily, inside figure building: two sessions' first charts at once saw it half-initialised
# ("partially initialized module 'pandas'", a failed page under the memory benchmark's five visitors)
import pandas  # noqa: F401
import plotly.graph_objects  # noqa: F401
import polars  # noqa: F401
import pyarrow  # noqa: F401
from streamlit.web import cli

# The pages' modules declare their caches when imported; before Streamlit's runtime exists it warns once per
# cache that it has none yet (the caches are created on first use, inside the runtime): not worth a log line.
logging.getLogger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)
from dashboards import (charts, exports, forecast_charts, model_reads, page_shell, prewarm, queries,  # noqa: E402,F401
                        sidebar, ui)


def warm_plotly() -> None:
    """Build one figure of every kind the pages draw. plotly loads its validators lazily, on first use, and not
    thread-safely: two sessions drawing their first charts at once could fail a page (seen under the memory
    benchmark's five concurrent visitors: an exception inside plotly's layout update)."""
    df = polars.DataFrame({"x": [1, 2], "y": [1.0, 2.0], "c": ["a", "b"]})
    charts.lines(df, "x", "y", color="c", y_title="y", hline=1.0, hline_text="t", markers=True)
    charts.bars(df, "c", "y", color="c", y_title="y", horizontal=True, reference=1.0, reference_text="t")
    charts.bars(df, "x", "y", y_title="y")
    charts.stacked_area(df, "x", "y", "c", {}, y_title="y")
    charts.heatmap(df, "x", "c", "y", z_title="z")
    charts.scatter(df, "x", "y", color="c", x_title="x", y_title="y", size="y", text="c", diagonal=True)
    fc = polars.DataFrame({"x": [3, 4], "m": [1.0, 2.0], "lo": [0.5, 1.5], "hi": [1.5, 2.5]})
    charts.forecast_band(df, fc, x="x", y="y", mean="m", lo80="lo", hi80="hi", lo95="lo", hi95="hi",
                         colour="#4E79A7", y_title="y", capacity=df, capacity_col="y", exhaustion=3)


def main() -> int:
    warm_plotly()
    page_shell.install()       # the chart code preloaded by the page shell (dashboard only)
    prewarm.note_requests()    # a page being loaded counts as a visitor for the warm-up
    prewarm.watch()            # a daemon thread; it waits for the runtime, and does nothing unless enabled
    sys.argv[0] = "streamlit"
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
