#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: installs what the tests need, then runs pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k verify).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
