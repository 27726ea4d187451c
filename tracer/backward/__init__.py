"""The backward pass as part of a trace: autograd nodes, gradients, saved-for-backward bytes."""
from .records import BackwardNode, BackwardPass, SavedTensor

__all__ = ["BackwardNode", "BackwardPass", "SavedTensor"]
