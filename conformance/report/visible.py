"""Text from outside the harness, made safe to print: a driver's stderr, a line it wrote, its name.

A terminal acts on what it is sent: ESC sequences move the cursor and erase lines, CR and backspace
overwrite, so a driver's own output could rewrite the report around it (a FAIL erased, a PASS drawn).
Such characters are shown as their escapes instead (decisions Q-124); exit codes never depended on them.
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, and U+FFFE/U+FFFF (which XML 1.0
# cannot carry either); `keep` may spare tab, newline or carriage return
_CONTROLS = "\x00-\x1f\x7f-\x9f\u2028\u2029\ufffe\uffff"


def visible(text: str, keep: str = "\t\n") -> str:
    """`text` with every control character but those in `keep`, and every lone surrogate, written as its
    Python escape (`\\x1b`), so that it prints as itself and as one piece of valid UTF-8."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    spared = "".join(re.escape(c) for c in keep)
    pattern = f"[{_CONTROLS}]" if not spared else f"(?![{spared}])[{_CONTROLS}]"
    return re.sub(pattern, lambda m: ascii(m.group())[1:-1], text)
