#!/usr/bin/env bash
# The main job on a fresh Debian machine: install, then verify and dump the bundled sample log directory.
# (Once `kctl broker run` lands this script starts the embedded broker on a local data directory.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/kctl verify sample-logs/kafka-logs
exec .venv/bin/kctl dump-log --deep-iteration sample-logs/kafka-logs "$@"
