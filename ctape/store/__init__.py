"""The store: bytes on disk, one writer per growing file.

Record framing (framing.py), blocks and packs (packing.py), a session's segment writer
with its lock, seal and durability rules (segment.py), its view of the session
(writer_view.py) and its repeats of what a copy may lack (repeats.py), the index cache
outside the tape that finds objects and claims (index.py) and its writes of batches of
rows (index_batch.py), file helpers (files.py), this machine's local settings
(localstate.py), what a tape's folder is (folder.py), a data file's records read and
judged (records.py), and the Store that ties them together (store.py), with its index kept
fresh (freshness.py) and its reads of records and objects (reading.py). It knows objects,
records and files, not what a conversation is; it imports only ctape.model.
"""
