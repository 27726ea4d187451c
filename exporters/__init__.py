"""Exporters: Trace to Model Explorer JSON, graph layouts and Bokeh figures (read the IR only)."""
