"""The wheel as a user gets it: built once, installed into a fresh virtual environment and used from a folder outside
the repository, with no PYTHONPATH and no data folder. Nothing is downloaded: the new environment reads the
dependencies of the one running the tests (a .pth line) and the wheel is installed with --no-deps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

# what the wheel is built from: pyproject.toml's packages and package-dir folders, nothing else of the checkout
SOURCES = ["pyproject.toml", "README.md", "cutlab", "conf", "sweeps", "searches", "slurm", "analysis"]
INSTALLED = {"cutlab/conf": "conf", "cutlab/sweeps": "sweeps", "cutlab/searches": "searches", "cutlab/slurm": "slurm",
             "cutlab_analysis": "analysis", "cutlab": "cutlab"}
TINY = ["L=2", "train.epochs=1", "train.max_steps_per_epoch=2", "eval.gamma_test=[0,0.5]", "progress=false",
        "wandb.mode=disabled", "threads=1"]


class Installed:
    def __init__(self, origin: Path, venv: Path, work: Path, home: Path) -> None:
        self.origin, self.venv, self.work, self.home = origin, venv, work, home  # origin: the wheel or the source

    def run(self, script: str, *args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
        """A console script (or python) of the new environment, in the user's folder, with a clean environment."""
        env = {key: value for key, value in os.environ.items()
               if key != "PYTHONPATH" and not key.startswith(("CUTLAB_", "VIRTUAL_ENV"))}
        env.update(HOME=str(self.home), XDG_DATA_HOME=str(self.home / ".local" / "share"),
                   XDG_CACHE_HOME=str(self.home / ".cache"), WANDB_MODE="disabled")
        return subprocess.run([str(self.venv / "bin" / script), *args], cwd=cwd or self.work, env=env,
                              capture_output=True, text=True, timeout=timeout)


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of what the wheel is built from: building in place would leave build/ and egg-info in the checkout."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    return source


def new_environment(base: Path, *install: str) -> Installed:
    """A fresh virtual environment that reads this one's dependencies (a plain path in a .pth file: the .pth files
    there, an editable install of this checkout among them, are not run), with cutlab installed by ``install``."""
    venv, work, home = (base / name for name in ("venv", "work", "home"))
    work.mkdir(), home.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    new_site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   check=True, capture_output=True, text=True).stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (new_site / "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    subprocess.run([*PIP, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index",
                    "--no-build-isolation", "--ignore-installed", "--quiet", *install],
                   check=True, capture_output=True, text=True, timeout=600)
    return Installed(Path(install[-1]), venv, work, home)


@pytest.fixture(scope="module")
def installed(source, tmp_path_factory) -> Installed:
    """The wheel, built once and installed with --no-deps into a fresh environment."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet", "-w", str(dist),
                    str(source)], check=True, capture_output=True, text=True, timeout=600)
    return new_environment(tmp_path_factory.mktemp("wheel"), str(next(dist.glob("cutlab-*.whl"))))


@pytest.fixture(scope="module")
def editable(source, tmp_path_factory) -> Installed:
    """`pip install -e` as `make setup` does (setuptools maps the packages to the checkout's folders)."""
    return new_environment(tmp_path_factory.mktemp("editable"), "--editable", str(source))


def test_the_wheel_holds_every_module_and_config(installed):
    """Every module, YAML file and published table of the checkout is in the wheel, under its installed name."""
    names = set(zipfile.ZipFile(installed.origin).namelist())
    missing = []
    for target, folder in INSTALLED.items():
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".yaml", ".csv") and "__pycache__" not in path.parts:
                inside = f"{target}/{path.relative_to(ROOT / folder).as_posix()}"
                if inside not in names:
                    missing.append(inside)
    assert not missing, missing
    assert not [name for name in names if name.split("/")[0] in ("conf", "sweeps", "analysis", "slurm", "searches")], \
        "nothing at the top of site-packages but cutlab's own names"


