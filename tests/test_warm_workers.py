"""The local launcher's warm workers (cutlab/launch/worker.py): a run in a worker that already ran another run
ends exactly as in a fresh process; a failed run leaves the worker usable; a worker killed mid-run fails that
run only; Ctrl-C on the sweep stops its runs at a step with a checkpoint, and the same command resumes them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import ROOT
from helpers.cli import cutlab
from helpers.contract import assert_same_records, cutlab_env
from helpers.signals import sigterm_to_a_thread_other_than_main

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "progress=false"]
LONGER = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=40", "eval.gamma_test=[0]", "progress=false",
          "checkpoint.every_steps=1000", "wandb.mode=disabled"]


@pytest.fixture
def worker(tmp_path, monkeypatch):
    """A warm worker with its runs, cache and W&B files in tmp_path, as the local launcher starts it."""
    from cutlab.launch.warm import WarmWorker

    for key, value in cutlab_env(tmp_path / "runs").items():
        monkeypatch.setenv(key, value)
    started = WarmWorker("worker-test")
    yield started
    started.close()


def command(tmp_path: Path, *overrides: str, run_name: str):
    from cutlab.launch.job import RunCommand

    return RunCommand([*overrides, f"run_name={run_name}"], run_name, str(tmp_path / "runs" / run_name), str(ROOT),
                      threads=1)


def sweep_outcome(runs: Path) -> dict:
    return json.loads(sorted((runs / "_sweeps").glob("*/outcome.json"))[-1].read_text())


def test_a_run_after_another_in_the_same_worker_has_the_records_of_a_fresh_process(tmp_path, worker, capfd):
    # a different model, arm, seed and W&B mode first: any RNG, Hydra, logging or W&B state it left would show
    first = worker.run(command(tmp_path, "model=ut", "train=erm", "seed=3", *TINY, run_name="first"))
    second = worker.run(command(tmp_path, "gamma=0.15", *TINY, "wandb.mode=offline", run_name="second"))
    again = worker.run(command(tmp_path, "gamma=0.15", *TINY, "wandb.mode=offline", run_name="second"))
    pid = worker.process.pid
    assert first["status"] == second["status"] == "complete" and again == second, "a complete run is skipped"
    cutlab(["gamma=0.15", *TINY, "wandb.mode=offline", "threads=1", "run_name=fresh"], tmp_path / "runs")
    runs = tmp_path / "runs"
    assert_same_records(runs / "second", runs / "fresh")
    ours, theirs = (json.loads((runs / name / "summary.json").read_text()) for name in ("second", "fresh"))
    assert ours["test_metric_by_gamma"] == theirs["test_metric_by_gamma"] and ours["epsilon"] == theirs["epsilon"]
    assert len(list((runs / "second" / "wandb").glob("offline-run-*/run-*.wandb"))) == 1, "its own W&B run"
    err = capfd.readouterr().err
    assert err.count("[second] ") >= 1 and err.count("complete; skipped") == 1, "one log line each: no piled-up handlers"
    assert worker.process.pid == pid, "all three runs in one process"


def test_a_failed_run_leaves_the_worker_ready_for_the_next(tmp_path, worker):
    from cutlab.launch.outcome import RunFailed

    with pytest.raises(RunFailed, match="exit 2: data.root=/nonexistent/ucsd_ped2/ped2_gray160_uint8.npz does not exist"):
        worker.run(command(tmp_path, "data=ucsd_ped2", "paths.data_dir=/nonexistent", *TINY, run_name="bad"))
    pid = worker.process.pid
    assert worker.run(command(tmp_path, *TINY, "wandb.mode=disabled", run_name="good"))["status"] == "complete"
    assert worker.process.pid == pid and not (tmp_path / "runs" / "bad").exists()


def worker_pids(parent: int, command: bytes = b"cutlab.launch.worker", unless: bytes | None = None) -> list[int]:
    """The warm workers (or other children running ``command``, and not ``unless``) the launcher process ``parent``
    started, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and command in cmdline and (unless is None or unless not in cmdline):
            pids.append(int(stat.parent.name))
    return pids


