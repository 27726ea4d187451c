"""The op search index finds exactly the ops a plain scan of labels, kinds, function names and module
paths finds; the explorer's search ranks what people type (issue 36): aliases for the common words,
the exact label first, class names matched."""
from __future__ import annotations

import pytest

from app.search_index import SearchIndex, func_name
from exporters.search_terms import ALIASES, contains, rank, words_of


@pytest.fixture(scope="module")
def trace():
    from app.factory import open_factory

    return open_factory("tests.models:long_loop", (2, 4)).trace


@pytest.fixture(scope="module")
def llama(default_loaded):
    """The weights-free Llama-3.1-8B (its attention is one scaled_dot_product_attention op a layer)."""
    from app.state import ExplorerState

    return ExplorerState(default_loaded)


def plain_scan(trace, q):
    if "\t" in q or "\n" in q:
        return []
    return [i for i, op in enumerate(trace.ops)
            if not q or any(q in f.lower() for f in (op.label, op.kind, func_name(op.func), op.module or ""))]


@pytest.mark.parametrize("q", ["tanh_100", "tanh_1", "add", "head", "", "h", "_", "mul_699", "zzz", "\t", "1\nadd", "tanh"])
def test_matches_equal_a_plain_scan(trace, q):
    index = SearchIndex(trace.ops)
    plain = plain_scan(trace, q)
    assert index.matching(q) == plain
    assert [trace.ops[i].label.lower() for i in index.matching(q)] == [index.rows[i][0] for i in plain]


def test_one_op_matching_in_label_and_module_is_listed_once(trace):
    index = SearchIndex(trace.ops)
    head = [i for i, op in enumerate(trace.ops) if op.module == "head"]
    assert head and all(index.matching("head").count(i) == 1 for i in head)


def test_words_of_splits_paths_and_class_names():
    assert {"post", "attention", "layernorm"} <= words_of("post_attention_layernorm")
    assert {"llama", "rms", "norm"} <= words_of("LlamaRMSNorm")
    assert "attention" not in words_of("self_attn")


@pytest.mark.parametrize("word", ["softmax", "sdpa", "attention"])
def test_the_common_words_find_the_attention_op(llama, word):
    hits = llama.search(word, limit=None)
    sdpa = [o.label for o in llama.trace.ops if o.kind == "scaled_dot_product_attention"]
    assert sdpa and [ident for _k, ident in hits[:len(sdpa)]] == sdpa, hits[:len(sdpa) + 2]


def test_attention_ranks_attention_modules_before_paths_that_mention_it(llama):
    hits = llama.search("attention", limit=None)
    modules = [ident for kind, ident in hits if kind == "module"]
    classes = [llama.trace.modules[a].class_name for a in modules]
    first_other = next(i for i, c in enumerate(classes) if "Attention" not in c)
    assert first_other > 0 and all("Attention" not in c for c in classes[first_other:]), classes
    ops_in_paths = [i for i, (kind, ident) in enumerate(hits) if kind == "op" and "attention" not in llama.trace[ident].kind]
    assert min(ops_in_paths) > max(i for i, (kind, _i) in enumerate(hits) if kind == "module")


def test_the_exact_label_comes_first(llama):
    assert llama.search("linear_1", limit=3)[0] == ("op", "linear_1")
    first = llama.search("lm_head", limit=3)
    assert first[0] == ("module", "lm_head")


def test_numbers_match_whole(llama):
    """`linear_1` lists linear_1, not linear_10 to linear_199; `layers.1` lists layer 1 and what is inside it."""
    ops = [ident for kind, ident in llama.search("linear_1", limit=None) if kind == "op"]
    assert ops == ["linear_1"]  # before: 111 hits, every label that starts with linear_1
    modules = [ident for kind, ident in llama.search("layers.1", limit=None) if kind == "module"]
    assert modules and all(a == "model.layers.1" or a.startswith("model.layers.1.") for a in modules), modules
    assert contains("linear_1", "linear_1") and contains("x_10_linear_1", "linear_1")
    assert not contains("linear_10", "linear_1") and not contains("layers.21", "1") and contains("a1b", "1")


def test_class_names_and_aliases_match(llama):
    mlp = [a for a, m in llama.trace.modules.items() if m.class_name == "LlamaMLP"]
    hits = llama.search("llamamlp", limit=None)
    assert [ident for _k, ident in hits[:len(mlp)]] == mlp
    linears = [o.label for o in llama.trace.ops if o.kind == "linear"]
    assert [i for k, i in llama.search("matmul", limit=None) if k == "op"][:len(linears)] == linears
    norms = {ident for k, ident in llama.search("norm", limit=None) if k == "module"}
    assert {a for a, m in llama.trace.modules.items() if "RMSNorm" in m.class_name} <= norms


def test_the_alias_table_ranks_an_alias_below_the_word_itself():
    assert rank("softmax", "softmax_1", ("softmax",)) < rank("softmax", "sdpa_1", ("scaled_dot_product_attention",))
    assert rank("norm", "x", ("layer_norm",))[0] == 2 and "norm" in ALIASES
    assert rank("zzz", "a", ("b",), "c")[0] == 99


@pytest.mark.browser
def test_the_html_files_search_ranks_like_the_app(browser, tmp_path):
    """The HTML file's search (its own script, the same alias table in its data): `sdpa` and `softmax`
    find the attention op first, `attention` lists that op before modules whose path only mentions it,
    and a module hit shows its class whole (a tiny Llama with sdpa attention: one sdpa op a layer)."""
    import torch

    import tracer
    from exporters.html import write_html
    from tests.exporters.test_html_browser import open_offline
    from tests.models import tiny_llama

    trace = tracer.trace(tiny_llama(attn="sdpa"), (torch.randint(0, 100, (1, 6)),))
    sdpa = [o.label for o in trace.ops if o.kind == "scaled_dot_product_attention"]
    assert sdpa
    page, seen = open_offline(browser, write_html(trace, tmp_path / "llama.html"), 1366, 768)
    for word in ("sdpa", "softmax", "attention"):
        page.fill("#search", word)
        first = page.locator("#hits .hit").first
        assert first.get_attribute("data-label") == sdpa[0], (word, page.locator("#hits").inner_text()[:300])
    page.fill("#search", "q_proj")
    hit = page.locator("#hits .hit.mod").first
    assert hit.inner_text().startswith("q_proj: Linear")
    whole = hit.evaluate("e => { const r = document.createRange(); r.setStart(e.firstChild, 0);"
                         " r.setEnd(e.firstChild, 'q_proj: Linear'.length); return r.getBoundingClientRect().right"
                         " <= e.getBoundingClientRect().right; }")
    assert whole  # the class is not cut
    linears = [o.label for o in trace.ops if o.kind == "linear"]
    assert "linear_1" in linears and "linear_10" in linears
    page.fill("#search", "linear_1")  # numbers match whole, as in the app
    labels = page.locator("#hits .hit").evaluate_all("es => es.map(e => e.getAttribute('data-label'))")
    assert labels[0] == "linear_1" and "linear_10" not in labels, labels
    assert not seen["errors"]
    page.close()
