"""Finding the user's ``App`` from a ``module:attribute`` reference.

Every command that takes an APP argument must resolve it the same way, so the reference
grammar and its error messages live here, below both the HTTP server and the command line.
Errors are plain ``ValueError``, ``TypeError`` and ``ImportError`` (``AppImportError`` when
the module itself raised as it was imported) so each caller words them for its own
audience.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from plait.app import App


class AppImportError(ImportError):
    """The user's module raised as it was imported (not: it was not found). ``error`` is
    what it raised, so each caller can word it, and show its traceback on request."""

    def __init__(self, module: str, error: BaseException) -> None:
        super().__init__(
            f"module {module!r} failed as it was imported: {type(error).__name__}: {error}",
            name=module,
        )
        self.module = module
        self.error = error


def load_app(app_ref: str) -> App:
    """Import ``"package.module:attribute"`` (attribute may be dotted) from the current
    directory or the path, and check that it is a ``plait.App``.

    The current directory is made importable because an APP is usually a module beside
    where the command is run, and console scripts do not put it on the path.
    """
    module_name, sep, attribute = app_ref.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"APP must look like 'module:attribute', got {app_ref!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise
    except Exception as exc:
        raise AppImportError(module_name, exc) from exc
    except SystemExit as exc:
        error = RuntimeError(f"it called sys.exit({exc.code!r}) as it was imported")
        raise AppImportError(module_name, error) from exc
    obj: Any = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(obj, App):
        raise TypeError(f"{app_ref} is a {type(obj).__name__}, not a plait.App")
    return obj
