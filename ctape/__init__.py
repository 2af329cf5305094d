"""ctape: an immutable, content-addressed tape of LLM-agent conversations.

The names below are imported on first use, so that `ctape --help` and other
light commands start fast.
"""

from .errors import (
    AmbiguousRef,
    BranchCheckedOut,
    ConflictError,
    CorruptObject,
    CtapeError,
    EntryNotFound,
    InvalidInput,
    InvalidName,
    NoDefaultSession,
    NotATape,
    ObjectTooLarge,
    RefNotFound,
    SessionNotFound,
    StorageError,
    UnsafePath,
)

__version__ = "0.2.0"

__all__ = [
    "Tape",
    "Session",
    "Entry",
    "EntryKind",
    "CtapeError",
    "InvalidInput",
    "InvalidName",
    "NotATape",
    "RefNotFound",
    "AmbiguousRef",
    "EntryNotFound",
    "CorruptObject",
    "ObjectTooLarge",
    "UnsafePath",
    "ConflictError",
    "StorageError",
    "SessionNotFound",
    "NoDefaultSession",
    "BranchCheckedOut",
]

_LAZY = {"Tape": "tape", "Session": "session", "Entry": "model.models", "EntryKind": "model.models"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctape' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
