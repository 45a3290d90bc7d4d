"""Issue 13, secrets: a database password on the command line or in $CUTLAB_STORAGE reaches no record, log,
W&B file or error message (the other hostile inputs: test_untrusted_folders.py). Each test failed on the code before
the fix, in the way its docstring says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.mark.parametrize("text, secret", [
    ("postgresql://dbuser:S3cretPW@127.0.0.1:5432/postgres", "S3cretPW"),
    ("postgresql://dbuser:p@ss-secret@db.example.org:5432/optuna", "ss-secret"),  # '@' inside the password
    ("postgresql://dbuser@db/optuna?sslmode=require&password=hunter2", "hunter2"),
    ("mysql+pymysql://root:toor@localhost/optuna", "toor"),
    ("foo://me:topsecret@host/x", "topsecret"),  # a scheme nobody knows
    ("--storage=redis://:onlypass@cache:6379/0", "onlypass"),
    ("host=db dbname=optuna user=me password=pgpass123", "pgpass123"),
    # a setup line's exports (launcher.setup) passed untouched, and '#' ended the redacted part of a password
    ("export PGPASSWORD=hunter2", "hunter2"),
    ("WANDB_API_KEY=abcd1234", "abcd1234"),
    ("DB_PASSWORD=x9y8z7", "x9y8z7"),
    ("HF_TOKEN=hf_abcdef", "hf_abcdef"),
    ("host=db password=ab#cdef", "cdef"),
])
def test_every_url_form_is_redacted(text, secret):
    """Before: ``user:p@ss-secret@host`` and ``?password=`` passed the terminal's redaction untouched."""
    from cutlab.redaction import redact, redact_argv

    assert secret not in redact(text) and "***" in redact(text)
    assert all(secret not in argument for argument in redact_argv(["python", "-m", "cutlab.search", text]))
    assert redact("postgresql://dbuser@127.0.0.1:5432/postgres") == "postgresql://dbuser@127.0.0.1:5432/postgres"
    for plain in ("model.tokenizer=roberta-base", "data.max_tokens=512", "train.dual_lr=0.1"):  # no credential
        assert redact(plain) == plain


@pytest.mark.parametrize("text, shown", [
    # the query value stopped at ',' ';' or a quote: '?password=***,SESAME42'
    ("postgresql://lab@127.0.0.1:55431/labdb?password=open,SESAME42",
     "postgresql://lab@127.0.0.1:55431/labdb?password=***"),
    ("postgresql://lab@h/db?password=a;b'c&sslmode=require", "postgresql://lab@h/db?password=***&sslmode=require"),
    ("db=postgresql://lab@h/db?password=a,b", "db=postgresql://lab@h/db?password=***"),
    # a quoted address keeps its closing quote and what follows
    ("storage 'postgresql://lab@h/db?password=a,b' is unreachable", "storage 'postgresql://lab@h/db?password=***' is "
     "unreachable"),
    ("['postgresql://lab@h/db?password=x,y', 'L=2']", "['postgresql://lab@h/db?password=***', 'L=2']"),
    # a raw space in user:password@: each word was redacted alone, and neither held both ':' and '@'
    ("postgresql://lab:open SESAME42@127.0.0.1:55431/labdb", "postgresql://lab:***@127.0.0.1:55431/labdb"),
    ("cannot reach postgresql://lab:p@ss w rd@db.example.org/optuna: timeout",
     "cannot reach postgresql://lab:***@db.example.org/optuna: timeout"),
    # no password: a host's port, then an address of another kind
    ("postgresql://127.0.0.1:5432/db is down; mail admin@example.org", "postgresql://127.0.0.1:5432/db is down; mail "
     "admin@example.org"),
    # the advice after an address names another one: the first's password hidden alone, the advice kept
    ("cannot open postgresql://cutlab:secret@127.0.0.1:5/optuna: refused; give postgresql://USER:PASSWORD@HOST:PORT/DB",
     "cannot open postgresql://cutlab:***@127.0.0.1:5/optuna: refused; give postgresql://USER:***@HOST:PORT/DB"),
    # a password holding a space and a '/', which the rule above stopped at
    ("postgresql://lab:pa ss/word@db.host:5432/optuna", "postgresql://lab:***@db.host:5432/optuna"),
    # a host's port or a space after 'host:', then an address later on the line: nothing hidden (it was up to the '@')
    *[(line, line) for line in ("dashboard http://localhost:8080 owner x@y",
                                "connect http://proxy.local:3128 failed; retry as alice@proxy.local",
                                "Fetched https://hf.co: 200 OK; contact me: alice@uni.edu",
                                "launcher: ssh://gw:22 then run as me@node01")],
])
def test_a_password_is_hidden_whole_whatever_it_holds(text, shown):
    from cutlab.redaction import redact

    assert redact(text) == shown


