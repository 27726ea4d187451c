"""The views a trace opens in, found by entry point: tracer itself names none of them.

`tracer.explore(trace)`, `Trace.to_html(path)` and a trace's rich display in Jupyter call the
views an installed package registers under the entry-point group `torchlens_explore.views`
(this project's `app` and `exporters` register `explore`, `html` and `draw`: `Trace.draw`). So `import tracer` needs
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
    if not found:  # a stale metadata folder earlier on sys.path (a checkout's *.egg-info) can hide the installed one
        found = _every_distribution(name)
    if not found:
        raise ViewerUnavailableError(f"no installed package registers the view {name!r} (entry-point group {GROUP})",
                                     site=f"tracer.frontends.view({name!r})", view=name)
    return found[0].load()


def _every_distribution(name: str) -> list[Any]:
    """Entry points named `name` in the group from every distribution found, shadowed copies included."""
    from importlib.metadata import distributions

    eps = {ep.value: ep for dist in distributions() for ep in dist.entry_points if ep.group == GROUP and ep.name == name}
    return [eps[k] for k in sorted(eps)]


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


def draw(trace: Any, path: Any = None, **options: Any) -> Any:
    """The figure of `trace` (the `draw` view): SVG text with no `path`, else the path written."""
    return view("draw")(trace, path, **options)
