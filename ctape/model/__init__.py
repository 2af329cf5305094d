"""Values and their canonical bytes: the bottom layer.

What an entry, a payload and a ref record are (models.py, schema.py), the one byte form
every hash is taken of (canonical.py), how ref claims resolve into branches and HEAD
(refs.py), the REF and time syntaxes (refspec.py, timespec.py), and the error hierarchy
(errors.py; users import it as ctape.errors). Nothing here touches a file: these modules
import only each other and the standard library.
"""
