"""The op search index finds exactly the ops a plain scan of labels and module paths finds."""
from __future__ import annotations

import pytest

from app.search_index import SearchIndex


@pytest.fixture(scope="module")
def trace():
    from app.factory import open_factory

    return open_factory("tests.models:long_loop", (2, 4)).trace


@pytest.mark.parametrize("q", ["tanh_100", "tanh_1", "add", "head", "", "h", "_", "mul_699", "zzz", "\t", "1\nadd"])
def test_matches_equal_a_plain_scan(trace, q):
    index = SearchIndex(trace.ops)
    plain = [i for i, op in enumerate(trace.ops)
             if not q or q in op.label.lower() or q in (op.module or "").lower()] if "\t" not in q and "\n" not in q else []
    assert index.matching(q) == plain
    assert [trace.ops[i].label.lower() for i in index.matching(q)] == [index.rows[i][0] for i in plain]


def test_one_op_matching_in_label_and_module_is_listed_once(trace):
    index = SearchIndex(trace.ops)
    head = [i for i, op in enumerate(trace.ops) if op.module == "head"]
    assert head and all(index.matching("head").count(i) == 1 for i in head)
