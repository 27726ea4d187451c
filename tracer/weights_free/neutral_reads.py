"""Value reads whose answer cannot change the recorded structure, answered without values and disclosed.

Each entry names one function in a library (file suffix and function name) and the read it makes
there; its source was read: the answer decides only whether a message is logged, the function
returns nothing either way, so no op of the trace depends on it. Anything not listed here refuses.
"""
from __future__ import annotations

from typing import Any, NamedTuple


class NeutralRead(NamedTuple):
    file_suffix: str
    function: str
    kind: str  # FuncInfo.kind of the read
    answer: Any
    reason: str


NEUTRAL_READS = (
    NeutralRead("transformers/modeling_utils.py", "warn_if_padding_and_no_attention_mask", "contains", False,
                "transformers checks the input ids for padding only to log a warning; the answer changes no op"),
)


def neutral_read(kind: str, site: str | None) -> NeutralRead | None:
    """The registered neutral read made at `site` (`file:line in function`), or None."""
    if not site:
        return None
    path, _, rest = site.rpartition(":")
    function = rest.split(" in ", 1)[-1]
    for entry in NEUTRAL_READS:
        if entry.kind == kind and entry.function == function and path.replace("\\", "/").endswith(entry.file_suffix):
            return entry
    return None
