"""The error hierarchy. Every error a user can meet derives from CtapeError.

Each subclass carries the exit status the CLI maps it to, and its message says
what to do next. Subclasses that belong to one module only are still defined
here so that the CLI can map them in one place without importing heavy code.
"""


class CtapeError(Exception):
    """Base of every ctape error."""

    exit_code = 1


class InvalidInput(CtapeError):
    """Bad usage or input: a payload that is not JSON, an unknown kind, a bad name."""

    exit_code = 2


class InvalidName(InvalidInput):
    """A session or branch name outside [A-Za-z0-9][A-Za-z0-9._-]{0,127}."""


class NotATape(CtapeError):
    """The directory is missing or is not a tape directory."""


class RefNotFound(CtapeError):
    """A ref that names no entry, session or branch."""


class AmbiguousRef(RefNotFound):
    """A hex prefix that matches several entries."""


class EntryNotFound(RefNotFound):
    """An entry hash that the tape does not hold (yet)."""


class LostToDamage(EntryNotFound):
    """An object a salvage recorded as lost to damage: gone for good, not "not arrived yet"."""


class CorruptObject(CtapeError):
    """Stored bytes that do not hash to their name, or a damaged record."""


class RefsDamaged(CorruptObject):
    """A session whose ref records are all in damaged records: no HEAD reads back."""


class ObjectTooLarge(CorruptObject):
    """A compressed frame that claims more than the configured limit."""


class UnsafePath(CtapeError):
    """A symlink, or a path that leaves the tape directory."""


class ConflictError(CtapeError):
    """A compare-and-swap on a ref lost against another writer."""


class StorageError(CtapeError):
    """The filesystem refused: read-only, full disk, permissions."""


class SessionNotFound(RefNotFound):
    """A session the command reads that the tape does not hold (or that was removed)."""


class NoDefaultSession(InvalidInput):
    """No -s, no $CTAPE_SESSION, no `session use` choice, and not exactly one session."""


class BranchCheckedOut(CtapeError):
    """`branch -d` of the branch HEAD is on (-D deletes it and detaches HEAD)."""


class CtapeWarning(UserWarning):
    """Something the user should know that stops nothing (the CLI prints it as
    `ctape: warning: ...`)."""


NOATIME_WARNING = (
    "reads on this tape's file system do not update access times (a noatime mount?): "
    "every write goes to a new segment so that `rsync -a` both ways stays safe, which costs "
    "speed and files; remount with relatime (docs/sync.md, 'Access times')"
)
