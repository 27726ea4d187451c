"""The views a trace opens in, found by entry point: tracer itself names none of them.

`tracer.explore(trace)`, `Trace.to_html(path)` and a trace's rich display in Jupyter call the
views an installed package registers under the entry-point group `torchlens_explore.views`
(this project's `app` and `exporters` register `explore` and `html`). So `import tracer` needs
torch alone and the layering (app -> exporters -> tracer) holds; with no view installed the
call refuses typed.
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import ViewerUnavailableError

GROUP = "torchlens_explore.views"


def view(name: str) -> Callable[..., Any]:
    """The callable registered as `name` in the group, or a typed refusal."""
    from importlib.metadata import entry_points

    found = sorted((ep for ep in entry_points(group=GROUP) if ep.name == name), key=lambda ep: ep.value)
    if not found:
        raise ViewerUnavailableError(f"no installed package registers the view {name!r} (entry-point group {GROUP})",
                                     site=f"tracer.frontends.view({name!r})", view=name)
    return found[0].load()


def explore(trace: Any, **options: Any) -> Any:
    """The explorer of `trace` for a notebook cell: the self-contained page inline (offline), or
    with `live=True` the app's own Panel components bound to the kernel."""
    return view("explore")(trace, **options)


def html_repr(trace: Any) -> str | None:
    """The inline explorer as HTML for Jupyter's rich display; None (plain repr) when no view is installed."""
    try:
        return view("explore")(trace)._repr_html_()
    except ViewerUnavailableError:
        return None