def start_sweep(args: list[str], runs: Path, extra_env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cutlab", "-m", *args], cwd=ROOT, env=cutlab_env(runs, extra_env),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


# a run's process (python -m cutlab OVERRIDES, not the sweep's python -m cutlab -m) that waits, before anything of
# cutlab runs, until the file $CUTLAB_TEST_GATE exists (60 s at most): a test that must signal it while it starts opens
# the gate only after signalling. A fixed 3 s wait was not always enough on a loaded machine: twice a tiny run ended
# before the test's next look at /proc, with two test workers on two cores
SLOW_START = ("import os, sys, time\nif '-m' not in sys.argv[1:]:\n    deadline = time.time() + 60\n"
              "    while not os.path.exists(os.environ['CUTLAB_TEST_GATE']) and time.time() < deadline:\n"
              "        time.sleep(0.02)\n")


def rows_of(run_dir: Path) -> int:
    return len(pd.read_csv(run_dir / "history.csv")) if (run_dir / "history.csv").exists() else 0


def wait_for_rows(run_dirs: list[Path], rows: int, process: subprocess.Popen, timeout_s: float = 300) -> Path:
    """The first of ``run_dirs`` to have ``rows`` history rows, as soon as it has them."""
    deadline = time.time() + timeout_s
    while not (ready := [run_dir for run_dir in run_dirs if rows_of(run_dir) >= rows]):
        assert process.poll() is None and time.time() < deadline, "the run ended before the test could act"
        time.sleep(0.05)
    return ready[0]


@pytest.mark.slow
def test_a_worker_killed_mid_run_fails_that_run_only_and_the_sweep_goes_on(tmp_path):
    runs = tmp_path / "runs"
    sweep = start_sweep(["gamma=0,0.09,0.15", *LONGER, "launcher=local", "launcher.max_parallel=1"], runs)
    first = runs / "L=2,eval.gamma_test=_0_,gamma=0,train.epochs=1,train.max_steps_per_epoch=40"
    wait_for_rows([first], 2, sweep)
    (killed,) = worker_pids(sweep.pid)
    os.kill(killed, signal.SIGKILL)  # what the kernel's OOM killer does
    _, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, stderr[-2000:]
    outcome = {o["run_id"].split("gamma=")[1].split(",")[0]: o for o in sweep_outcome(runs)["runs"]}
    assert outcome["0"]["status"] == "failed"
    assert "the worker process killed by SIGKILL while running it" in outcome["0"]["error"]
    assert outcome["0.09"]["status"] == outcome["0.15"]["status"] == "complete"
    assert "2 complete, 1 failed" in stderr


@pytest.mark.parametrize("stop", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)], ids=["ctrl-c", "sigterm"])
def test_stopping_the_sweep_checkpoints_its_runs_at_a_step_and_the_same_command_resumes_them(tmp_path, stop):
    runs = tmp_path / "runs"
    args = ["gamma=0,0.09,0.15", *LONGER, "launcher=local", "launcher.max_parallel=2"]
    sweep = start_sweep(args, runs)
    running = {gamma: runs / f"L=2,eval.gamma_test=_0_,gamma={gamma},train.epochs=1,train.max_steps_per_epoch=40"
               for gamma in ("0", "0.09")}
    # stop as soon as either running run is past step 3: on 2 busy cores one worker can start seconds after the
    # other, and waiting on one chosen run let the other finish its 40 steps (and rightly end complete)
    stopped = wait_for_rows(list(running.values()), 3, sweep)
    gamma = next(g for g, run_dir in running.items() if run_dir == stopped)
    sweep.send_signal(stop)  # Ctrl-C reaches only the launcher: the workers have their own session
    _, stderr = sweep.communicate(timeout=120)
    # as a stopped in-process sweep ends: 130 for Ctrl-C, 75 (try again later) for SIGTERM
    assert sweep.returncode == (130 if stop == signal.SIGINT else 75), stderr[-2000:]
    tally = [line for line in stderr.splitlines() if line.startswith("[cutlab] local: ") and " runs done" in line]
    assert len(tally) == 3 and all(line.startswith("[cutlab] local: 0/3 runs done") for line in tally), \
        "an interrupted run is not done: the same command resumes it"
    outcome = {o["run_id"].split("gamma=")[1].split(",")[0]: o for o in sweep_outcome(runs)["runs"]}
    assert outcome["0"]["status"] == outcome["0.09"]["status"] == outcome["0.15"]["status"] == "interrupted", outcome
    assert "not started" in outcome["0.15"]["error"]
    assert not (runs / stopped.name.replace(f"gamma={gamma},", "gamma=0.15,")).exists()
    steps_done = rows_of(stopped)
    assert json.loads((stopped / "summary.json").read_text())["status"] == "interrupted"
    assert torch.load(stopped / "checkpoint.pt", weights_only=False)["trainer"]["progress"]["step"] == steps_done, \
        "checkpointed at the step it stopped after (every_steps=1000 would not have)"
    if stop == signal.SIGTERM:
        return  # the same handler as Ctrl-C's: resuming is checked once
    resumed = cutlab(["-m", *args], runs)
    assert f"from step {steps_done}" in resumed.stderr and "3 complete" in resumed.stderr
    cutlab([f"gamma={gamma}", *LONGER, "threads=1", "run_name=reference"], runs)
    assert_same_records(stopped, runs / "reference")


