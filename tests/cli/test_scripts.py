"""scripts/setup.sh and scripts/run.sh in a sandbox: stub apt-get, python3 and pip record what they are asked."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from support import REPO


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def sandbox(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("setup.sh", "run.sh"):
        shutil.copy(REPO / "scripts" / name, repo / "scripts" / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _stub(bin_dir / "apt-get", f'echo "apt-get $*" >> {log}\n')
    _stub(bin_dir / "id", "echo 0\n")
    venv_python = (f'if [ "$1 $2" = "-m pip" ]; then echo "pip $*" >> {log}; fi\n')
    _stub(bin_dir / "python3", f'''if [ "$1" = "-c" ]; then exit 0; fi
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; printf '%s\\n' '#!/bin/bash' '{venv_python.strip()}' > "$3/bin/python"
  chmod +x "$3/bin/python"; printf '%s\\n' '#!/bin/bash' 'echo "kctl $*" >> {log}' > "$3/bin/kctl"; chmod +x "$3/bin/kctl"; fi
''')
    for tool in ("dirname", "mkdir", "chmod", "cat", "bash"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    return repo, env, log


def _run(repo: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/bash", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60)


def test_broker_mode_installs_only_what_the_broker_needs(sandbox):
    repo, env, log = sandbox
    proc = _run(repo, env, "scripts/setup.sh", "broker")
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    install = next(c for c in calls if " install " in c)
    assert "kcat" in install and "openjdk" not in install and "zookeeper" not in install
    assert all("-o DPkg::Lock::Timeout=900" in c for c in calls if c.startswith("apt-get"))  # waits for the lock
    (pip,) = [c for c in calls if c.startswith("pip")]
    assert pip.endswith("-e .") and "spark" not in pip and "test" not in pip


def test_test_mode_installs_everything(sandbox):
    repo, env, log = sandbox
    assert _run(repo, env, "scripts/setup.sh").returncode == 0  # the default
    calls = log.read_text().splitlines()
    install = next(c for c in calls if " install " in c)
    assert "openjdk-17-jre-headless" in install and "kcat" in install and "man-db" in install
    (pip,) = [c for c in calls if c.startswith("pip") and " -e " in c]
    assert pip.endswith("-e .[test,spark]")
    assert any("pykafka==2.8.0" in c for c in calls if c.startswith("pip"))  # in .venv-pykafka, its own
    assert _run(repo, env, "scripts/setup.sh", "everything").returncode == 2


def test_run_sh_sets_up_the_broker_mode_then_runs_the_broker(sandbox):
    repo, env, log = sandbox
    proc = _run(repo, env, "scripts/run.sh", "--override", "x=y")
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    assert [c for c in calls if c.startswith("pip")][0].endswith("-e .")
    assert calls[-1] == "kctl broker run --override x=y"
