"""The one function every stored string goes through on its way into a page."""

from __future__ import annotations

import html

# C0 controls (but tab and newline) and DEL become their visible "control pictures",
# so terminal escapes in tool output show as ␛[31m rather than vanishing or confusing
_CONTROLS = {i: 0x2400 + i for i in range(32) if i not in (9, 10)} | {127: 0x2421}


def esc(text: object) -> str:
    """HTML-escape any value as text (quotes too, so it is safe inside attributes)."""
    return html.escape(str(text), quote=True).translate(_CONTROLS)
