"""Puts cutlab's sweep files on Hydra's config search path, beside its config tree, for cutlab's app only.

``cutlab --config-name table3`` names a sweep file (cutlab.sweeps, the repository's sweeps/). Hydra looks the
primary config up before it reads any ``hydra.searchpath`` key, so a key in conf/config.yaml cannot add a folder
that a primary config comes from; a search-path plugin can (Hydra discovers it in the ``hydra_plugins`` namespace).
It leaves every other Hydra application's search path as it was.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

CONFIG = "pkg://cutlab.conf"
SWEEPS = "pkg://cutlab.sweeps"


class CutlabSweepsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        paths = [element.path for element in search_path.get_path()]
        if CONFIG in paths and SWEEPS not in paths:
            search_path.append(provider="cutlab-sweeps", path=SWEEPS)
