"""Our ASGI middleware in Streamlit's web application, the one hook the dashboard's server needs from Streamlit.

Streamlit offers no way to add to its web application; it builds it from the list that
``starlette_app.create_streamlit_middleware`` returns, so that function is wrapped, in the server process, before
Streamlit starts (dashboards/launch.py). Two of ours use it: the warm-up's request counter, outermost so that it
sees every request (dashboards/prewarm.py), and the page shell's preload links, innermost so that it rewrites a page
before Streamlit compresses it (dashboards/page_shell.py). In a Streamlit without that function nothing is added
and the dashboards work as shipped.
"""
from __future__ import annotations

from starlette.middleware import Middleware
from streamlit.web.server.starlette import starlette_app

#: The attribute on the wrapped function naming the middleware classes already added (idempotence).
_ADDED = "_gpuledger_added"


def add_middleware(cls: type, *, outermost: bool, **kwargs) -> bool:
    """Add ``cls`` (an ASGI middleware class, built with ``kwargs``) to Streamlit's middleware list: first
    (``outermost``: it sees each request before Streamlit's own middleware) or last (it sees each response before
    Streamlit's compression). False when this Streamlit has no such list. Adding a class a second time does nothing
    (its first ``kwargs`` stay)."""
    make = getattr(starlette_app, "create_streamlit_middleware", None)
    if make is None:
        return False
    added = getattr(make, _ADDED, ())
    if cls in added:
        return True

    def with_ours():
        ours = Middleware(cls, **kwargs)
        return [ours, *make()] if outermost else [*make(), ours]

    setattr(with_ours, _ADDED, (*added, cls))
    starlette_app.create_streamlit_middleware = with_ours
    return True


def added() -> tuple[type, ...]:
    """The middleware classes of ours in Streamlit's list, in the order they were added."""
    return getattr(getattr(starlette_app, "create_streamlit_middleware", None), _ADDED, ())
