"""The old name of `tracer.capture.kernel.native` (the C kernel's loader), kept for imports that use it:
this module IS that one (the same module object, so setting an attribute here sets it there)."""
import sys

from .kernel import native as _native

sys.modules[__name__] = _native
