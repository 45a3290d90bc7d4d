"""``cutlab-reproduce --out``: a folder it cannot write, or a report of one's own there, is refused in one line before
any grid runs (it once ran every grid, hours at the cpu scale, then failed); the writes at the end stop in one line."""

from __future__ import annotations

import contextlib

import pytest

from helpers.mounts import read_only

# every grid refuses it at once: were --out checked only once a grid ran, the test would end in seconds, not minutes
REFUSED_BY_EVERY_GRID = "train.epochs=abc"


def reproduce(capsys, out, *overrides: str) -> tuple[int, str]:
    from cutlab.reproduce import main

    status = main(["--scale", "smoke", "--out", str(out), "wandb.mode=disabled", REFUSED_BY_EVERY_GRID, *overrides])
    return status, capsys.readouterr().err


@pytest.mark.parametrize("case", ["out-a-file", "out-under-a-file", "report-read-only", "out-read-only-runs-linked"])
def test_an_out_folder_that_cannot_be_written_is_one_line_before_any_grid_runs(tmp_path, capsys, case):
    """A file for --out started the first grid, which refused paths.runs_dir in three lines; a read-only report/ or
    --out (its runs/ a link to a writable folder, as the README allows) ran every grid, then a PermissionError."""
    out, elsewhere = tmp_path / "out", tmp_path / "runs_elsewhere"
    elsewhere.mkdir()
    if case == "out-a-file":
        out.write_text("a file\n")
        folder, reason = out, f"{out} is a file"
    elif case == "out-under-a-file":
        (tmp_path / "a_file").write_text("a file\n")
        out = tmp_path / "a_file" / "out"
        folder, reason = out, f"{tmp_path / 'a_file'} is a file"
    elif case == "report-read-only":
        (out / "report").mkdir(parents=True)
        folder, reason = out / "report", "read-only file system"
    else:
        out.mkdir()
        (out / "runs").symlink_to(elsewhere, target_is_directory=True)
        folder, reason = out, "read-only file system"
    with read_only(folder) if "read-only" in case else contextlib.nullcontext():
        status, error = reproduce(capsys, out)
    assert status == 2 and error.count("\n") == 1, error
    assert error.startswith(f"cutlab-reproduce: error: cannot write to {folder} ({reason}); "), error
    assert error.endswith(": pass a writable --out\n"), error
    assert not list(elsewhere.iterdir()) and (case == "out-read-only-runs-linked" or not (out / "runs").exists())


def test_a_report_md_of_ones_own_is_refused_before_any_grid_runs(tmp_path, capsys):
    """The grids all ran, then cutlab-analysis refused the file naming its own --out, and the last line said "report
    at OUT/report/report.md": the user's own file."""
    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    (out / "report" / "report.md").write_text("# My own notes\n")
    status, error = reproduce(capsys, out)
    assert status == 2 and error.count("\n") == 1, error
    assert error == (f"cutlab-reproduce: error: {out / 'report' / 'report.md'} was not written by cutlab-analysis, "
                     "and the report would replace it; cutlab-reproduce writes its report in --out's report/: move "
                     "that file, or pass another --out\n")
    assert (out / "report" / "report.md").read_text() == "# My own notes\n" and not (out / "runs").exists()


def test_an_out_made_read_only_while_the_grids_ran_ends_in_one_line(tmp_path, capsys):
    # skipped.md, and the earlier report's removal, failed in a PermissionError (OSError) traceback
    from cutlab.reproduce import run

    out = tmp_path / "out"
    (out / "report").mkdir(parents=True)
    with read_only(out):
        status = run("smoke", [], out)
    error = capsys.readouterr().err.splitlines()
    assert status == 2 and error[-1] == (f"cutlab-reproduce: error: cannot write in {out} (read-only file system); "
                                         "make --out writable and run the same command again: finished runs are "
                                         "kept and skipped"), error
    assert not (out / "skipped.md").exists()
