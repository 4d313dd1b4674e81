"""The optional C extension of the log cleaner (kcli/storage/_cleaner.c); everything else is in pyproject.toml.

``optional=True``: without a C compiler or Python's headers the install still succeeds and kcli runs its
pure-Python cleaner (KCLI_NO_EXTENSIONS=1 forces that path where the extension is built).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("kcli.storage._cleaner", ["kcli/storage/_cleaner.c"], optional=True)])
