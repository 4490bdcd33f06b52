"""Outside text (tool output, node names, messages) made safe for each rendering.

A verdict's message may quote what a node printed: ANSI colours, a bell, a NUL. XML 1.0 forbids
most control characters (a JUnit file holding one is not well-formed and CI rejects the whole
report) and a terminal acts on them; rich reads `[...]` as markup. Each rendering passes outside
text through one of these.
"""

from __future__ import annotations

import html
import re

from rich.markup import escape

from kiln.console import clean

# What XML 1.0 forbids beyond the C0 controls clean() already shows as \xNN: lone surrogates
# and the two non-characters U+FFFE and U+FFFF.
_XML_FORBIDDEN = re.compile("[\ud800-\udfff\ufffe\uffff]")


def xml_text(text: object) -> str:
    """Text every XML 1.0 parser accepts: escape sequences removed, controls shown as \\xNN."""
    return _XML_FORBIDDEN.sub("\N{REPLACEMENT CHARACTER}", clean("" if text is None else text))


def html_text(text: object) -> str:
    """xml_text, HTML-escaped (quotes too)."""
    return html.escape(xml_text(text))


def markup_text(text: object) -> str:
    """Text for a rich markup string or table cell: cleaned and its `[...]` escaped."""
    return escape(xml_text(text))
