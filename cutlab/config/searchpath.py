"""Puts cutlab's sweep files on Hydra's config search path, beside its config tree.

``cutlab --config-name table3`` names a sweep file (the package cutlab.sweeps, the repository's sweeps/). Hydra looks
the primary config up before it reads any ``hydra.searchpath`` key, so a key in conf/config.yaml cannot add the
folder a primary config comes from; a search-path plugin can. It is registered with Hydra's public
``Plugins.instance().register`` by the app and the composer (not through the ``hydra_plugins`` namespace, which an
editable install does not let Hydra scan), so it acts in cutlab's own process only.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from cutlab.config.paths import CONFIG_MODULE, SWEEPS_MODULE

CONFIG = f"pkg://{CONFIG_MODULE}"  # the primary config's entry, as cli.py and compose.py give it to Hydra
SWEEPS = f"pkg://{SWEEPS_MODULE}"


class CutlabSweepsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        paths = [element.path for element in search_path.get_path()]
        if CONFIG in paths and SWEEPS not in paths:
            search_path.append(provider="cutlab-sweeps", path=SWEEPS)


def register_sweeps() -> None:
    """Before Hydra builds a search path (registering twice is a no-op)."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(CutlabSweepsSearchPath)
