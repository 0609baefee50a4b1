"""Text output that a detected or user-given string cannot forge.

A GPU name, a preset's gpu_name, a path or a message is printed inside one line of the text
output; a newline or a terminal escape in it could start a fake "selected:" line or rewrite
the screen, so every character that is not printable is shown as its escape.
"""
from __future__ import annotations

from typing import Any, Iterable, List


def printable(line: str) -> str:
    """`line` with every non-printable character (newline, tab, ESC, U+2028...) escaped."""
    if line.isprintable():
        return line
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in line)


def join_lines(lines: Iterable[str]) -> str:
    """Lines joined by newlines, each made printable first (so each stays one line)."""
    return "\n".join(printable(line) for line in lines)


def wrap(text: str, width: int = 70, **kw: Any) -> List[str]:
    """``textwrap.wrap`` of ``text`` made printable first: a newline or a tab in a message is
    shown as its escape, not turned into a space that the wrap may break a line at."""
    import textwrap
    return textwrap.wrap(printable(text), width=width, **kw)
