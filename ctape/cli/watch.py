"""`ctape watch`: the command lives with its package (ctape/watch/command.py)."""

from ..watch.command import watch
from .base import main

main.add_command(watch)
