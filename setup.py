"""The one build step pyproject.toml cannot state: the optional C extensions of the capture's hot path.

Optional: where no C compiler is found the install goes on, and the capture runs its Python path
(`tracer/capture/hotpath.py`).
"""
from setuptools import Extension, setup

_SHARED = ["tracer/capture/_slots.h"]
setup(ext_modules=[
    Extension("tracer.capture._walk", ["tracer/capture/_walk.c"], optional=True),  # before the forward
    Extension("tracer.capture._hotpath", ["tracer/capture/_hotpath.c"], depends=_SHARED, optional=True),  # during it
    Extension("tracer.capture._assembly", ["tracer/capture/_assembly.c"], depends=_SHARED, optional=True),  # after it
])