# a warm worker that takes 20 s to exit once its input ends, as W&B's teardown can: the launcher is then still closing
# its workers when the test's second signal comes
SLOW_EXIT = "import atexit, sys, time\nif 'cutlab.launch.worker' in sys.orig_argv:\n    atexit.register(time.sleep, 20)\n"


@pytest.mark.slow  # a stopped warm sweep: test_stopping_the_sweep_checkpoints_... runs by default
def test_a_second_signal_while_the_stopped_sweep_closes_its_workers_kills_them_and_the_sweep_still_records(tmp_path):
    """The second SIGTERM used to meet the default handler (put back before the workers were closed), which ended
    the sweep without its outcome.json."""
    runs = tmp_path / "runs"
    args = ["gamma=0,0.09,0.15", *LONGER, "launcher=local", "launcher.max_parallel=2"]
    (tmp_path / "slow_exit").mkdir()
    (tmp_path / "slow_exit" / "sitecustomize.py").write_text(SLOW_EXIT)
    sweep = start_sweep(args, runs, {"PYTHONPATH": os.pathsep.join([str(tmp_path / "slow_exit"), str(ROOT)])})
    running = [runs / f"L=2,eval.gamma_test=_0_,gamma={gamma},train.epochs=1,train.max_steps_per_epoch=40"
               for gamma in ("0", "0.09")]
    wait_for_rows(running, 3, sweep)
    workers = worker_pids(sweep.pid)
    try:
        sweep.send_signal(signal.SIGTERM)
        lines = []
        while sum(" runs done" in line for line in lines) < 3:  # every run ended: its workers are closing
            line = sweep.stderr.readline()
            assert line, "".join(lines[-20:])
            lines.append(line)
        time.sleep(0.5)
        sweep.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        sweep.send_signal(signal.SIGTERM)  # a third one, as the record is being written
        _, stderr = sweep.communicate(timeout=60)
    finally:
        for pid in workers:  # before the fix they outlived the killed sweep
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert sweep.returncode == 75, "".join(lines) + stderr[-2000:]
    assert "second signal: killing the runs" in stderr
    assert [o["status"] for o in sweep_outcome(runs)["runs"]] == ["interrupted"] * 3
    assert not list((runs / "_sweeps").glob("*/.outcome.json.*")), "no temporary file left"
    assert "3 complete" in cutlab(["-m", *args], runs).stderr


@pytest.mark.slow  # a stopped warm sweep: test_stopping_the_sweep_checkpoints_... runs by default
def test_a_run_stopped_while_its_own_process_starts_is_interrupted_not_failed(tmp_path):
    """``launcher.warm_workers=false``: SIGTERM reaches a run's fresh process before it installs its handler (while
    Python imports torch), which kills it; nothing was lost, so the run is interrupted and resumes."""
    runs = tmp_path / "runs"
    args = ["gamma=0.09", *TINY, "wandb.mode=disabled", "launcher=local", "launcher.warm_workers=false"]
    (tmp_path / "slow_start").mkdir()
    (tmp_path / "slow_start" / "sitecustomize.py").write_text(SLOW_START)
    gate = tmp_path / "gate"
    sweep = start_sweep(args, runs, {"PYTHONPATH": os.pathsep.join([str(tmp_path / "slow_start"), str(ROOT)]),
                                     "CUTLAB_TEST_GATE": str(gate)})
    deadline = time.time() + 120
    # python -m cutlab <overrides>, the run's process (not the sweep's own fork before its exec, which names -m)
    while not worker_pids(sweep.pid, b"\0cutlab\0", unless=b"\0cutlab\0-m\0"):
        assert sweep.poll() is None and time.time() < deadline, "the run's process never started"
        time.sleep(0.01)
    sweep.send_signal(signal.SIGTERM)
    _, stderr = sweep.communicate(timeout=120)
    gate.touch()  # after the sweep ended: its run never got past its start
    assert sweep.returncode == 75, stderr[-2000:]
    (outcome,) = sweep_outcome(runs)["runs"]
    assert outcome["status"] == "interrupted", outcome
    assert outcome["error"].endswith("stopped while it was starting; run the sweep again to resume")
    assert "1 complete" in cutlab(["-m", *args], runs).stderr


