"""Streamlit dashboards over the serving snapshot (see dashboards/app.py); ``serve`` starts them."""
from __future__ import annotations


def serve(db_path, port: int = 8501, host: str = "127.0.0.1") -> int:
    """Serve the dashboards for the warehouse ``db_path`` on http://host:port until interrupted."""
    from dashboards.server import serve as _serve
    return _serve(db_path, port, host)
