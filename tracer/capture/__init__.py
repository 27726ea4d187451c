"""Capture: the scoped recording session and the step that turns it into a Trace."""
