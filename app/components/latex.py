"""Written arithmetic that never runs off its box: a LaTeX line longer than a narrow page holds
is broken at its top-level equals signs into aligned lines, and a part still too long at its
top-level plus signs, so the result is always on screen (KaTeX does not wrap a display line)."""

from __future__ import annotations

import re
from functools import lru_cache

LINE = 72  # visible characters a display line holds in the main column at 1280 px (KaTeX, about 10 px each)
_COMMAND = re.compile(r"\\(text|mathrm|operatorname)\{([^{}]*)\}")
_NAME = re.compile(r"\\[a-zA-Z]+\s*")
_UNSHOWN = re.compile(r"[{}_^]|\\[,;: ]")


@lru_cache(maxsize=4096)  # the worked example's payload asks for the same parts' lengths again and again
def visible(latex: str) -> int:
    """About how many characters ``latex`` shows: commands count as one, braces and scripts' marks as none."""
    shown = _COMMAND.sub(lambda match: match.group(2), latex)
    shown = _NAME.sub("#", shown)
    return len(_UNSHOWN.sub("", shown))


def _split_top(latex: str, separator: str) -> list[str]:
    """``latex`` split at ``separator`` where it stands outside every brace and bracket."""
    if separator not in latex:
        return [latex]
    parts, depth, start, i = [], 0, 0, 0
    while i < len(latex):
        char = latex[i]
        if depth == 0 and latex.startswith(separator, i):
            parts.append(latex[start:i])
            start = i = i + len(separator)
            continue
        if char == "\\" and i + 1 < len(latex):  # an escaped character or a command's first letter: skipped
            i += 2
            continue
        if char in "{([":
            depth += 1
        elif char in "})]":
            depth -= 1
        i += 1
    return parts + [latex[start:]]


def _chunks(part: str, limit: int) -> list[str]:
    """A right-hand side cut into pieces of about ``limit`` visible characters at its top-level
    " + " (each piece after the first starts with its +)."""
    terms = _split_top(part, " + ")
    pieces = [terms[0]]
    for term in terms[1:]:
        if visible(pieces[-1]) + visible(term) + 3 > limit:
            pieces.append("+ " + term)
        else:
            pieces[-1] += " + " + term
    return pieces


def wrapped(latex: str, limit: int = LINE) -> list[str]:
    """``latex`` as display lines: as it is where it fits in ``limit`` visible characters; else
    each statement (they are separated by \\quad or ",\\ ") on its own, and a statement too long as an
    aligned block with one "= …" per line (long sums continued on lines of their own)."""
    if visible(latex) <= limit or "\\\\" in latex or "&" in latex:
        return [latex]
    # statements side by side, separated by \quad or ",\ ": each its own line (not one false chain of "=")
    statements = [part.strip().rstrip(",") for s in _split_top(latex, r"\quad") for part in _statements(s)]
    if len(statements) > 1:
        return [line for statement in statements if statement for line in wrapped(statement, limit)]
    return [_aligned(latex, limit)]


def _statements(latex: str) -> list[str]:
    """``latex`` split at top-level ",\\ " where what follows is a statement of its own (it has an
    "="); a list of values ("1.0000,\\ 0.0000") stays together."""
    parts: list[str] = []
    for part in _split_top(latex, r",\ "):
        if parts and len(_split_top(part, "=")) == 1:
            parts[-1] += r",\ " + part
        else:
            parts.append(part)
    return parts


def _aligned(latex: str, limit: int) -> str:
    first, *rest = _split_top(latex, "=")
    if not rest:
        return latex
    lines = []
    room = max(limit - visible(first) - 2, 24)  # every right-hand line starts after the left-hand side
    for i, part in enumerate(rest):
        for j, piece in enumerate(_chunks(part.strip(), room)):
            start = (first.strip() + " " if i == 0 and j == 0 else "") + ("&= " if j == 0 else r"&\quad ")
            lines.append(start + piece)
    return r"\begin{aligned} " + r" \\ ".join(lines) + r" \end{aligned}"


def written(lines: list[str], limit: int = LINE) -> list[str]:
    """Arithmetic's lines as display lines. A chain (a line, then lines that start with = or +
    and continue it) is one aligned block: the line first, each "= …" below it with its sum
    broken at top-level plus signs to fit, so "= 0.0047" lines up under the sum it ends. Any
    other line is ``wrapped``."""
    groups: list[list[str]] = []
    for line in (line.strip() for line in lines if line.strip()):  # an empty line shows nothing
        if groups and line.startswith("+"):  # a sum continued: part of the line above
            groups[-1][-1] += " " + line
        elif groups and line.startswith("="):
            groups[-1].append(line)
        else:
            groups.append([line])
    shown = []
    for head, *chain in groups:
        if not chain:
            shown += wrapped(head, limit)
            continue
        rows = []
        if visible(head) <= limit:
            rows.append("& " + head)
        else:  # too long to head the block: on lines of its own above it
            shown += wrapped(head, limit)
        for line in chain:
            for j, piece in enumerate(_chunks(line.removeprefix("=").strip(), limit - 4)):
                rows.append(("&= " if j == 0 else r"&\quad ") + piece)
        shown.append(r"\begin{aligned} " + r" \\ ".join(rows) + r" \end{aligned}")
    return shown


def thousands(n: int) -> str:
    """A whole number with thousands separators that KaTeX sets as one number ("24{,}576": a bare
    comma in math is punctuation, followed by a space)."""
    return f"{n:,}".replace(",", "{,}")
