"""A real single-node SLURM cluster in one folder, for tests and trying the SLURM launcher on one machine.

    python slurm/single_node.py up /tmp/slurm      # prints: export SLURM_CONF=/tmp/slurm/slurm.conf
    python slurm/single_node.py down /tmp/slurm

Debian's munge + slurmctld + slurmd (apt-get install munge slurmctld slurmd slurm-client), run without
systemd as root: every path (config, state, spool, logs, pids, munge key and socket) lives under the folder,
ports are picked free, and the daemons are stopped by the PIDs recorded there. Accounting: no database;
finished jobs are written by SLURM's job-completion plugin to <folder>/jobcomp.log and stay visible to
``scontrol show job`` for MinJobAge (10 min). Each setting's reason is in the comment beside it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION = "debug"


def missing_binaries() -> list[str]:
    return [tool for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _node_resources() -> tuple[int, int]:
    """CPUs and RealMemory exactly as slurmd measures them (declaring more drains the node)."""
    out = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    cpus = int(re.search(r"CPUs=(\d+)", out).group(1))
    memory = int(re.search(r"RealMemory=(\d+)", out).group(1))
    return cpus, memory


def slurm_conf(base: Path, host: str, cpus: int, memory: int, ctld_port: int, slurmd_port: int) -> str:
    return f"""\
ClusterName=cutlab
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.socket
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
DefMemPerCPU=1000
MailProg=/bin/true
ReturnToService=2
MinJobAge=600
JobCompType=jobcomp/filetxt
JobCompLoc={base}/jobcomp.log
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName={PARTITION} Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def up(base: Path, timeout: float = 60) -> dict[str, str]:
    """Start munge, slurmctld and slurmd under ``base``; returns the environment clients need (SLURM_CONF)."""
    base = base.resolve()
    for sub in ("munge", "state", "spool", "log"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(base / "munge", 0o711)  # munged refuses a socket folder others can write to
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    host = socket.gethostname().split(".")[0]
    cpus, memory = _node_resources()
    conf = base / "slurm.conf"
    conf.write_text(slurm_conf(base, host, cpus, memory, _free_port(), _free_port()))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = open(base / "log" / "daemons.log", "ab")
    commands = {
        "munged": [_binary("munged"), "--foreground", "--force", f"--socket={base}/munge/munge.socket",
                   f"--key-file={key}", f"--pid-file={base}/munge/munged.pid", f"--log-file={base}/log/munged.log",
                   f"--seed-file={base}/munge/munge.seed"],
        "slurmctld": [_binary("slurmctld"), "-D", "-i", "-f", str(conf)],
        "slurmd": [_binary("slurmd"), "-D", "-f", str(conf)],
    }
    for name in DAEMONS:
        process = subprocess.Popen(commands[name], env=env, stdout=logs, stderr=logs, start_new_session=True)
        (base / f"{name}.daemon.pid").write_text(str(process.pid))
        if name == "munged":
            _wait_for(lambda: (base / "munge" / "munge.socket").exists(), timeout, "munged's socket", base)
    _wait_for(lambda: _node_idle(env), timeout, "the node to become idle", base)
    return {"SLURM_CONF": str(conf)}


def _node_idle(env: dict) -> bool:
    out = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True, text=True, env=env)
    return out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc")


def _wait_for(condition, timeout: float, what: str, base: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            logs = "".join((base / "log" / f).read_text()[-1500:] for f in ("daemons.log", "slurmctld.log", "slurmd.log")
                           if (base / "log" / f).exists())
            down(base)
            raise RuntimeError(f"single-node SLURM: timed out waiting for {what}; logs:\n{logs}")
        time.sleep(0.2)


def down(base: Path) -> None:
    """Cancel what is still queued, then stop the daemons started by :func:`up` by their recorded PIDs."""
    _cancel_all(Path(base))
    for name in reversed(DAEMONS):
        pid_file = Path(base) / f"{name}.daemon.pid"
        if not pid_file.exists():
            continue
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)
                if _is_zombie(pid):
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, os.WNOHANG)  # reap it when this process started it
        except ChildProcessError:
            pass
        pid_file.unlink()


def _cancel_all(base: Path, timeout: float = 20) -> None:
    """Jobs left running (a test that failed half-way) would outlive slurmd with their srun: cancel them first."""
    conf = base / "slurm.conf"
    if not conf.exists() or not (base / "slurmctld.daemon.pid").exists():
        return
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["scancel", f"--user={os.getuid()}"], env=env, capture_output=True, timeout=30)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True, timeout=30)
        if out.returncode != 0 or not out.stdout.strip():
            return
        time.sleep(0.2)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("up", "down"):
        sys.exit("usage: python slurm/single_node.py up|down FOLDER")
    folder = Path(sys.argv[2])
    if sys.argv[1] == "up":
        missing = missing_binaries()
        if missing:
            sys.exit(f"missing {', '.join(missing)}: apt-get install munge slurmctld slurmd slurm-client")
        print(f"export SLURM_CONF={up(folder)['SLURM_CONF']}")
    else:
        down(folder)
