"""Geometric invariants every layout must satisfy (shared by the layout, bokeh and figure tests)."""
from __future__ import annotations

from exporters.layout import Layout
from exporters.layout.checks import edge_crossings, label_overflows

EPS = 1e-6


def _disjoint(a, b) -> bool:
    return a[2] <= b[0] + EPS or b[2] <= a[0] + EPS or a[3] <= b[1] + EPS or b[3] <= a[1] + EPS


def _inside(inner, outer) -> bool:
    return inner[0] >= outer[0] - EPS and inner[1] >= outer[1] - EPS and inner[2] <= outer[2] + EPS and inner[3] <= outer[3] + EPS


def _under(module: str, frame_address: str) -> bool:
    return frame_address == "" or module == frame_address or module.startswith(frame_address + ".")


def check_layout(layout: Layout, trace) -> None:
    """Assert the layout invariants; raises AssertionError naming the first violation."""
    node_boxes = {n.id: n.bounds for n in layout.nodes}
    frame_boxes = [((f.x0, f.y0, f.x1, f.y1), f) for f in layout.frames]
    assert len(node_boxes) == len(layout.nodes), "node ids are not unique"
    # every box lies on the canvas
    for nid, b in node_boxes.items():
        assert b[0] >= -EPS and b[1] >= -EPS and b[2] <= layout.width + EPS and b[3] <= layout.height + EPS, nid
    # leaf boxes never overlap one another
    items = sorted(node_boxes.items(), key=lambda kv: kv[1][0])
    for i, (a_id, a) in enumerate(items):
        for b_id, b in items[i + 1:]:
            if b[0] >= a[2] - EPS:
                break
            assert _disjoint(a, b), f"boxes {a_id} and {b_id} overlap"
    # frames nest or stay apart; a box is inside a frame or outside it, never across its border
    for i, (fa, f) in enumerate(frame_boxes):
        for fb, g in frame_boxes[i + 1:]:
            assert _disjoint(fa, fb) or _inside(fa, fb) or _inside(fb, fa), f"frames {f.address} and {g.address} cross"
        for nid, b in node_boxes.items():
            assert _disjoint(b, fa) or _inside(b, fa), f"box {nid} crosses frame {f.address}"
    # children lie inside their frames (inside one of a module's call frames when several calls are open)
    calls_of: dict[str, list] = {}
    for box, f in frame_boxes:
        calls_of.setdefault(f.address, []).append(box)
    for n in layout.nodes:
        if n.kind == "io" or n.module is None:
            continue
        for address, boxes in calls_of.items():
            own = n.kind in ("module", "folded") and n.module == address
            if _under(n.module, address) and not own:
                assert any(_inside(node_boxes[n.id], box) for box in boxes), \
                    f"{n.id} ({n.module}) lies outside frame {address!r}"
    # every op not hidden is drawn somewhere, and every data edge between two boxes is drawn
    assert set(layout.visible) == {op.label for op in trace.ops} - layout.hidden
    assert set(layout.visible.values()) <= set(node_boxes)
    drawn = {(e.source, e.target) for e in layout.edges}
    for op in trace.ops:
        for e in op.parents:
            if e.source in layout.hidden or op.label in layout.hidden:
                continue
            s, t = layout.visible[e.source], layout.visible[op.label]
            if s != t:
                assert (s, t) in drawn, f"edge {e.source}->{op.label} ({s}->{t}) missing"
    # edges start at the source's bottom, end at the target's top, and run downward unless declared back-edges
    for e in layout.edges:
        s, t = node_boxes[e.source], node_boxes[e.target]
        assert abs(e.points[0][1] - s[3]) < EPS and abs(e.points[-1][1] - t[1]) < EPS
        if not e.back_edge:
            assert t[1] > s[3], f"forward edge {e.source}->{e.target} does not run downward"
            ys = [p[1] for p in e.points]
            assert ys == sorted(ys), f"edge {e.source}->{e.target} turns upward"
    # edges run around boxes, never through a box they do not connect nor over a frame's header,
    # and every label fits its box
    crossings = edge_crossings(layout)
    assert not crossings, f"{len(crossings)} edge-box crossings, first: {crossings[:3]}"
    overflows = label_overflows(layout)
    assert not overflows, f"labels wider than their boxes: {overflows[:5]}"
