"""``python -m plait``: the command line, where the ``plait`` script is not on the path."""

from plait.cli import main

main()
