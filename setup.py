"""The one build step pyproject.toml cannot state: the optional C extension of the capture's hot path.

Optional: where no C compiler is found the install goes on, and the capture runs its Python path
(`tracer/capture/hotpath.py`).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("tracer.capture._hotpath", ["tracer/capture/_hotpath.c"], optional=True)])
