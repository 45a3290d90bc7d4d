"""A search's own files (the study folder's ``.ask.lock`` and ``search_report.json``, the journal) from elsewhere or
on a full disk: one line naming the file, its target and the journal's records untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.mounts import fill, full_disk  # noqa: F401 - a fixture

TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "data.stride=10", "eval.gamma_test=[0,0.5]",
        "wandb.mode=disabled", "progress=false", "threads=1", "search.pruner=null", "--n-trials", "1"]


def search(args: list[str], tmp: Path, monkeypatch, capsys) -> tuple[int, list[str]]:
    """The real CLI in this process: its exit code and its stderr's ``cutlab-search: error:`` lines."""
    from cutlab.search.__main__ import main

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp / "runs"))
    monkeypatch.setenv("CUTLAB_CACHE_DIR", str(tmp / "cache"))
    code = main(["search=dust_video", *TINY, *args])
    error = capsys.readouterr().err
    assert "Traceback" not in error, error[-4000:]
    return code, [line for line in error.splitlines() if line.startswith("cutlab-search: error:")]


@pytest.mark.parametrize("name", [".ask.lock", "search_report.json", "optuna.journal", "storage.txt"])
def test_a_study_folder_file_that_links_elsewhere_is_refused_and_its_target_kept(tmp_path, monkeypatch, capsys, name):
    """Before: ``.ask.lock -> thesis.tex`` had thesis.tex truncated to 0 bytes and ``search_report.json -> notes``
    had the report written over notes, by a search that exited 0; ``optuna.journal -> notes`` had a record appended
    to notes, then a JSONDecodeError traceback."""
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    study_dir.mkdir(parents=True)
    victim = tmp_path / "thesis.tex"
    victim.write_text("my thesis\n")
    (study_dir / name).symlink_to(victim)
    for dry_run in (["--dry-run"], []):
        code, lines = search(dry_run, tmp_path, monkeypatch, capsys)
        assert code == 2 and len(lines) == 1, lines
        assert f"{study_dir / name} is a symbolic link (to {victim})" in lines[0] and "remove it" in lines[0], lines
    assert victim.read_text() == "my thesis\n" and (study_dir / name).is_symlink()
    assert not list(study_dir.glob("trial-*"))


@pytest.mark.parametrize("first", ["sqlite", "journal"])
def test_a_study_name_reused_with_another_storage_is_refused_and_the_first_studys_results_kept(tmp_path, monkeypatch,
                                                                                              capsys, first):
    """Before: the second storage's study took the folder: its report replaced the first's, and its trial 0, which
    drew the same parameters, took the first study's complete trial-0000 as its own result without training."""
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    monkeypatch.chdir(tmp_path)
    database = ["--storage", "sqlite:///study.db"]  # relative: the same file from any spelling of its path
    recorded, journal = f"sqlite:///{tmp_path / 'study.db'}", study_dir / "optuna.journal"
    given, other = (database, []) if first == "sqlite" else ([], database)
    code, lines = search(given, tmp_path, monkeypatch, capsys)
    assert code == 0, lines
    assert (study_dir / "storage.txt").read_text() == f"{recorded if first == 'sqlite' else journal}\n"
    report, summary = (study_dir / "search_report.json").read_bytes(), (study_dir / "trial-0000" / "summary.json")
    done = summary.stat().st_mtime_ns
    resume = f"--storage {recorded} to resume this one" if first == "sqlite" else \
        "drop --storage (and $CUTLAB_STORAGE, search.storage) to resume this one, in its folder's journal"
    for dry_run in (["--dry-run"], []):
        code, lines = search([*other, *dry_run], tmp_path, monkeypatch, capsys)
        assert code == 2 and len(lines) == 1, lines
        assert lines[0] == (f"cutlab-search: error: the study folder {study_dir} holds the study dust_video of the "
                            f"storage {recorded if first == 'sqlite' else journal}, and this command's storage is "
                            f"{journal if first == 'sqlite' else recorded}: "
                            f"a study folder holds one study's trials; give --study NEW for a new study, or {resume}")
    assert (study_dir / "search_report.json").read_bytes() == report and summary.stat().st_mtime_ns == done
    assert not (tmp_path / "study.db" if first == "journal" else journal).exists()
    # the same storage spelt otherwise, from another folder, resumes it; a folder from before the record (none) takes
    # the storage it is given, and records it
    monkeypatch.chdir(study_dir)
    again = ["--storage", "sqlite:///../../../study.db"] if first == "sqlite" else ["--storage", "optuna.journal"]
    for record in (True, False):
        if not record:
            (study_dir / "storage.txt").unlink()
        code, lines = search(again, tmp_path, monkeypatch, capsys)
        assert code == 0 and (study_dir / "storage.txt").read_text().strip() == (recorded if first == "sqlite"
                                                                                  else str(journal)), lines
    assert (study_dir / "search_report.json").read_bytes() == report and summary.stat().st_mtime_ns == done


