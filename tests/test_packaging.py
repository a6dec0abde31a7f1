"""What `pip install .` puts into site-packages: the wheel built from this checkout holds the
glassbox package alone (glassbox.model, glassbox.app, glassbox.assets, and glassbox itself),
with the shipped models, the pages Streamlit runs and the in-page scripts. Reference: the
wheel's own file list (zipfile), built by pip without build isolation (offline), from a copy
of the tracked files: setuptools' build/ folder in a checkout keeps files from earlier builds,
which it would put in the wheel."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import ROOT, package_version


@pytest.mark.subprocess
def test_the_wheel_installs_glassbox_alone(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", "site"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("glassbox-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"glassbox", wheel.name.split("-py3")[0] + ".dist-info"}
    for needed in (
        "glassbox/__init__.py",
        "glassbox/__main__.py",
        "glassbox/model/engine/transformer.py",
        "glassbox/app/main.py",
        "glassbox/app/screens/explore.py",
        "glassbox/app/course/index.py",
        "glassbox/app/components/attention_head.js",
        "glassbox/assets/default/model.safetensors",
        "glassbox/assets/worked-example/published.json",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("glassbox/model/api/", "tests/", "glassbox/tests", "glassbox/app/bench"))]
    assert "glassbox/cli/__init__.py" in names and "glassbox/core.py" in names
    assert wheel.name.split("-")[1] == package_version() and any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
