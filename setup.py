"""Optional compiled helpers; kcli runs without them (pure-Python paths, KCLI_NO_EXTENSIONS=1 forces those)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("kcli.records._dumpfmt", ["kcli/records/_dumpfmt.c"], optional=True),
    ]
)