def test_a_storage_is_recorded_without_its_password_and_its_path_made_absolute(tmp_path, monkeypatch):
    from cutlab.search.holder import storage_identity

    monkeypatch.chdir(tmp_path)
    assert storage_identity("postgresql+psycopg2://me:s3cr@t@db:5432/optuna") == "postgresql://me:***@db:5432/optuna"
    assert storage_identity("study.journal") == storage_identity(f"journal:{tmp_path}/x/../study.journal") == \
        str(tmp_path / "study.journal")
    assert storage_identity("sqlite:///a.db?timeout=5") == f"sqlite:///{tmp_path / 'a.db'}?timeout=5"


@pytest.mark.timeout(120)
def test_a_journal_that_is_a_fifo_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """Before: passed by --dry-run, then the search hung for ever opening it for writing (a FIFO waits for a
    reader)."""
    import os

    study_dir = tmp_path / "runs" / "search" / "dust_video"
    study_dir.mkdir(parents=True)
    os.mkfifo(study_dir / "optuna.journal")
    for dry_run in (["--dry-run"], []):
        code, lines = search(dry_run, tmp_path, monkeypatch, capsys)
        assert code == 2 and len(lines) == 1, lines
        assert f"{study_dir / 'optuna.journal'} is a FIFO, not a regular file" in lines[0], lines
        assert "remove it" in lines[0], lines
    assert not list(study_dir.glob("trial-*"))


@pytest.mark.timeout(60)
def test_a_fifo_planted_after_the_checks_is_refused_not_waited_on(tmp_path):
    """Before: the study's first record waited for ever to open the FIFO for writing."""
    import os

    import optuna

    from cutlab.errors import CutlabError
    from cutlab.search.storage import open_storage

    journal = tmp_path / "study" / "optuna.journal"
    storage = open_storage(str(journal), {"interval_s": 10, "grace_s": 60})
    journal.unlink()
    os.mkfifo(journal)
    with pytest.raises(CutlabError, match=f"{journal} is a FIFO, not a regular file; a journal is written only"):
        optuna.create_study(study_name="late", storage=storage)


def test_a_link_planted_after_the_checks_is_still_not_written_through(tmp_path):
    """The study folder's files are opened without following a link (as a run's ``.lock`` is), so a link that
    appears after the search checked its folder is refused too. Before: the lock's target truncated, the report
    written over its target, the journal's record appended to its target."""
    import optuna

    from cutlab.errors import CutlabError
    from cutlab.search.report import write_report
    from cutlab.search.storage import open_storage
    from cutlab.search.worker import study_lock

    study_dir = tmp_path / "study"
    storage = open_storage(str(study_dir / "optuna.journal"), {"interval_s": 10, "grace_s": 60})
    victim = tmp_path / "thesis.tex"
    victim.write_text("my thesis\n")
    for name in (".ask.lock", "optuna.journal", "search_report.json"):
        (study_dir / name).unlink(missing_ok=True)
        (study_dir / name).symlink_to(victim)
        with pytest.raises(CutlabError, match=f"{study_dir / name} is a symbolic link"):
            if name == ".ask.lock":
                with study_lock(study_dir):
                    pass
            elif name == "optuna.journal":
                optuna.create_study(study_name="late", storage=storage)
            else:
                write_report({None: optuna.create_study()}, study_dir)
        assert victim.read_text() == "my thesis\n"


