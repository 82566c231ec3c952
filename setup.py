"""Only the build command that puts the Spark plugin jar into the wheel; all metadata is in pyproject.toml.

build_support/plugin_jar.py says how the jar is compiled, where the build finds its classpath, and why
this is a ``build_py`` command rather than a custom PEP 517 backend.
"""

import sys
from pathlib import Path

from setuptools import setup

sys.path.insert(0, str(Path(__file__).resolve().parent))  # build_support/ is not installed anywhere
from build_support.plugin_jar import BuildPyWithPluginJar  # noqa: E402

setup(cmdclass={"build_py": BuildPyWithPluginJar})
