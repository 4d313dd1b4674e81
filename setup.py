"""The optional C extension of deep dumps (kcli/records/_dumpfmt.c); everything else is in pyproject.toml.

``optional=True``: without a C compiler or Python's headers the install still succeeds and kcli formats
deep dumps in Python (KCLI_NO_EXTENSIONS=1 forces that path where the extension is built).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kcli.records._dumpfmt", ["kcli/records/_dumpfmt.c"], optional=True)])