@pytest.mark.parametrize("dsn", [
    "host=db user=lab password='open SESAME' dbname=x",
    r"host=db user=lab password='it\'s SESAME \\ too' dbname=x",  # libpq's escapes: \' and \\
    "host=db user=lab password = 'open SESAME' dbname=x",  # libpq allows spaces around '='
])
def test_a_quoted_libpq_password_is_hidden_whole(dsn):
    """A libpq keyword/value string's quoted password holding a space showed its second word: 'password=*** SESAME''."""
    from cutlab.redaction import redact, redact_argv, redact_values

    shown = "host=db user=lab password=*** dbname=x"
    assert redact(f"cannot open {dsn}: refused") == f"cannot open {shown}: refused"
    assert redact_argv(["-m", "cutlab.search", f"--storage={dsn}"])[2] == f"--storage={shown}"
    assert redact_values({"storage": dsn}) == {"storage": shown}
    assert "SESAME" not in redact("host=db password='open SESAME")  # unterminated: hidden to the line's end


def test_an_unknown_storage_scheme_does_not_print_the_address():
    """Before: ``unknown search storage 'foo://me:topsecret@host'`` printed the raw URL."""
    from cutlab.errors import CutlabError
    from cutlab.search.storage import open_storage

    with pytest.raises(CutlabError) as error:
        open_storage("foo://me:topsecret@host/x", {"interval_s": 1, "grace_s": 3})
    assert "topsecret" not in str(error.value) and "foo:" in str(error.value)


def test_a_driver_error_never_quotes_a_piece_of_the_password():
    """Before: with ``p@ss-secret`` the driver took ``ss-secret@127.0.0.1`` for the host and the error said so."""
    from cutlab.redaction import scrub, with_encoded_password

    url = "postgresql://dbuser:p@ss-secret@127.0.0.1:5432/postgres"
    assert with_encoded_password(url) == "postgresql://dbuser:p%40ss-secret@127.0.0.1:5432/postgres"
    message = scrub('could not translate host name "ss-secret@127.0.0.1" to address', url)
    assert "ss-secret" not in message and "127.0.0.1" in message


def all_text_under(folder: Path) -> str:
    return "\n".join(path.read_bytes().decode("latin-1") for path in folder.rglob("*") if path.is_file())


def test_the_database_password_reaches_no_record_log_or_wandb_file(tmp_path):
    """Before: ``--storage postgresql://dbuser:S3cretPW@...`` on a real server put the password in every trial's
    provenance.json (``"command": sys.argv``) and in its offline W&B run. Now: a search with the password on the
    command line (trials in this process), then the same study resumed with it in $CUTLAB_STORAGE and two worker
    processes; the server checks the password (scram-sha-256), and no file or output holds it."""
    from helpers.postgres_server import postgres_server
    from helpers.search import FAST_HEARTBEAT, run_search

    password = "S3cret@PW-x"  # an '@' in it too: the driver gets it percent-encoded, every record gets ***
    tiny = [*FAST_HEARTBEAT, "search=dust_video", "search.pruner=null", "L=2", "train.epochs=1",
            "train.max_steps_per_epoch=2", "data.stride=10", "eval.gamma_test=[0,0.5]", "progress=false",
            "wandb.mode=offline"]
    with postgres_server(user="dbuser", password=password) as url:
        assert password in url
        first = run_search([*tiny, "--storage", url, "--n-trials", "1"], tmp_path)
        env_run = subprocess.run([sys.executable, "-m", "cutlab.search", *tiny, "--n-trials", "3", "--workers", "2"],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600,
                                 env={**os.environ, "CUTLAB_RUNS_DIR": str(tmp_path / "runs"),
                                      "CUTLAB_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
                                      "OMP_NUM_THREADS": "1", "WANDB_DIR": str(tmp_path), "CUTLAB_STORAGE": url})
        assert env_run.returncode == 0, env_run.stderr[-3000:]
    trials = sorted((tmp_path / "runs" / "search").glob("*/trial-*"))
    assert len(trials) == 3 and all(json.loads((t / "summary.json").read_text())["status"] == "complete"
                                    for t in trials)
    assert list((tmp_path / "runs").rglob("offline-run-*")), "the trials' W&B runs are offline files here"
    command = json.loads((trials[0] / "provenance.json").read_text())["command"]
    assert "dbuser:***@127.0.0.1" in " ".join(command)
    for text in (all_text_under(tmp_path), first.stdout + first.stderr, env_run.stdout + env_run.stderr):
        assert password not in text and "S3cret" not in text and "PW-x" not in text


