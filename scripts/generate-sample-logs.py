#!/usr/bin/env python3
"""Regenerate sample-logs/ with kcli's own writer (deterministic: tests rebuild and compare)."""

import sys
from pathlib import Path

from kcli.tools.samples import build_sample_logs

if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "sample-logs"
    for name, path in build_sample_logs(root).items():
        print(f"{name}: {path}")
