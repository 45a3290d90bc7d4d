"""A source checkout's own folders as cutlab's resource packages, whatever an installed copy maps them to.

pyproject.toml installs the repository's top-level conf/, sweeps/, searches/, slurm/ and analysis/ as the packages
below (a wheel copies them; an editable install maps them). Run from a checkout with ``PYTHONPATH=<checkout>``
(another checkout installed editable, or none installed), those names would resolve to the other checkout or to
nothing; this finder, active only when cutlab is imported from a checkout (cutlab/ beside pyproject.toml and
conf/), makes them this checkout's folders. An installed wheel never has one: it reads its own copies.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.abc import MetaPathFinder
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"cutlab.conf": "conf", "cutlab.sweeps": "sweeps", "cutlab.searches": "searches", "cutlab.slurm": "slurm",
           "cutlab_analysis": "analysis"}  # = [tool.setuptools] package-dir (tests/test_wheel.py checks)


class CheckoutFinder(MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        folder = FOLDERS.get(fullname)
        if folder is None:
            return None
        init = ROOT / folder / "__init__.py"
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


def is_checkout() -> bool:
    """cutlab runs from a source checkout (not from a wheel's copy in site-packages)."""
    return (ROOT / "pyproject.toml").is_file() and (ROOT / "conf" / "__init__.py").is_file()


def install() -> None:
    if not is_checkout():
        return  # installed from a wheel: the packages are real folders beside cutlab/
    if not any(isinstance(finder, CheckoutFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, CheckoutFinder())
