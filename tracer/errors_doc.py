"""Print docs/errors.md: `python -m tracer.errors_doc tracer exporters app > docs/errors.md`.

Error classes live next to the layer that raises them; the packages named on the command line
(default: tracer alone, which imports no upper layer) are imported whole so every class is listed.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

from .errors import errors_markdown


def import_all_modules(packages: tuple[str, ...] = ("tracer",)) -> None:
    """Import every module of `packages` (by name) so their error classes are registered."""
    for name in packages:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            if info.name != __name__:
                try:
                    importlib.import_module(info.name)
                except ImportError:
                    pass


if __name__ == "__main__":
    import_all_modules(tuple(sys.argv[1:]) or ("tracer",))
    print(errors_markdown(), end="")
