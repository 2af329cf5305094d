"""Privacy (SPEC section 18): scan for secrets, allow false positives, redact."""

from __future__ import annotations
