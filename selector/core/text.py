"""Text output that a detected or user-given string cannot forge.

A GPU name, a preset's gpu_name, a path or a message is printed inside one line of the text
output; a newline or a terminal escape in it could start a fake "selected:" line or rewrite
the screen, so every character that is not printable is shown as its escape.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Iterable, List, Sequence, Tuple

#: an environment variable's name a POSIX shell takes in `NAME=value command`
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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


# ---------------------------------------------------------------------------------------------
# Printed commands: every piece quoted, every name checked

def is_shell_name(name: object) -> bool:
    """Whether `name` is an environment variable name a shell takes (`[A-Za-z_][A-Za-z0-9_]*`)."""
    return isinstance(name, str) and SHELL_NAME.match(name) is not None


def shell_word(value: object) -> str:
    """One word of a printed command: shell-quoted (a space, `;`, `$(...)` stay in the word).
    A word with a character that is not printable (a newline, ESC) is written in ANSI-C
    quoting, `$'a\\nb'` (bash, zsh, ksh): still one word on one line, and the same bytes
    when pasted."""
    text = str(value)
    if text.isprintable():
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogateescape"))
    return "$'" + "".join(out) + "'"


def shell_assignment(name: str, value: object) -> str:
    """`NAME=value` for a printed command: the name must be a shell identifier (ValueError
    otherwise: a name is never quoted, so it is never printed unless it is one), the value
    quoted."""
    if not is_shell_name(name):
        raise ValueError(f"{name!r} is not an environment variable name "
                         "([A-Za-z_][A-Za-z0-9_]*)")
    return f"{name}={shell_word(value)}"


def shell_command(env: Sequence[Tuple[str, object]], argv: Sequence[object]) -> str:
    """The one rule for a command selector prints: `NAME=value ... word ...`, every name a
    checked identifier and every value and word quoted."""
    return " ".join([shell_assignment(k, v) for k, v in env] + [shell_word(a) for a in argv])
