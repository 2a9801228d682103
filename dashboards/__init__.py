"""Streamlit dashboards over the serving snapshot: app.py is the entry script, server.py starts it."""
