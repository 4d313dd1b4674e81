#!/usr/bin/env bash
# Installs what kctl and its test suite need on a fresh Debian machine: Debian packages (ZooKeeper,
# Java for Spark, kcat, man), then a virtualenv in .venv with kcli and its test extras.
# Idempotent: a second run installs nothing new. Root or sudo is needed only for missing apt packages.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
[ -d /usr/share/zookeeper ] || missing+=(zookeeper)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v man >/dev/null 2>&1 || missing+=(man-db)
command -v groff >/dev/null 2>&1 || missing+=(groff-base)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,spark]'
