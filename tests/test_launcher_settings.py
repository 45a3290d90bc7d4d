"""Launcher settings on the command line (``launcher=slurm launcher.partition=gpu``): submitit's names, the profile
file's defaults under the command line's values, run folders that never depend on them, one line for a bad key, the
same settings for cutlab-search, and an --info that names the launcher that really runs a sweep. No cluster needed:
the sbatch script is submitit's own writer's (the real cluster's run is tests/test_slurm.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import ROOT
from cutlab.errors import CutlabError
from helpers.cli import cutlab
from helpers.contract import cutlab_env
from helpers.sweeps import plan_ids

SETTINGS = ["launcher.partition=gpu", "launcher.timeout_min=30", "launcher.mem_gb=2.5", "launcher.cpus_per_task=3",
            "launcher.qos=high", "launcher.array_parallelism=1", "launcher.additional_parameters={comment:paper}"]


def composed_launcher(overrides: list[str]) -> dict:
    from cutlab.config.compose import compose_run_config

    return OmegaConf.to_container(compose_run_config(overrides).launcher)


def test_every_launcher_yaml_holds_exactly_the_keys_cutlab_reads():
    """conf/launcher/*.yaml and the key table (folder naming, checks) name the same keys, and slurm/*.yaml profiles
    use the same SLURM names as the command line."""
    from cutlab.config.launcher import KEYS, SLURM_SETTINGS

    for name, keys in KEYS.items():
        assert tuple(OmegaConf.load(ROOT / "conf" / "launcher" / f"{name}.yaml")) == keys, name
    for profile in sorted((ROOT / "slurm").glob("*.yaml")):
        assert set(OmegaConf.load(profile)) <= set(SLURM_SETTINGS), profile.name


def test_command_line_keys_override_the_profile_and_map_to_submitits_parameters():
    from cutlab.launch.slurm_profile import slurm_settings

    gpu = slurm_settings({"profile": "gpu"})  # the profile file alone: a launcher node that sets no other key
    settings = slurm_settings(composed_launcher(["launcher=slurm", "launcher.profile=gpu", *SETTINGS]))
    assert (settings.partition, settings.timeout_min, settings.mem_gb, settings.cpus_per_task, settings.qos) == \
        ("gpu", 30, 2.5, 3, "high")
    assert (settings.gpus_per_node, settings.signal_delay_s, settings.max_requeues) == \
        (gpu.gpus_per_node, gpu.signal_delay_s, gpu.max_requeues), "keys not given keep the profile's values"
    parameters = settings.executor_parameters("job")
    assert parameters["time"] == 30 and parameters["mem"] == "2560MB" and parameters["qos"] == "high"
    assert parameters["additional_parameters"] == {"comment": "paper"} and parameters["array_parallelism"] == 1
    assert slurm_settings(composed_launcher(["launcher=slurm"])) == slurm_settings({"profile": "default"})


def test_additional_parameters_merge_key_by_key_over_the_profiles(tmp_path):
    from cutlab.launch.slurm_profile import slurm_settings

    profile = tmp_path / "lab.yaml"
    profile.write_text("partition: long\nadditional_parameters: {mail_type: END, comment: old}\n"
                       "setup: [module load x]\n")
    settings = slurm_settings(composed_launcher(["launcher=slurm", f"launcher.profile={profile}",
                                                 "launcher.additional_parameters={comment:new,exclusive:true}"]))
    assert settings.additional_parameters == {"mail_type": "END", "comment": "new", "exclusive": True}
    assert settings.partition == "long" and settings.setup == ("module load x",)


def test_launcher_settings_never_change_a_runs_folder(tmp_path):
    """The plan's run ids with every SLURM key set equal those of the same command without them (and of the in-process
    and local launchers); Hydra's folder name leaves out exactly the keys of the launcher table."""
    from cutlab.launch.plan import Command, expand

    grid = ["model=dust,ut", "gamma=0,0.09"]
    plain = [run.run_id for run in expand(Command(grid, multirun=True)).runs]
    assert plain == ["gamma=0,model=dust", "gamma=0.09,model=dust", "gamma=0,model=ut", "gamma=0.09,model=ut"]
    for launcher in (["launcher=slurm", "launcher.profile=gpu", *SETTINGS, "launcher.setup=[echo]", "launcher.threads=2",
                      "launcher.max_requeues=0", "launcher.gpus_per_node=2", "launcher.signal_delay_s=60",
                      "launcher.account=lab", "launcher.constraint=a100"],
                     ["launcher=local", "launcher.max_parallel=4", "launcher.warm_workers=false", "launcher.threads=1"]):
        assert [run.run_id for run in expand(Command([*launcher, *grid], multirun=True)).runs] == plain, launcher


def test_an_empty_name_in_a_profile_is_refused_rather_than_left_to_the_clusters_default(tmp_path):
    from cutlab.launch.slurm_profile import slurm_settings

    profile = tmp_path / "mine.yaml"
    profile.write_text("partition: ''\naccount: lab\n")
    with pytest.raises(CutlabError, match=rf"partition in the SLURM profile {profile} is empty; name one"):
        slurm_settings({"profile": str(profile)})


def test_a_profile_with_the_earlier_key_names_is_refused_naming_the_new_ones(tmp_path):
    from cutlab.errors import CutlabError
    from cutlab.launch.slurm_profile import slurm_settings

    old = tmp_path / "old.yaml"
    old.write_text("time_min: 30\nadditional: {qos: high}\n")
    with pytest.raises(CutlabError, match=r"rename additional: to additional_parameters:, time_min: to timeout_min: "
                                          r"in the SLURM profile"):
        slurm_settings({"profile": str(old)})
    executor = tmp_path / "executor.yaml"  # submitit's AutoExecutor names and sbatch's: "unknown key(s)"
    executor.write_text("slurm_partition: gpu\ntime: 60\n")
    with pytest.raises(CutlabError, match=r"rename slurm_partition: to partition:, time: to timeout_min: in the SLURM "
                                          r"profile .* \(the names of Hydra's submitit launcher, as on the command "
                                          r"line: launcher.partition=...\)"):
        slurm_settings({"profile": str(executor)})


@pytest.mark.parametrize(
    "args, expected",
    [
        (["launcher.partiton=gpu"], "unknown launcher key 'launcher.partiton'; the keys are launcher=inprocess: (none); "
                                    "launcher=local: max_parallel, threads, warm_workers; launcher=slurm: profile, "
                                    "threads, partition,"),
        (["launcher.time_min=30"], "launcher.time_min is now launcher.timeout_min (submitit's name); write "
                                   "launcher.timeout_min=30"),
        # submitit's AutoExecutor names and sbatch's: "unknown launcher key", with all the keys
        (["launcher.slurm_partition=gpu"], "launcher.slurm_partition is launcher.partition here (Hydra's submitit "
                                           "launcher's name for it): write launcher.partition=gpu"),
        (["launcher.time=60"], "launcher.time is launcher.timeout_min here (Hydra's submitit launcher's name for it): "
                               "write launcher.timeout_min=60"),
        (["+launcher.additional_parameters.qos=high"], "give additional_parameters as one mapping, "
                                                       "launcher.additional_parameters={qos:high}"),
        (["+launcher.partition=gpu"], "launcher.partition is a key of launcher=slurm: write launcher.partition=gpu "
                                      "without the '+' (with launcher=slurm)"),
        (["launcher.mem_gb=0"], "launcher.mem_gb must be a positive number, got 0"),
        (["launcher.threads=0"], "launcher.threads must be a whole number >= 1, got 0; e.g. launcher.threads=1"),
        # an unset variable, launcher.partition=$PART: the jobs went to the cluster's default partition, unsaid
        (["launcher.partition="], "launcher.partition is empty; name one, or leave it out (null)"),
        (["launcher.profile="], "launcher.profile is empty; name a profile"),
    ],
    ids=["misspelt-key", "old-name", "submitit-executor-name", "sbatch-name", "nested-key", "plus-on-a-key",
         "bad-value", "no-threads", "empty-partition",
         "empty-profile"],
)
def test_a_bad_launcher_key_is_one_line_naming_the_fix(tmp_path, args, expected):
    assert_plan_refused_in_one_line(tmp_path, ["launcher=slurm", *args], expected)


def assert_plan_refused_in_one_line(tmp_path, args: list[str], expected: str) -> None:
    runs = tmp_path / "runs"
    result = cutlab(["--plan", "-m", "gamma=0,0.09", *args], runs, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert not runs.exists()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["hydra/launcher=submitit_slurm"], "hydra/launcher=submitit_slurm: cutlab does not use Hydra's launcher "
                                            "plugins; its launchers are launcher=inprocess|local|slurm"),
        (["hydra/sweeper=optuna"], "hydra/sweeper=optuna: cutlab does not use Hydra's sweeper plugins; a sweep is -m "
                                   "with lists (gamma=0,0.09) or a sweep file (-m --config-name table3), and the "
                                   "Bayesian search (Optuna TPE) is cutlab-search search=PRESET"),
        (["hydra.launcher.timeout_min=60"], "hydra.launcher.timeout_min: cutlab's launcher keys are launcher.KEY "
                                            "(submitit's names for SLURM); write launcher.timeout_min=60 (with "
                                            "launcher=slurm)"),
    ],
    ids=["hydra-launcher", "hydra-sweeper", "hydra-launcher-key"],
)
def test_hydras_launcher_and_sweeper_plugins_are_pointed_to_cutlabs_own(tmp_path, args, expected):
    """As a Hydra user writes them: they were "Could not find 'hydra/launcher/submitit_slurm'" (or, with the plugin
    installed, an in-process sweep launched by it, past cutlab's plan and record) and "Could not override
    'hydra.launcher.timeout_min'"."""
    assert_plan_refused_in_one_line(tmp_path, args, expected)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["launcher.max_parallel=0"], "launcher.max_parallel must be a whole number >= 1, got 0; e.g. "
                                      "launcher.max_parallel=2"),
        (["launcher.warm_workers=maybe"], "launcher.warm_workers must be true or false, got 'maybe'"),
    ],
    ids=["no-slots", "warm-workers-not-a-flag"],
)
def test_a_bad_local_launcher_value_is_one_line_instead_of_another_value(tmp_path, args, expected):
    """Not coerced: max_parallel=0 used to run one slot, and any string turned warm workers on."""
    assert_plan_refused_in_one_line(tmp_path, ["launcher=local", *args], expected)


def test_a_key_of_another_launcher_names_each_launchers_keys(tmp_path):
    """Named before Hydra starts when the command chooses the launcher; else when the sweep is composed."""
    result = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher=local", "launcher.partition=gpu"], tmp_path / "runs",
                    check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert ("launcher=local has no key partition (it is launcher=slurm's); launcher=local's keys are max_parallel, "
            "threads, warm_workers") in result.stderr
    result = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher.partition=gpu"], tmp_path / "runs", check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "Could not override 'launcher.partition'; each launcher has its own keys: " in result.stderr
    assert "launcher=slurm: profile, threads, partition" in result.stderr
    single = cutlab(["launcher=inprocess", "+launcher.partition=gpu"], tmp_path / "runs", check=False)
    assert single.returncode == 2 and "launcher=inprocess has no key partition" in single.stderr, single.stderr


def test_info_names_the_launcher_that_runs_the_sweep_and_its_settings(tmp_path):
    slurm = cutlab(["--info", "defaults", "launcher=slurm", "launcher.partition=gpu", "launcher.timeout_min=30"],
                   tmp_path / "runs")
    assert "hydra/launcher/basic" in slurm.stdout  # Hydra's own table, followed by cutlab's account of it
    assert ("launcher: slurm: cutlab plans and launches a multirun (-m) itself, before Hydra starts "
            "(cutlab/launch/sweep.py); Hydra's hydra/launcher (basic, above) does not run it") in slurm.stdout
    assert "settings (profile default, overridden by launcher.KEY=): partition=gpu " in slurm.stdout
    assert " timeout_min=30 mem_gb=4 " in slurm.stdout
    # the threads each run gets: the job's CPUs where launcher.threads is null (it showed threads=None)
    assert " cpus_per_task=1 " in slurm.stdout and slurm.stdout.count(" threads=1 (cpus_per_task)") == 1, slurm.stdout
    cores = cutlab(["--info", "defaults", "launcher=slurm", "launcher.cpus_per_task=4"], tmp_path / "runs")
    assert " threads=4 (cpus_per_task)" in cores.stdout and "threads=None" not in cores.stdout
    own = cutlab(["--info", "defaults", "launcher=slurm", "launcher.cpus_per_task=4", "threads=2"], tmp_path / "runs")
    assert " threads=2 (the runs' threads=)" in own.stdout, own.stdout
    fixed = cutlab(["--info", "defaults", "launcher=slurm", "launcher.threads=3"], tmp_path / "runs")
    assert fixed.stdout.rstrip().endswith(" threads=3"), fixed.stdout
    inprocess = cutlab(["--info", "defaults"], tmp_path / "runs")
    assert "launcher: inprocess: a multirun (-m) runs in this process through Hydra's hydra/launcher (basic)" \
        in inprocess.stdout


def test_cutlab_search_takes_the_same_launcher_settings(tmp_path, monkeypatch, capsys):
    """``cutlab-search ... launcher=slurm launcher.partition=gpu``: the dry run shows the workers' sbatch script; the
    trials' overrides hold no launcher key; the earlier --launcher/--slurm-profile flags name the overrides."""
    from cutlab.search.__main__ import build_plan, main, parse_args

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    args = ["search=dust_video", "--workers", "3", "launcher=slurm", "launcher.partition=gpu",
            "launcher.timeout_min=45", "launcher.mem_gb=3", "launcher.additional_parameters={comment:study}", "L=2"]
    assert main([*args, "--dry-run"]) == 0
    err = capsys.readouterr().err
    for line in ("#SBATCH --partition=gpu", "#SBATCH --time=45", "#SBATCH --mem=3GB", "#SBATCH --comment=study",
                 "#SBATCH --array=0-2%3", "#SBATCH --job-name=search-dust_video"):
        assert line in err, err[-3000:]
    plan = build_plan(parse_args(args))
    assert plan.base_overrides == ("L=2",) and plan.launcher["partition"] == "gpu"

    assert main(["search=dust_video", "--launcher", "slurm", "--slurm-profile", "gpu", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("cutlab-search: error: --launcher/--slurm-profile are now overrides, as python -m cutlab "
                           "takes them: write launcher=slurm launcher.profile=gpu (and any launcher.KEY=VALUE, e.g. "
                           "launcher.partition=gpu)")
    assert main(["search=dust_video", "launcher.partiton=gpu", "--dry-run"]) == 2
    assert "unknown launcher key 'launcher.partiton'" in capsys.readouterr().err


def test_a_signalled_task_requeues_within_the_profiles_signal_delay_when_its_run_does_not_stop(tmp_path, monkeypatch):
    """checkpoint() (submitit's SIGUSR2 hook) waits for the run's checkpoint at most what signal_delay_s leaves after
    the requeue's margin, then hands submitit the same command; it once waited 60 s whatever the profile said, so
    with signal_delay_s 30 SLURM killed the task before it could requeue. The child here is a real process that
    ignores SIGTERM, as a run inside one long step does."""
    import pickle
    import threading
    import time

    from cutlab.launch.job import DEFAULT_STOP_GRACE_S, RunCommand
    from cutlab.launch.slurm_profile import REQUEUE_MARGIN_S, SlurmProfile

    assert SlurmProfile(signal_delay_s=30).stop_grace_s == 30 - REQUEUE_MARGIN_S
    assert SlurmProfile(signal_delay_s=5).stop_grace_s == 1.0  # never a deadline already past
    (tmp_path / "stubborn.py").write_text("import pathlib, signal, time\n"
                                          "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                          f"pathlib.Path({str(tmp_path / 'ready')!r}).touch()\ntime.sleep(60)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    command = RunCommand([], "stubborn", str(tmp_path), str(tmp_path), module="stubborn",
                         stop_grace_s=SlurmProfile(signal_delay_s=12).stop_grace_s)
    ended = []
    job = threading.Thread(target=lambda: ended.append(_ended(command)), daemon=True)
    job.start()
    while command._child is None or not (tmp_path / "ready").exists():  # the child has installed its handler
        assert not ended, ended
        time.sleep(0.05)
    started = time.monotonic()
    again = command.checkpoint()
    waited = time.monotonic() - started
    try:
        assert command._child.poll() is None, "the stubborn child was not killed: SLURM does that, or it stops itself"
        assert 2.0 <= waited < 8.0, waited  # 12 - 10 = 2 s of grace, not 60
        assert pickle.loads(pickle.dumps(again.function)).stop_grace_s == 2.0, "the requeued job keeps its grace"
    finally:
        command._child.kill()
        job.join(timeout=10)
    assert ended and not job.is_alive()
    old = {k: v for k, v in command.__getstate__().items() if k != "stop_grace_s"}  # pickled by an earlier version
    restored = RunCommand.__new__(RunCommand)
    restored.__setstate__(old)
    assert restored.stop_grace_s == DEFAULT_STOP_GRACE_S


def _ended(command) -> str:
    try:
        command()
    except Exception as error:  # the killed child is a failed run: what matters here is that the job ended
        return type(error).__name__
    return "complete"


def test_a_task_whose_run_stopped_on_sigterm_is_interrupted_not_failed(tmp_path, monkeypatch):
    """Where SLURM preempts with SIGTERM (no preempt_send_user_signal), the run checkpoints and exits 75, and
    submitit hands back the job's RunInterrupted inside its own error: the sweep reports the run interrupted,
    with the line that says how to resume, not failed. A real submitit job (its local executor) and a child that
    exits as a checkpointed cutlab run does."""
    import submitit

    from cutlab.launch.job import RunCommand
    from cutlab.launch.outcome import outcome_of
    from cutlab.run.preemption import PREEMPTED_EXIT

    for name in ("checkpointed", "fresh"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit({PREEMPTED_EXIT})\n")
    (tmp_path / "checkpointed").mkdir()
    (tmp_path / "checkpointed" / "checkpoint.pt").write_bytes(b"")  # what the run left; "fresh" left none
    (tmp_path / "broken.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    executor = submitit.LocalExecutor(folder=tmp_path / "jobs")
    executor.update_parameters(timeout_min=5)
    jobs = {name: executor.submit(RunCommand([], name, str(tmp_path / name), str(tmp_path), module=name))
            for name in ("checkpointed", "fresh", "broken")}
    stopped = outcome_of("checkpointed", jobs["checkpointed"].result, job_id="1")
    assert stopped.status == "interrupted", stopped
    assert stopped.error == "stopped by a signal after checkpointing; run the sweep again to resume"  # not its id twice
    assert stopped.line().startswith("interrupted checkpointed [job 1] stopped by a signal after checkpointing")
    # stopped in its set-up: it said "after checkpointing" of a run with no checkpoint (it starts again)
    fresh = outcome_of("fresh", jobs["fresh"].result, job_id="3")
    assert fresh.error == "stopped by a signal before its first checkpoint; run the sweep again to resume"
    broken = outcome_of("broken", jobs["broken"].result, job_id="2")
    assert broken.status == "failed" and broken.error == "exit 3: no output", broken



def test_a_task_whose_run_folder_another_process_writes_is_busy_not_failed(tmp_path, monkeypatch):
    """A SLURM task (or a local launcher's process per run) whose run another live process writes, such as an
    overlapping sweep's run: its python -m cutlab is refused at the folder's lock, and the sweep reports the run
    busy, left to that process; it was failed ("exit 2"). A real submitit job (its local executor) running a real
    run, whose folder this test's process holds."""
    import socket

    import submitit

    from cutlab.launch.job import RunCommand
    from cutlab.launch.outcome import BUSY_ADVICE, outcome_of
    from cutlab.run.lock import RunLock

    runs = tmp_path / "runs"
    for key, value in cutlab_env(runs).items():  # the job's environment, and so its run's
        monkeypatch.setenv(key, value)
    executor = submitit.LocalExecutor(folder=tmp_path / "jobs")
    executor.update_parameters(timeout_min=5)
    with RunLock(runs / "held"):
        job = executor.submit(RunCommand(["run_name=held", "wandb.mode=disabled"], "held", str(runs / "held"),
                                         str(ROOT), threads=1))
        outcome = outcome_of("held", job.result, job_id="1_0")
    holder = f"process {os.getpid()} on {socket.gethostname()}"
    assert (outcome.status, outcome.error) == ("busy", f"written by {holder}: {BUSY_ADVICE}"), outcome
    assert outcome.line().startswith("busy        held [job 1_0] written by process "), outcome.line()

def test_a_task_out_of_time_limit_requeues_is_interrupted_and_a_crash_names_its_error_not_a_log_path(tmp_path,
                                                                                                      monkeypatch):
    """A task that hits its time limit once more than launcher.max_requeues allows ends in submitit's
    UncompletedJobError (its run stopped at a checkpoint): interrupted, naming the keys; a task that raised names its
    exception's line, not the log path that closes submitit's error text. Real submitit jobs (its local executor)."""
    import submitit

    from cutlab.launch.outcome import TIMED_OUT_ADVICE, outcome_of

    (tmp_path / "job_ends.py").write_text(
        "from submitit.core.utils import UncompletedJobError\n"
        "def timed_out():\n    raise UncompletedJobError('Job not requeued because: timed-out too many times.')\n"
        "def crashed():\n    raise MemoryError('CUDA out of memory')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import job_ends

    executor = submitit.LocalExecutor(folder=tmp_path / "jobs")
    executor.update_parameters(timeout_min=5)
    timed_out, crashed = executor.submit(job_ends.timed_out), executor.submit(job_ends.crashed)
    outcome = outcome_of("long-run", timed_out.result, job_id="1_0")
    assert (outcome.status, outcome.error) == ("interrupted", TIMED_OUT_ADVICE), outcome
    assert "launcher.max_requeues" in outcome.line() and "launcher.timeout_min" in outcome.line()
    outcome = outcome_of("oom-run", crashed.result, job_id="1_1")
    assert (outcome.status, outcome.error) == ("failed", "MemoryError: CUDA out of memory"), outcome


def test_a_time_limit_within_the_signal_delay_is_refused_in_one_line_naming_the_shortest_limit(tmp_path):
    """SLURM sends --signal=USR2@signal_delay_s up to 60 s early: a time limit inside that window signals every task
    at its start, so it would be requeued without a step until its requeues are spent."""
    from cutlab.launch.slurm_profile import slurm_settings

    for timeout_min, delay in ((1, 30), (2, 90)):
        with pytest.raises(CutlabError, match=rf"launcher.timeout_min={timeout_min} leaves no time to train: .*"
                                             rf"launcher.signal_delay_s={delay} s before the limit"):
            slurm_settings({"profile": "default", "timeout_min": timeout_min, "signal_delay_s": delay})
    assert slurm_settings({"profile": "default", "timeout_min": 3, "signal_delay_s": 90}).timeout_min == 3
    result = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher=slurm", "launcher.timeout_min=2"], tmp_path / "runs",
                    check=False, timeout=120)
    assert result.returncode == 2 and result.stderr.splitlines()[-1] == (
        "cutlab: error: launcher.timeout_min=2 leaves no time to train: SLURM sends the checkpoint signal "
        "launcher.signal_delay_s=90 s before the limit and up to 60 s earlier, so every task would be stopped at its "
        "start and requeued; set launcher.timeout_min=3 or more (or a smaller launcher.signal_delay_s)")


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("{time:1}", "launcher.additional_parameters has time (sbatch's --time), which launcher.timeout_min sets: "
                     "give launcher.timeout_min= instead"),
        ("{mem:8G}", "which launcher.mem_gb sets: give launcher.mem_gb= instead"),
        ("{cpus-per-task:4}", "has cpus-per-task (sbatch's --cpus-per-task), which launcher.cpus_per_task sets"),
        ("{partition:gpu}", "which launcher.partition sets"),
        ("{gpus:1}", "which launcher.gpus_per_node sets"),
        ("{array:0-9}", "which launcher.array_parallelism sets"),
    ],
    ids=["time", "mem", "cpus-per-task", "partition", "gpus", "array"],
)
def test_an_additional_parameter_that_a_launcher_key_sets_is_refused_naming_that_key(tmp_path, extra, expected):
    """launcher.additional_parameters={time:1} went into the sbatch script over timeout_min (--time=1), past the
    checks of timeout_min (a limit too short to train), and the profile's named keys with it."""
    assert_plan_refused_in_one_line(tmp_path, ["launcher=slurm", f"launcher.additional_parameters={extra}"], expected)


def test_an_additional_parameter_in_a_profile_that_a_key_sets_is_refused_naming_that_key(tmp_path):
    from cutlab.launch.slurm_profile import slurm_settings

    profile = tmp_path / "lab.yaml"
    profile.write_text("additional_parameters: {time: 5, comment: paper}\n")
    with pytest.raises(CutlabError, match=r"additional_parameters in the SLURM profile .*lab.yaml has time \(sbatch's "
                                          r"--time\), which launcher.timeout_min sets: give timeout_min: instead"):
        slurm_settings({"profile": str(profile)})


def test_the_planned_sbatch_script_quotes_the_runs_folder_as_submitit_does(tmp_path):
    """A runs folder with a space and ``$(...)``: the script's command line split as the shell splits it gives the
    folder whole and runs nothing; --plan showed it unquoted, unlike the script submitit writes (shlex.quote)."""
    import shlex

    runs = tmp_path / "a b $(touch PWNED) x"
    planned = cutlab(["--plan", "-m", "gamma=0,0.09", "launcher=slurm"], runs).stdout
    [line] = [line for line in planned.splitlines() if "submitit.core._submit" in line]
    folder = shlex.split(line)[-1]
    assert folder.startswith(f"{runs}/_sweeps/") and folder.endswith("-<time>/submitit"), line
    assert shlex.split(line)[-4:-1] == ["-u", "-m", "submitit.core._submit"], line
