"""The one escaping rule for every markup writer (SVG figures, the HTML page, notebook output).

`attr` is for a value inside a double- or single-quoted attribute, `text` for element content; both
escape `& < > " '` and replace what XML 1.0 cannot hold (control characters, lone surrogates,
U+FFFE/U+FFFF) with U+FFFD, so a name from a trace never ends an attribute, opens an element, or
makes the file unparsable. Never build markup from a trace's names any other way.
"""
from __future__ import annotations

import html
import re

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_chars(value: object) -> str:
    """`value` as text with every character XML 1.0 forbids replaced by U+FFFD."""
    return _NOT_XML.sub("\ufffd", str(value))


def attr(value: object) -> str:
    """`value` escaped for an attribute value (quotes included)."""
    return html.escape(xml_chars(value), quote=True)


def text(value: object) -> str:
    """`value` escaped for element content (quotes too, so the same text is also safe in an attribute)."""
    return html.escape(xml_chars(value), quote=True)
