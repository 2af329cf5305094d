"""`ctape serve`: the command lives with the web view (ctape/web/cli.py); this registers it."""

from ..web.cli import serve
from .base import main

main.add_command(serve)
