"""What a search word means and how well a name matches it: one alias table and one ranking, read by
the app's search (`app.search_index`, `app.state`) and sent to the HTML file's search in its data
(`exporters.html.data`), whose script ranks with the same tiers.

A hit's rank is (tier, -coverage): lower tiers first, then the name the query covers most of.
  0  the exact label (an op's label, a module's address)
  1  an exact name (an op's kind or function name, a module's own name or class)
  2  an alias's exact kind or function (softmax -> scaled_dot_product_attention), or the query as a
     whole word of a name (attention in LlamaAttention or post_attention_layernorm)
  3  a substring of a name (the label, kind or function; the module's own name or class)
  4  a substring of a name through an alias (conv -> conv_transpose2d)
  5  a substring of the module path the op ran in (or of a module's full address)
Numbers match whole in tiers 3 and 5: `linear_1` is not found in `linear_10`, nor `layers.1` in `layers.12`.
"""
from __future__ import annotations

import re
from typing import Iterable

# the common words people type, and the op kinds / function names / name parts they mean
ALIASES: dict[str, tuple[str, ...]] = {
    "softmax": ("softmax", "log_softmax", "scaled_dot_product_attention"),
    "sdpa": ("scaled_dot_product_attention",),
    "attention": ("scaled_dot_product_attention", "multi_head_attention_forward", "attn"),
    "attn": ("scaled_dot_product_attention", "attention"),
    "matmul": ("matmul", "linear", "mm", "bmm", "addmm", "baddbmm", "einsum"),
    "gelu": ("gelu",),
    "norm": ("layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm", "normalize"),
    "conv": ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convolution"),
    "embedding": ("embedding", "embedding_bag", "embed"),
    "embed": ("embedding", "embedding_bag"),
}

NO_MATCH = (99, 0.0)
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def terms(query: str) -> tuple[str, ...]:
    """The alias terms a query (lower case) also stands for (not the query itself)."""
    return tuple(t for t in ALIASES.get(query, ()) if t != query)


def words_of(name: str) -> set[str]:
    """A name's words, lower case: `post_attention_layernorm` -> post, attention, layernorm;
    `LlamaRMSNorm` -> llama, rms, norm."""
    return {w.lower() for part in re.split(r"[._\s:]+", name) for w in _WORDS.findall(part)} | \
        {p.lower() for p in re.split(r"[._\s:]+", name) if p}


def contains(text: str, query: str) -> bool:
    """Whether `query` occurs in `text` without cutting a number: a query ending (starting) in a digit is
    not followed (preceded) there by another digit."""
    at = text.find(query)
    while at >= 0:
        end = at + len(query)
        cut_after = query[-1].isdigit() and end < len(text) and text[end].isdigit()
        cut_before = query[0].isdigit() and at > 0 and text[at - 1].isdigit()
        if not (cut_after or cut_before):
            return True
        at = text.find(query, at + 1)
    return False


def rank(query: str, exact: str, names: Iterable[str], path: str = "") -> tuple[int, float]:
    """The rank of one item for `query` (lower case): `exact` is its label or address, `names` its kind,
    function and class names (or a module's own name and class), `path` the module path it sits in.
    NO_MATCH when nothing matches."""
    if not query:
        return NO_MATCH
    names = [n for n in names if n]
    lowered = [n.lower() for n in names]
    if exact.lower() == query:
        return 0, 1.0
    if query in lowered:
        return 1, 1.0
    alias = terms(query)
    if any(t == n for t in alias for n in lowered):
        return 2, 1.0
    best = NO_MATCH
    for raw, low in zip(names, lowered):
        if query in words_of(raw):
            best = min(best, (2, -len(query) / len(low)))
    if best != NO_MATCH:
        return best[0], -best[1]
    for low in [exact.lower(), *lowered]:
        if contains(low, query):
            best = min(best, (3, -len(query) / len(low)))
    if best == NO_MATCH:
        for t in alias:
            for low in lowered:
                if len(t) >= 3 and t in low:
                    best = min(best, (4, -len(t) / len(low)))
    if best == NO_MATCH and path and contains(path.lower(), query):
        best = (5, -len(query) / len(path))
    return best if best == NO_MATCH else (best[0], -best[1])


def page_table() -> dict[str, list[str]]:
    """The alias table as JSON-ready data for the HTML file's search."""
    return {word: list(t) for word, t in ALIASES.items()}
