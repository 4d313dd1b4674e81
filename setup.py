"""kcli's optional C extensions; everything else is in pyproject.toml.

- kcli.storage._cleaner (kcli/storage/_cleaner.c): the log cleaner's offset map, keep/drop decisions, record copy;
- kcli.records._dumpfmt (kcli/records/_dumpfmt.c): deep dumps' record formatting (NDJSON and kafka-dump-log text).

``optional=True``: without a C compiler or Python's headers the install still succeeds and kcli runs its
pure-Python paths, which the tests hold byte-identical (KCLI_NO_EXTENSIONS=1 forces them where the extensions
are built).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("kcli.storage._cleaner", ["kcli/storage/_cleaner.c"], optional=True),
    Extension("kcli.records._dumpfmt", ["kcli/records/_dumpfmt.c"], optional=True),
])
