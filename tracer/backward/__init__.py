"""The backward pass as part of a trace: autograd nodes, gradients, saved-for-backward bytes.

`graph.backward_trace` draws the backward as a trace of its own; `memory.training_memory`,
`memory.layer_table` and `memory.training_step_memory` give training memory per module and per layer.
"""
from .records import BackwardNode, BackwardPass, SavedTensor

__all__ = ["BackwardNode", "BackwardPass", "SavedTensor"]
