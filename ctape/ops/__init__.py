"""The verbs over a history, one module each.

context views (context.py), compaction (compact.py), fsck and stats (maintenance.py),
salvage (salvage.py), full-text search and its cache (search.py, searchtext.py), diff
(diff.py), usage and cost (usage.py), and the text forms of log and status (render.py).
Each takes a Tape or Session and uses the history and store below; none imports
another layer above. ctape.Tape and ctape.Session expose them as methods.
"""
