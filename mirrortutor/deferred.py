"""An optional import our dependencies make at start-up, put off until it is first used.

Before it shows a figure, plotly checks nbformat's version (``plotly/io/_renderers.py``, plotly
7.1). Importing nbformat imports jsonschema, and jsonschema 4.26 imports the optional
``rfc3987_syntax`` when it is installed (``jsonschema/_format.py``, the ``with
suppress(ImportError)`` block that defines the "iri" and "iri-reference" format checks).
``rfc3987_syntax`` builds its Lark parsers at import: 2.6 s on a 2-core laptop, in every kernel,
before its first chart appears. Nothing in the course checks those two formats: nbformat's
notebook schema does not use them.

:func:`defer_rfc3987_syntax` puts a stand-in under that name. It offers what jsonschema takes
from the module (``is_valid_syntax``), and loading the real module happens the first time anything
is read from it. A check of an "iri" string therefore gives the same answer as before. The first
such check pays the 2.6 s, and a kernel that never makes one does not.
``tests/package/test_deferred.py`` compares the answers with and without the stand-in.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

NAME = "rfc3987_syntax"


def defer_rfc3987_syntax() -> None:
    """Put off importing ``rfc3987_syntax`` until it is used (the module docstring says why).

    Does nothing when the module is already imported or not installed.
    """
    if NAME in sys.modules:
        return
    spec = importlib.util.find_spec(NAME)
    if spec is None:
        return
    stand_in = types.ModuleType(NAME, f"mirrortutor's stand-in for {NAME}: loads it when "
                                      "first read (mirrortutor/deferred.py)")
    stand_in.__path__ = list(spec.submodule_search_locations or [])  # its submodules import as usual

    def real() -> types.ModuleType:
        if sys.modules.get(NAME) is stand_in:
            del sys.modules[NAME]
        return importlib.import_module(NAME)

    def is_valid_syntax(term: str, value: str) -> bool:
        return real().is_valid_syntax(term, value)

    stand_in.is_valid_syntax = is_valid_syntax
    stand_in.__getattr__ = lambda attribute: getattr(real(), attribute)
    sys.modules[NAME] = stand_in