def test_the_installed_files_are_the_ones_used_and_analysis_is_the_users(installed):
    """From the user's folder, cutlab and its configs come from the new environment, and a folder of the user's own
    called analysis/ is theirs (cutlab installs cutlab_analysis)."""
    (installed.work / "analysis").mkdir(exist_ok=True)
    (installed.work / "analysis" / "__init__.py").write_text("MINE = True\n")
    probe = ("import json, analysis, cutlab, cutlab.conf, cutlab.sweeps, cutlab_analysis;"
             "from cutlab.config.paths import SLURM_PROFILES_DIR, SEARCH_DIR;"
             "print(json.dumps({'mine': analysis.MINE, 'files': [cutlab.__file__, cutlab.conf.__file__,"
             "cutlab.sweeps.__file__, cutlab_analysis.__file__,"
             "str(SLURM_PROFILES_DIR), str(SEARCH_DIR)]}))")
    result = installed.run("python", "-c", probe)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    assert found["mine"] is True
    venv = installed.venv.resolve()
    assert all(Path(path).resolve().is_relative_to(venv) for path in found["files"]), found["files"]
    shutil.rmtree(installed.work / "analysis")


def test_help_lists_cutlabs_flags_and_groups_and_offers_no_search_group(installed):
    result = installed.run("cutlab", "--help")
    assert result.returncode == 0, result.stderr[-3000:]
    for text in ("--plan", "--multirun", "--config-name", "model: ", "data: ", "train: ", "launcher: ", "table3",
                 "cutlab-search search=NAME"):
        assert text in result.stdout, text
    assert "\nsearch: " not in result.stdout, "the app composes no search preset: --help must not offer search="
    sweeps = sorted(path.stem for path in (ROOT / "sweeps").glob("*.yaml"))
    assert [name for name in sweeps if name not in result.stdout] == [], "--help names every sweep file"


@pytest.mark.parametrize("command", ["cutlab-search", "cutlab-reproduce", "cutlab-analysis", "cutlab-eval"])
def test_each_commands_help_names_it_as_installed_in_plain_text(installed, command):
    """The first line of a module's docstring was the description, its reST markup (``cutlab-eval RUN...``) and
    cutlab-search's module name (python -m cutlab.search) printed as they stood."""
    result = installed.run(command, "--help")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"usage: {command} ")
    assert "``" not in result.stdout
    description = result.stdout.split("\n\n")[1]
    assert "python -m" not in description, description


def test_cfg_job_composes_from_the_package(installed):
    result = installed.run("cutlab", "model=dust", "--cfg", "job")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "name: dust" in result.stdout and "runs_dir: ${cutlab_runs_dir:}" in result.stdout


def test_a_tiny_run_then_its_analysis_under_the_users_folder(installed):
    """A run with no data folder (generated video), its record under ./runs, and cutlab-analysis's report on it."""
    result = installed.run("cutlab", *TINY, "run_name=tiny")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((installed.work / "runs" / "tiny" / "summary.json").read_text())
    assert summary["status"] == "complete"
    # no git commit installed: the digest of the code that ran says which code it was, the checkout's digest of it
    provenance = json.loads((installed.work / "runs" / "tiny" / "provenance.json").read_text())
    assert provenance["git_commit"] is None and provenance.get("source_digest"), provenance
    from cutlab.run.provenance import source_digest

    assert provenance["source_digest"] == source_digest(ROOT / "cutlab", ROOT / "conf")
    report = installed.run("cutlab-analysis", "runs", "--out", "report")
    assert report.returncode == 0, report.stderr[-3000:]
    assert (installed.work / "report" / "report.md").is_file() and (installed.work / "report" / "report.html").is_file()


def test_a_sweep_file_plans_from_the_package(installed):
    result = installed.run("cutlab", "--plan", "-m", "--config-name", "smoke")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "12 to run" in result.stdout + result.stderr
    assert not (installed.work / "runs" / "smoke").exists(), "a plan writes nothing"


