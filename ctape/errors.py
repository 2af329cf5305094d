"""The error hierarchy, where users import it from (ctape/model/errors.py holds it)."""

from .model.errors import *  # noqa: F401,F403
