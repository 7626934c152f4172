"""Set-up files agree with each other: pyproject, environment.yml, Makefile, README, CI."""

from __future__ import annotations

import re
from importlib.metadata import requires
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        m = re.fullmatch(r"\s*([A-Za-z0-9_.\-\[\]]+)\s*==\s*([\w.]+)\s*", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def test_environment_yml_pins_the_same_versions_as_pyproject():
    """environment.yml's pip list pins exactly pyproject.toml's dependencies, version for version."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    declared = [r for r in requires("mirrortutor") if "extra ==" not in r]
    assert _pins(pip_section) == _pins(declared)
    assert len(_pins(declared)) == len(declared), "every dependency is pinned with =="
    assert "-e ." in pip_section and "conda-forge" in env["channels"]


def test_ci_runs_exactly_the_readme_test_command():
    """.ci/run runs `make test`, the command the README gives for running every test."""
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make test$", ci, flags=re.M)
    assert "make test" in readme and "make lab" in readme


def test_makefile_test_target_runs_package_tests_and_every_notebook():
    """`make test` runs pytest over tests/ and notebooks/ with nbval comparing outputs."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:")[1].split("\n\n")[0]
    assert "pytest" in recipe and "tests notebooks" in recipe and "$(NBVAL)" in recipe
    assert "--nbval " in makefile and "--nbval-lax" not in makefile