def test_search_dry_run_finds_its_preset(installed):
    result = installed.run("cutlab-search", "search=dust_video", "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dry run: nothing was run" in result.stderr


def test_reproduce_plans_its_grids_from_the_package(installed):
    result = installed.run("cutlab-reproduce", "--scale", "smoke", "--plan")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "reproduce_smoke_video" in result.stdout


def test_a_data_folder_that_is_not_there_is_one_line_naming_the_fix(installed):
    """Installed, the default data folder is the per-user one, empty on a new machine: one line says how to point
    cutlab at the data, and the run leaves no folder behind."""
    result = installed.run("cutlab", "data=ucsd_ped2", *TINY, "run_name=nodata")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cutlab: error: data.root="), result.stderr
    assert "CUTLAB_DATA_DIR" in lines[0] and str(installed.home) in lines[0]
    assert not (installed.work / "runs" / "nodata").exists()


def test_a_models_folder_that_is_not_there_is_one_line_naming_the_fix(installed):
    """The same for pretrained weights: ViT's default checkpoint lies in the per-user models folder."""
    result = installed.run("cutlab", "model=vit", *TINY, "run_name=noweights")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("cutlab: error: model.pretrained="), result.stderr
    assert "CUTLAB_MODELS_DIR" in lines[0] and "dinov2-small/" in lines[0] and str(installed.home) in lines[0]
    assert not (installed.work / "runs" / "noweights").exists()


def test_the_source_digest_is_the_codes_own_and_changes_with_one_byte(tmp_path):
    """The same files give the same digest wherever they lie; one byte changed in a module or in a config does not."""
    from cutlab.run.provenance import running_source_digest, source_digest

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    package, config = shutil.copytree(ROOT / "cutlab", tmp_path / "cutlab", ignore=ignore), tmp_path / "conf"
    shutil.copytree(ROOT / "conf", config, ignore=ignore)
    before = source_digest(package, config)
    assert before == source_digest(ROOT / "cutlab", ROOT / "conf") == running_source_digest()
    for path in (package / "core" / "constraints.py", config / "data" / "ucsd_ped2.yaml"):
        kept = path.read_bytes()
        path.write_bytes(kept.replace(b"0", b"1", 1))
        assert source_digest(package, config) != before, path
        path.write_bytes(kept)
    assert source_digest(package, config) == before
    (package / "conf").mkdir()  # an installed copy's cutlab/conf/ is counted once, as the config tree
    (package / "conf" / "__init__.py").write_text("")
    assert source_digest(package, config) == before


def test_a_checkout_maps_the_folders_the_wheel_installs():
    """cutlab/checkout.py (a checkout run with PYTHONPATH) maps the same folders as pyproject.toml's package-dir."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from cutlab.checkout import FOLDERS

    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert {name: folder for name, folder in package_dir.items() if name} == FOLDERS


@pytest.mark.slow  # an install used elsewhere: test_a_tiny_run_then_its_analysis_under_the_users_folder by default
def test_an_editable_install_works_from_another_folder(editable, source):
    """`make setup`'s editable install, used from outside the checkout: the sweep files, search presets and the
    analysis resolve to the checkout's folders."""
    plan = editable.run("cutlab", "--plan", "-m", "--config-name", "smoke")
    assert plan.returncode == 0 and "12 to run" in plan.stdout + plan.stderr, plan.stderr[-3000:]
    search = editable.run("cutlab-search", "search=dust_video", "--dry-run")
    assert search.returncode == 0, search.stderr[-3000:]
    probe = editable.run("python", "-c", "import cutlab_analysis, cutlab.conf; print(cutlab_analysis.__file__); print(cutlab.conf.__file__)")
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = [Path(path).resolve() for path in probe.stdout.split()]
    assert found == [(source / "analysis" / "__init__.py").resolve(), (source / "conf" / "__init__.py").resolve()]


def test_the_source_archive_holds_the_pin_its_install_lines_read(source, tmp_path):
    """README's install lines, run in an unpacked source archive, read constraints.txt: the sdist carries it."""
    tree = shutil.copytree(source, tmp_path / "tree")
    for name in ("constraints.txt", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, tree / name)
    build = [sys.executable, "-c", "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])",
             str(tmp_path / "dist")]
    subprocess.run(build, cwd=tree, check=True, capture_output=True, text=True, timeout=300)
    with tarfile.open(next((tmp_path / "dist").glob("cutlab-*.tar.gz"))) as archive:
        pins = [member for member in archive.getmembers() if member.name.endswith("/constraints.txt")]
        assert [member.name.count("/") for member in pins] == [1], "constraints.txt at the archive's top"
        assert archive.extractfile(pins[0]).read() == (ROOT / "constraints.txt").read_bytes()
