"""The one function every stored string goes through on its way into a page."""

from __future__ import annotations

import html

# C0 controls (but tab and newline) and DEL become their visible "control pictures",
# so terminal escapes in tool output show as ␛[31m rather than vanishing or confusing
_CONTROLS = {i: 0x2400 + i for i in range(32) if i not in (9, 10)} | {127: 0x2421}
# C1 controls, and the bidi embeddings, overrides and isolates, which would show stored text
# in another order than it has (`\u202eexe.txt` as `txt.exe`): written out, as the
# command line writes them (ops/render.clean)
_CONTROLS |= {i: f"\\x{i:02x}" for i in range(0x80, 0xA0)}
_CONTROLS |= {i: f"\\u{i:04x}" for i in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def esc(text: object) -> str:
    """HTML-escape any value as text (quotes too, so it is safe inside attributes)."""
    return html.escape(str(text), quote=True).translate(_CONTROLS)
