"""The ``plait`` command line."""
