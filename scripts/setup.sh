#!/usr/bin/env bash
# Installs what kctl needs on a fresh Debian machine, by need:
#   scripts/setup.sh broker   kcli in .venv (no extras) and kcat: enough for `kctl broker run` and the quick start
#   scripts/setup.sh test     everything the test suite needs (the default): ZooKeeper, Java and pyspark for the
#                             Spark tests, man/groff for the man-page tests, kcat, and kcli with its test and
#                             spark extras
# Idempotent: a second run installs nothing new. Root or sudo is needed only for missing apt packages; apt waits
# for a dpkg lock another apt process holds (unattended upgrades on a fresh machine) instead of failing at once.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-test}"
# --no-compile for the test set-up: pip would byte-compile every installed module (pyspark's, pandas', ...: a third of
# a fresh set-up's time on a 2-core machine); the tests compile what they import, once (scripts/test.sh lets them
# write bytecode). The broker's set-up keeps pip's compiling: a machine with PYTHONDONTWRITEBYTECODE would otherwise
# compile at every `kctl broker run`.
case "$mode" in
  broker) extras="" compile=() ;;
  test) extras="[test,spark]" compile=(--no-compile) ;;
  *) echo "usage: scripts/setup.sh [broker|test]" >&2; exit 2 ;;
esac
# Seconds apt-get waits for the dpkg and package-list locks (apt >= 1.9.11; older apt ignores the option).
lock_timeout="${KCLI_APT_LOCK_TIMEOUT:-900}"

export DEBIAN_FRONTEND=noninteractive
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# A C compiler and Python's headers build kcli's optional C extension (the log cleaner's per-record work); the
# install still succeeds without them, with the pure-Python cleaner.
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  >/dev/null 2>&1 || missing+=(python3-dev)
if [ "$mode" = test ]; then
  command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
  [ -d /usr/share/zookeeper ] || missing+=(zookeeper)
  command -v man >/dev/null 2>&1 || missing+=(man-db)
  command -v groff >/dev/null 2>&1 || missing+=(groff-base)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  apt=($sudo apt-get -o "DPkg::Lock::Timeout=$lock_timeout")
  echo "setup ($mode): installing Debian packages: ${missing[*]}" >&2
  "${apt[@]}" update -qq
  "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q "${compile[@]}" --disable-pip-version-check -e ".${extras}"

# pykafka 2.8, the old client whose BalancedConsumer the ZooKeeper-group tests run as members: it pins kazoo 2.5
# (kcli needs 2.10+) and builds with setuptools' `test` command (gone in setuptools 72), so it gets an environment
# of its own, .venv-pykafka, which only those tests' member processes use.
if [ "$mode" = test ] && ! .venv-pykafka/bin/python -c 'import pykafka' >/dev/null 2>&1; then
  python3 -m venv .venv-pykafka
  .venv-pykafka/bin/python -m pip install -q --no-compile --disable-pip-version-check "setuptools<72" wheel
  .venv-pykafka/bin/python -m pip install -q --no-compile --disable-pip-version-check --no-build-isolation pykafka==2.8.0
fi
