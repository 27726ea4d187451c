"""The side tools' fold (app.views.fold_box): a style on the body, never a hidden model (issue 36's expand:
Panel's Card hid each child, and the browser laid the whole page out again on every page's first selection)."""
from __future__ import annotations

import panel as pn

from app.explorer import side_tools
from app.state import ExplorerState
from app.views.actions import PageActions
from app.views.fold_box import FoldBox


def test_a_fold_hides_the_body_by_its_style_and_a_click_on_the_title_line_opens_it():
    body = pn.Column(pn.pane.HTML("tools"), styles={"flex": "1 1 0"})
    actions = PageActions(on_escape=lambda: None)
    box = FoldBox(body, "Doctor · Export", actions=actions, verb="tools", css_classes=["tlx-tools"])
    assert body.styles["display"] == "" and 'data-collapsed="0"' in box._header.object
    box.collapsed = True
    assert body.styles == {"flex": "1 1 0", "display": "none"} and body.visible  # no model hidden
    assert 'data-collapsed="1"' in box._header.object and 'aria-expanded="false"' in box._header.object
    actions.dispatch("tools:toggle")  # a click on the title line
    assert not box.collapsed and body.styles["display"] == "" and body.visible


def test_a_selection_folds_the_side_tools_and_gives_the_inspector_the_column(default_loaded):
    state = ExplorerState(default_loaded)
    inspector = pn.Column()
    tools = side_tools(state, inspector, PageActions(on_escape=lambda: None))
    assert not tools.collapsed and inspector.styles["max-height"] == "45%"
    state.select_op(default_loaded.trace.ops[3].label)
    assert tools.collapsed and inspector.styles["max-height"] == "none"
    tabs = tools.box.objects[1]
    assert tabs.visible and tabs.styles["display"] == "none"  # folded by a style only
    tools.collapsed = False
    state.select_op(default_loaded.trace.ops[4].label, keep_tools_open=True)  # a side tab asked to stay open
    assert not tools.collapsed
