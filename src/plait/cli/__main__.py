"""``python -m plait.cli``: the command line, as the ``plait`` script runs it."""

from plait.cli import main

main()
