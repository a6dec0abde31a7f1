"""tests/helpers.py's ``require``: a test's missing reference package skips it on a contributor's
machine but fails the run under CI=true (.ci/run), naming the package and ./tests/install.sh."""

import re

import pytest

from tests.helpers import INSTALL, ROOT, require

MISSING = "glassbox_no_such_module"  # importable nowhere


def test_a_present_module_is_returned(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert require("json") is __import__("json")


@pytest.mark.parametrize("ci", ["", "false"])
def test_a_missing_module_skips_outside_ci(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match=re.escape(f"{MISSING} is not installed")):
        require(MISSING)


@pytest.mark.parametrize("ci", ["true", "TRUE", "1"])
def test_a_missing_module_fails_under_ci_naming_the_package_and_the_install_command(monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception) as failed:
        require(MISSING, package="no-such-package")
    assert str(failed.value) == f"{MISSING} is not installed (pip package no-such-package): run {INSTALL}"
    assert (ROOT / INSTALL).is_file()


def test_the_pip_name_defaults_to_the_module_name_with_dashes(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=re.escape(f"(pip package {MISSING.replace('_', '-')})")):
        require(MISSING)


def test_a_module_that_is_there_but_breaks_on_import_raises_its_own_error(tmp_path, monkeypatch):
    """Not a skip even here: the package is installed, so a skip would hide a broken install."""
    (tmp_path / "glassbox_broken_module.py").write_text(f"import {MISSING}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(ModuleNotFoundError, match=MISSING):
        require("glassbox_broken_module")


def test_no_test_file_skips_on_a_missing_package_by_itself():
    """Every test that needs an optional package asks ``require``, so that CI cannot skip it."""
    offenders = [
        p.name
        for p in (ROOT / "tests").glob("*.py")
        if p.name != __name__.split(".")[-1] + ".py" and "importorskip(" in p.read_text()
    ]
    assert not offenders, f"use tests.helpers.require instead of pytest.importorskip in {offenders}"
