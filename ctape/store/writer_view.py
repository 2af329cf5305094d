"""A segment writer's view of its session: the part of SegmentWriter (segment.py inherits
this class) that tells whether anyone changed the session since the writer last looked (the
folder's change time, and a listing of its files while a second change may hide in the same
clock tick), keeps the view when the writer names a file of its own, and reads it again (a
reload). It lets an append skip re-reading the index rows of every file of the session.
"""

from __future__ import annotations

import os
import time
from typing import Optional

RACY_NS = 50_000_000  # a folder ctime this recent may hide a second change in the same tick


class WriterView:
    """A SegmentWriter's view of its session (a part of SegmentWriter)."""

    def _take_up_newer(self) -> None:
        """Go on in the segment this writer made after its active one (`_note_own_file`), as
        a reload would. Another writer of this id may have taken it up and appended to it
        in place, which leaves the folder's change time as it was: unless it is as made,
        reload."""
        seen, self._seen_dir = self._seen_dir, None  # until it is done: a failure here reloads next time
        rel, size, ino = self._newer_segment
        try:
            fst = os.stat(os.path.join(self.store.root, rel), follow_symlinks=False)
        except FileNotFoundError:
            fst = None
        if fst is None or (fst.st_size, fst.st_ino) != (size, ino):
            self._reload()
            return
        self._close_segment()
        self._open_segment()
        self._seen_dir, self._newer_segment = seen, None

    def view_is_current(self) -> bool:
        """Without the lock: may this writer's view still be used for reading? (No when
        another thread closed the writer meanwhile: store._close_idle_writers.)"""
        try:
            return self.dir_fd >= 0 and not self.buf and self._newer_segment is None and self._view_is_current()
        except OSError:
            return False

    def _view_is_current(self, dst: Optional[os.stat_result] = None) -> bool:
        """Did anyone change the session since this writer last looked?

        Writers on this machine append to the same segment (same writer id), so
        its size tells; new files (another writer, an rsync, compaction) change
        the folder's change time (ctime; its mtime cannot be trusted: `rsync -a`
        sets it back to the sender's). A ctime too close to when it was read could
        hide a second change in the same clock tick, so until that tick has passed
        the folder is listed and compared file by file.
        """
        if self._seen_dir is None or self._refstate is None:
            return False
        if (dst or os.fstat(self.dir_fd)).st_ctime_ns != self._seen_dir:
            return False
        racy = self._racy_until
        if self._others_grow or racy:
            # segments of other writer ids (CTAPE_WRITER, another path to this folder) grow
            # without changing the folder, and a second change of the folder in the clock
            # tick of the first leaves its ctime as it was: compare the files instead.
            # Once the tick has passed, a match proves the view, and ctime suffices again.
            now = time.time_ns()
            listing = self._listing()
            if listing != self._seen_files and not self._only_inodes_differ(listing):
                return False
            self._noted.clear()
            if racy and now >= racy:
                # a reader thread (`view_is_current`, no session lock) looks while the writer
                # may note a file of its own: only the tick this look has proved ends, never
                # one the writer set since this look began
                with self._racy_lock:
                    if self._racy_until == racy:
                        self._racy_until = 0
        if self.fd >= 0:
            # a segment that another process removed (a compaction, which packed it) has no
            # name left: a write there would be read by nothing. The folder's change time says
            # so, except within a clock tick it shares with another change; its link count
            # says so always, from the same fstat
            fst = os.fstat(self.fd)
            return fst.st_size == self.offset and fst.st_nlink > 0
        if self.created:
            return False  # a segment whose first write failed: it has no file (the look starts over)
        return self.rel is None or os.stat(os.path.join(self.store.root, self.rel)).st_size == self.offset

    def _listing(self) -> dict[str, object]:
        """Every data file of the session: name -> inode, or (size, inode). A file replaced
        by a rename keeps its name, and maybe its size: its inode tells (from the listing
        itself, no `stat`). Only segments of other writer ids grow in place (their writers
        append while this one waits for the lock): only theirs are sized. This writer's
        active segment is checked apart (`_view_is_current`), and its sealed segments and the
        packs never change, so a session of thousands of files costs one listing, not a
        `stat` a file."""
        mine = f"{self.store.writer}-"
        out: dict[str, object] = {}
        with os.scandir(self.dir) as it:
            for e in it:
                n = e.name
                if n[-4:] == ".seg" and n.startswith(mine) or n[-5:] == ".pack":
                    out[n] = e.inode()
                elif n[-4:] == ".seg":
                    st = e.stat(follow_symlinks=False)
                    out[n] = (st.st_size, st.st_ino)
        return out

    def _only_inodes_differ(self, listing: dict[str, object]) -> bool:
        """Do the listing and the view differ only in the inodes of files this writer made
        since it last listed, each still the file it made? A listing's inode is the folder
        entry's, `_note_own_file` has `stat`'s, and some file systems (overlayfs without
        xino, as in containers) give two numbers for one file. Then the listing's become the
        view's; otherwise every file of its own would cost a reload."""
        if listing.keys() != self._seen_files.keys():
            return False
        for name, v in listing.items():
            if v == self._seen_files[name]:
                continue
            if name not in self._noted or type(v) is not int:
                return False
            try:
                if os.stat(os.path.join(self.dir, name), follow_symlinks=False).st_ino != self._noted[name]:
                    return False
            except FileNotFoundError:
                return False
        self._seen_files = listing
        return True

    def _note_own_file(self, name: str, ino: int) -> None:
        """This writer gave a new file its name in the session's folder (a segment, a
        repeat). Its view holds on, with that file in it: a reload reads the index rows of
        every file again and asks the damage, the refs and the streams left by dead writers
        anew, and a session of thousands of segments, as `push --follow` makes, then cost
        ~170 ms an append. The folder's change time is now that of this file, and another
        change may have come in between (an rsync does not take the lock) or come in the
        same tick: so the next look lists the folder and compares it with the view plus this
        file (the racy rule of `_view_is_current`), whatever the time then."""
        held = self._seen_dir is not None and self._refstate is not None and self.locked
        self._seen_dir = None  # until the view holds the file; whatever fails below, the next look reloads
        if not held:
            return
        newer = None
        try:
            if self.rel is None or name != os.path.basename(self.rel):
                # a repeat, named after the active segment: the writers of this id append to
                # their newest segment (another process's view checks that one's size), so the
                # next write goes on there, as after a reload (`lock`); indexed now, as a reload would
                rel = f"sessions/{self.session}/{name}"
                self.store._index_file(rel, 0)
                newer = (rel, os.stat(os.path.join(self.store.root, rel), follow_symlinks=False).st_size, ino)
            ctime = os.fstat(self.dir_fd).st_ctime_ns
        except Exception:  # noqa: BLE001 - the file is written and named; the view is only a shortcut
            return
        self._seen_files[name] = ino
        self._noted[name] = ino
        with self._racy_lock:
            self._seen_dir, self._racy_until = ctime, ctime + RACY_NS
        if newer is not None:
            self._newer_segment = newer

    def _reload(self) -> None:
        st = self.store
        self._seen_dir = None  # until it is done: a reload that fails is done again at the next look
        # look at the folder before reading it: whatever changes after this shows as a
        # difference at the next check (listed after, a file added in between would be
        # part of the listing but maybe not of what was read)
        mtime = os.fstat(self.dir_fd).st_ctime_ns
        listing = self._listing()
        if self._seen_files.keys() - listing.keys():
            self.recent.clear()  # a compaction, `rsync --delete`: what it dropped must not come back (_dictionary)
        self._seen_files = listing
        self._noted = {}
        st.forget_listing(self.session)
        st.refresh(self.session)
        st.verify_headers(self.session)
        self.refstate = None
        self.last_ref = None
        self.partials_checked = False
        self.fresh = set()  # someone else wrote: a child of one of them may be on the tape now
        self._close_segment()
        self._open_segment()
        self._newer_segment = None
        with self._racy_lock:
            self._seen_dir = mtime
            self._racy_until = mtime + RACY_NS if time.time_ns() - mtime < RACY_NS else 0
        mine = f"{self.store.writer}-"
        self._others_grow = any(n.endswith(".seg") and not n.startswith(mine) for n in self._seen_files)
