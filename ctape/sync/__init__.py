"""Moving tapes between places: remotes on object storage (SPEC section 17).

This layer owns `push`, `pull`, `clone` and the remotes a copy knows. A remote holds the
tape's data files as immutable objects (pieces of segments by byte range, packs whole)
plus one manifest sequence per uploading copy (docs/remotes.md has the key layout). A pull
brings files into the tape exactly as `rsync -a` would (a segment only ever grows by the
next bytes of its writer's file; a pack appears whole) and the store's normal index
refresh merges them: no merge rules live here. It sits above the store and history (it
reads and writes data files, takes the session locks, refreshes the index) and below
the CLI; its object-store client (boto3) is an optional extra imported lazily.
"""
