"""Print docs/errors.md: `python -m tracer.errors_doc > docs/errors.md`."""
from __future__ import annotations

import importlib
import pkgutil

import tracer

from .errors import errors_markdown


def import_all_modules() -> None:
    """Error classes may live next to the code that raises them: import every tracer module."""
    for info in pkgutil.walk_packages(tracer.__path__, "tracer."):
        if info.name != __name__:
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass


if __name__ == "__main__":
    import_all_modules()
    print(errors_markdown(), end="")