def test_a_password_given_as_search_storage_reaches_no_worker_command_line(tmp_path, monkeypatch):
    """Before: ``search.storage=postgresql://dbuser:S3cretPW@...`` (the preset key, where --storage is its flag) went
    on every worker's command line as it was typed, for any user of the machine to read in ``ps``, and under
    launcher=slurm into the job's pickle in the study folder; --storage and $CUTLAB_STORAGE went through the
    workers' environment."""
    from cutlab.search.__main__ import STORAGE_ENV, build_plan, parse_args, storage_env, worker_command

    monkeypatch.setenv("CUTLAB_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    url = "postgresql://dbuser:S3cretPW@127.0.0.1:5432/optuna"
    args = parse_args(["search=dust_video", f"search.storage={url}", "--workers", "2", "L=2"])
    plan = build_plan(args)
    assert plan.storage_url == url
    for index in (0, 1):
        command = worker_command(args, index)
        assert not any("S3cretPW" in part or "search.storage" in part for part in command), command
        assert "L=2" in command
    assert storage_env(plan) == {STORAGE_ENV: url}  # what the workers and an sbatch job are given instead


@pytest.mark.slow  # the storage's password: test_the_database_password_reaches_no_record_... runs by default
def test_workers_given_search_storage_use_that_storage(tmp_path):
    """The address that no longer rides on the workers' command lines still reaches them: two local workers of a
    search whose ``search.storage=`` names a journal of its own write their trials there."""
    from helpers.search import FAST_HEARTBEAT, TINY, run_search

    journal = tmp_path / "elsewhere" / "study.journal"
    journal.parent.mkdir()
    run_search(["search=dust_video", *FAST_HEARTBEAT, "search.pruner=null", *TINY, "train.epochs=1",
                f"search.storage={journal}", "--n-trials", "2", "--workers", "2"], tmp_path)
    assert journal.exists() and not (tmp_path / "runs" / "search" / "dust_video" / "optuna.journal").exists()
    trials = sorted((tmp_path / "runs" / "search" / "dust_video").glob("trial-*"))
    assert len(trials) == 2 and all(json.loads((t / "summary.json").read_text())["status"] == "complete"
                                    for t in trials)
    for trial in trials:
        assert not any("search.storage" in part for part in json.loads((trial / "provenance.json").read_text())[
            "command"])


def test_libpqs_spaced_form_hides_a_password_only_and_never_past_its_line():
    """The spaced '=' rule took any *token/*key key and crossed line ends: prose lost words, the next line its first."""
    from cutlab.redaction import redact

    for prose in ("the model's pad_token = eos_token when none is set", "max_tokens = 5", "api_key =",
                  "Error: token = none given"):
        assert redact(prose) == prose
    assert redact("api_key = \nnext line text") == "api_key = \nnext line text"
    assert redact("password = \nnext line") == "password = \nnext line"
    assert redact("host=db password = hunter2 dbname=x") == "host=db password=*** dbname=x"
    assert redact("token='a b' x") == "token=*** x"
