"""Small real architectures built from configs with random weights (seeded)."""
from __future__ import annotations

import torch
from torch import nn


def tiny_gpt2(n_layer: int = 2):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=32, n_layer=n_layer, n_head=4, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def tiny_llama(n_layer: int = 2, attn: str = "eager"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=n_layer, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=100, max_position_embeddings=64,
                      attn_implementation=attn)
    return LlamaForCausalLM(cfg).eval()


def tiny_bert(n_layer: int = 2):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=n_layer, num_attention_heads=4, intermediate_size=64,
                     vocab_size=100, max_position_embeddings=64)
    return BertModel(cfg).eval()


def tiny_resnet():
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    cfg = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic", num_channels=3)
    return ResNetModel(cfg).eval()


def looped_mlp(calls: int = 3, width: int = 16):
    """One residual block applied `calls` times in forward (a looped module), between two linears."""
    from torch import nn

    class LoopedMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(width, width)
            self.block = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
            self.out = nn.Linear(width, 4)

        def forward(self, x):
            x = self.inp(x)
            for _ in range(calls):
                x = x + self.block(x)
            return self.out(x)

    torch.manual_seed(0)
    return LoopedMLP().eval()


class TanhLoop(nn.Module):
    """`steps` rounds of `act(x * 0.5 + 0.1)` (three small ops each, tanh by default) on a 2x4 input, then a
    Linear: every op in the root module's own forward (the op-dense forward of the benchmarks)."""

    def __init__(self, steps: int, act=torch.tanh) -> None:
        super().__init__()
        self.steps, self.act = steps, act
        self.head = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            x = self.act(x * 0.5 + 0.1)
        return self.head(x)


def op_dense_loop(steps: int = 33_333):
    """A seeded `TanhLoop` (100,002 ops for the default, inputs and output included)."""
    torch.manual_seed(0)
    return TanhLoop(steps).eval()


def long_loop():
    """`op_dense_loop` with 700 steps: 2,100 ops in the root's own forward (more than a group draws at once)."""
    return op_dense_loop(700)


def tiny_qwen3_moe(device: str = "cpu"):
    """A 2-layer Qwen3-MoE base model (4 experts, top-2) built on `device`, in eval mode."""
    import transformers as tf

    cfg = tf.Qwen3MoeConfig(hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4,
                            num_experts_per_tok=2, vocab_size=64, max_position_embeddings=32)
    torch.manual_seed(0)
    with torch.device(device):
        model = tf.Qwen3MoeModel(cfg)
    return model.eval()
