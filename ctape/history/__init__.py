"""The history: what the stored bytes mean.

Tape and Session (tape.py, session.py): reading entries, appending, moving branches and
HEAD by ref records; the ref log read back (reflog.py); sessions, tags and derived state
(sessions.py, tags.py, derived.py);
streams and what an agent needs to resume (stream.py, recovery.py); walking a history
for `log` (logview.py). It builds on ctape.store and ctape.model and never imports the
verbs above it: ctape.Tape and ctape.Session (ctape/tape.py, ctape/session.py) add those.
"""
