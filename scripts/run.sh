#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what the broker needs (kcli and kcat; no Spark, no test
# extras: `scripts/setup.sh broker`), then run the embedded default broker: `kctl broker run` on 127.0.0.1:9092
# with its data in ./kctl-data (standalone, no ZooKeeper).
# Extra arguments go to `kctl broker run` (e.g. --override listeners=PLAINTEXT://127.0.0.1:19092).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh broker
exec .venv/bin/kctl broker run "$@"