def a_journal(path: Path) -> bytes:
    """A real journal: a study and its attribute, two records."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # as the search sets it: no line to a closed capture
    study = optuna.create_study(study_name="other", storage=JournalStorage(JournalFileBackend(str(path))))
    study.set_user_attr("note", "mine")
    return path.read_bytes()


@pytest.mark.parametrize("content", ["garbage\n", "[1, 2]\n", "{\n  \"a\": 1\n}\n", "RECORD\ngarbage\nRECORD\n",
                                     "RECORD\nRECORD\ngarbage\n"],
                         ids=["text", "json", "pretty-json", "corrupt-middle", "corrupt-end"])
def test_a_journal_that_is_not_optunas_stops_in_one_line_before_anything_is_appended(tmp_path, monkeypatch, capsys,
                                                                                    content):
    """Before: a 50-line JSONDecodeError traceback, raised after Optuna had appended the new study's record to the
    file (a one-line file that is not a journal is read by Optuna as a journal whose last record was cut short)."""
    study_dir = tmp_path / "runs" / "search" / "dust_video"
    study_dir.mkdir(parents=True)
    journal = study_dir / "optuna.journal"
    if "RECORD" in content:
        first, second = a_journal(tmp_path / "real.journal").decode().splitlines(keepends=True)
        content = content.replace("RECORD\n", first, 1).replace("RECORD\n", second, 1)
    journal.write_text(content)
    code, lines = search([], tmp_path, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f"{journal} is not an Optuna journal" in lines[0] and "move it away" in lines[0], lines
    assert journal.read_text() == content and not list(study_dir.glob("trial-*"))


def test_a_full_disk_under_the_journal_stops_in_one_line_and_the_same_command_goes_on(tmp_path, monkeypatch,
                                                                                      capsys, full_disk):
    """Before: a 44-line OSError traceback from Optuna's create_study."""
    journal = full_disk / "study.journal"
    filler = fill(full_disk)
    code, lines = search(["--storage", str(journal)], tmp_path, monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert f"no space left on the device holding {full_disk} (while writing study.journal)" in lines[0], lines
    assert "run the same command again" in lines[0] and journal.read_bytes() == b""
    filler.unlink()
    code, lines = search(["--storage", str(journal)], tmp_path, monkeypatch, capsys)
    assert code == 0, lines
    assert (tmp_path / "runs" / "search" / "dust_video" / "trial-0000" / "summary.json").exists()


def test_a_journal_record_cut_short_by_a_full_disk_is_taken_back(tmp_path, full_disk):
    """A record that only partly fits (the disk fills in the middle of it) is removed: Optuna left its first bytes,
    and the next record appended after space came back joined them in one line that no reader parses."""
    from cutlab.atomic import DiskFull
    from cutlab.search.storage import open_storage

    storage = open_storage(str(full_disk / "study.journal"), {"interval_s": 10, "grace_s": 60})
    journal = full_disk / "study.journal"
    storage._backend.append_logs([{"op_code": -1, "pad": ""}])
    pad = 4096 - 40 - 2 * journal.stat().st_size  # 40 bytes left in the journal's page: a longer record needs another
    storage._backend.append_logs([{"op_code": -1, "pad": "x" * pad}])
    before = journal.read_bytes()
    assert len(before) == 4096 - 40
    fill(full_disk)
    with pytest.raises(DiskFull, match="while writing study.journal"):
        storage._backend.append_logs([{"op_code": -1, "pad": "y" * 200}])
    assert journal.read_bytes() == before


def test_a_report_on_a_full_disk_stops_in_one_line_and_the_previous_report_is_kept(tmp_path, full_disk):
    """Before: an OSError traceback, and search_report.json cut to its first 4 KB (written in place, not replaced: the
    page its old text freed took the new report's first bytes)."""
    import optuna

    from cutlab.atomic import DiskFull
    from cutlab.search.report import write_report

    study_dir = full_disk / "study"
    study_dir.mkdir()
    study = optuna.create_study(study_name="s")
    write_report({None: study}, study_dir)
    before = (study_dir / "search_report.json").read_text()
    long = "x" * 5000  # a report of two pages
    choice = optuna.distributions.CategoricalDistribution([long])
    study.add_trial(optuna.trial.create_trial(value=1.0, params={"note": long}, distributions={"note": choice}))
    fill(full_disk)
    with pytest.raises(DiskFull, match="no space left on the device holding .*while writing search_report.json"):
        write_report({None: study}, study_dir)
    assert (study_dir / "search_report.json").read_text() == before and json.loads(before)["search"]["study"] == "s"
    assert sorted(p.name for p in study_dir.iterdir()) == ["search_report.json"]



BEATS_ON_A_FULL_DISK = """
import sys, time
from pathlib import Path
import optuna
from optuna.storages._heartbeat import get_heartbeat_thread
from cutlab.search.storage import HEARTBEAT_ATTR, open_storage
from helpers.mounts import fill
optuna.logging.set_verbosity(optuna.logging.WARNING)
disk = Path(sys.argv[1])
journal = disk / "study.journal"
storage = open_storage(str(journal), {"interval_s": 1, "grace_s": 60})
study = optuna.create_study(study_name="s", storage=storage)
trial = study.ask()
study.set_user_attr("pad", "")  # then as long a pad as ends the journal at a page's end: no beat fits in its page
record = len(journal.read_bytes().rsplit(b"\\n", 2)[-2]) + 1
study.set_user_attr("pad", "x" * ((-journal.stat().st_size - record) % 4096))
assert journal.stat().st_size % 4096 == 0
filler = fill(disk)
beating = get_heartbeat_thread(trial._trial_id, storage)
beating.start()  # Study.optimize's own thread, as a trial of the search has it
time.sleep(1.5)  # two beats on the full disk
filler.unlink()
time.sleep(1.5)  # and one once there is space again
beating.join()
print(HEARTBEAT_ATTR in storage.get_trial(trial._trial_id).system_attrs and
      storage.get_trial(trial._trial_id).system_attrs[HEARTBEAT_ATTR] > time.time() - 2)
"""


def test_a_full_disk_under_the_heartbeat_is_one_line_not_its_threads_traceback(full_disk):
    """Optuna beats from a thread of its own: a full disk under the journal ended that thread with an OSError
    traceback ("Exception in thread"), and the trial beat no more once space was back."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    ended = subprocess.run([sys.executable, "-W", "ignore", "-c", BEATS_ON_A_FULL_DISK, str(full_disk)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
    assert ended.returncode == 0 and "Traceback" not in ended.stderr, ended.stderr[-3000:]
    lines = ended.stderr.splitlines()
    assert len(lines) == 1 and "no space left on the device holding" in lines[0], lines
    assert ended.stdout.strip() == "True"  # it beats again once there is space
