"""Remotes on object storage (SPEC section 17): remote add/list/rm/show, push, pull, clone."""

from __future__ import annotations
