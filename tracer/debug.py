"""The earlier name of `tracer.backward.walk` (walking a loss's autograd graph outside a capture), kept importable."""
from .backward.walk import GradGraph, GradNode, sketch_grad_fn, walk_grad_fn

__all__ = ["GradGraph", "GradNode", "sketch_grad_fn", "walk_grad_fn"]