def test_a_run_killed_by_the_sweeps_second_signal_is_interrupted_not_failed(tmp_path, monkeypatch):
    """``launcher.warm_workers=false``: the second signal kills each run's process (exit -9), which was recorded
    failed, where a warm worker's run killed the same way is interrupted."""
    from cutlab.launch.local import ProcessPerRun
    from cutlab.launch.outcome import RunInterrupted

    for key, value in cutlab_env(tmp_path / "runs").items():
        monkeypatch.setenv(key, value)
    stopping = threading.Event()
    slot = ProcessPerRun(stopping)
    ended: list[BaseException] = []

    def run() -> None:
        try:
            slot.run(command(tmp_path, *LONGER, run_name="killed"))
        except BaseException as error:  # noqa: BLE001 - the test reads what the slot raised
            ended.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    history = tmp_path / "runs" / "killed" / "history.csv"
    deadline = time.time() + 300
    while not (history.exists() and len(history.read_text().splitlines()) > 2):
        assert runner.is_alive() and time.time() < deadline, ended
        time.sleep(0.05)
    stopping.set()  # as the sweep's second signal does: the first set it, this one kills
    slot.kill()
    runner.join(timeout=60)
    assert len(ended) == 1 and isinstance(ended[0], RunInterrupted), ended
    assert str(ended[0]).endswith("killed by the sweep's second signal; run the sweep again to resume it from its "
                                  "last checkpoint")


@pytest.mark.parametrize("warm", [False, True], ids=["process-per-run", "warm"])
def test_a_stop_signal_the_kernel_hands_to_a_slots_thread_still_stops_the_run(tmp_path, monkeypatch, warm):
    """Python runs a signal's handler in the main thread only. Where the kernel handed the sweep's SIGTERM to another
    of its threads, the main thread, blocked in ``as_completed``, ran the handler only once the run had ended: the
    run trained to its end and was recorded complete (the test above, about 1 in 10 tries with the cores busy).
    ``pthread_kill`` hands the signal to a thread other than the main one every time."""
    from cutlab.launch.local import run_local

    assert threading.current_thread() is threading.main_thread(), "the sweep's handlers exist in the main thread only"
    for key, value in cutlab_env(tmp_path / "runs").items():
        monkeypatch.setenv(key, value)
    history = tmp_path / "runs" / "aside" / "history.csv"
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    done = sigterm_to_a_thread_other_than_main(history)
    longest = [override for override in LONGER if not override.startswith("train.max_steps_per_epoch=")]
    try:  # 2000 steps: half a minute and more to the end; stopped, the run ends at its next step
        outcomes, stopped_by = run_local([command(tmp_path, *longest, "train.max_steps_per_epoch=2000",
                                                  run_name="aside")], max_parallel=1, warm_workers=warm)
    finally:  # a stopped sweep leaves its signals ignored, for its record; this test's process goes on
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert stopped_by == "SIGTERM" and [outcome.status for outcome in outcomes] == ["interrupted"], outcomes
    assert len(pd.read_csv(history)) < 2000


def test_a_stop_that_comes_while_a_runs_process_is_being_started_still_reaches_it(tmp_path, monkeypatch):
    """The sweep's signal can come while its slot is starting a run's process (inside Popen, before the process
    object exists): the run is still stopped, as soon as its process exists, and not left to run to the end."""
    from cutlab.launch.local import ProcessPerRun
    from cutlab.launch.outcome import RunInterrupted

    for key, value in cutlab_env(tmp_path / "runs").items():
        monkeypatch.setenv(key, value)
    stopping = threading.Event()
    slot = ProcessPerRun(stopping)
    stopping.set()  # as the sweep's handler does, then interrupts every slot:
    slot.interrupt()  # no process yet, as when the signal lands between the slot taking the run and Popen returning
    with pytest.raises(RunInterrupted, match="stopped while it was starting; run the sweep again to resume"):
        slot.run(command(tmp_path, *TINY, "wandb.mode=disabled", run_name="late"))
    assert not (tmp_path / "runs" / "late" / "summary.json").exists()
