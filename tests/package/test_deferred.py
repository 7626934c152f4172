"""mirrortutor/deferred.py: a kernel's first figure no longer waits for rfc3987_syntax, and every
check that module makes still gives the answer it gave without the stand-in."""

from __future__ import annotations

import json
import subprocess
import sys

# "iri" and "iri-reference" are the formats jsonschema checks with rfc3987_syntax; valid and not
IRIS = ["http://example.com/ä", "http://[bad", "a b", "//example.com/path?q=1#f", "", "ftp://x/%zz",
        "mailto:student@example.com", "relative/path", "http://example.com/\u00e9t\u00e9"]

CHECKS = f"""
import json
from jsonschema import FormatChecker
checker = FormatChecker()
print(json.dumps([[checker.conforms(s, f) for f in ("iri", "iri-reference")] for s in {IRIS!r}]))
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip().splitlines()[-1]


def test_a_figure_after_import_mirrortutor_does_not_load_rfc3987_syntax():
    """What plotly's first figure imports (nbformat, jsonschema) leaves rfc3987_syntax unloaded."""
    loaded = _run("""
import sys, mirrortutor, plotly.graph_objects as go
go.Figure()._repr_mimebundle_({"application/vnd.plotly.v1+json"})
print("rfc3987_syntax.syntax_helpers" in sys.modules)
""")
    assert loaded == "False"


def test_format_checks_answer_as_without_the_stand_in():
    """jsonschema's iri checks, run through the stand-in, equal the checks without mirrortutor."""
    without = json.loads(_run(CHECKS))
    with_stand_in = json.loads(_run("import mirrortutor\n" + CHECKS))
    assert with_stand_in == without
    for column in range(2):  # each format says yes to some of the strings and no to others
        assert {row[column] for row in without} == {True, False}


def test_the_module_itself_reads_as_the_real_one():
    """Reading any name, or importing a submodule, loads the real module in the stand-in's place."""
    out = _run("""
import sys, mirrortutor
import rfc3987_syntax
stand_in = sys.modules["rfc3987_syntax"]
terms = rfc3987_syntax.RFC3987_SYNTAX_TERMS
import rfc3987_syntax.utils
real = sys.modules["rfc3987_syntax"]
print(real is not stand_in and real.RFC3987_SYNTAX_TERMS == terms and "iri" in terms)
""")
    assert out == "True"
