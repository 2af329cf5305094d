"""ctape: an immutable, content-addressed tape of LLM-agent conversations."""

from .errors import (
    AmbiguousRef,
    ConflictError,
    CorruptObject,
    CtapeError,
    EntryNotFound,
    InvalidInput,
    InvalidName,
    NotATape,
    ObjectTooLarge,
    RefNotFound,
    StorageError,
    UnsafePath,
)
from .models import Entry, EntryKind
from .session import Session
from .tape import Tape

__version__ = "0.1.0"

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
]
