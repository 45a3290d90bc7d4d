"""``python -m cutlab``: train and evaluate one configuration (or a multirun with -m) as a Hydra app."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from cutlab.errors import CutlabError
from cutlab.run_naming import run_name

CONFIG_DIR = str(Path(__file__).resolve().parent.parent / "conf")

if not OmegaConf.has_resolver("cutlab_run_name"):
    OmegaConf.register_new_resolver("cutlab_run_name", run_name)


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def app(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from cutlab.experiment import run_experiment

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        summary = run_experiment(cfg, run_dir)
    except CutlabError as error:
        _remove_if_empty(run_dir)
        print(f"cutlab: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    return summary.get("selection_metric") if summary else None


def _remove_if_empty(run_dir: Path) -> None:
    """Hydra makes the run folder before the run starts; a run refused at the door leaves nothing behind."""
    try:
        run_dir.rmdir()
    except OSError:
        pass


GROUPS = ("model", "data", "train")


def check_group_choices(arguments: list[str]) -> None:
    """Unknown ``model=``/``data=``/``train=`` names get one line naming the valid ones (before Hydra starts)."""
    for argument in arguments:
        group, _, value = argument.lstrip("+~").partition("=")
        if group not in GROUPS or not value or "(" in value:
            continue
        known = sorted(path.stem for path in (Path(CONFIG_DIR) / group).glob("*.yaml"))
        for choice in value.split(","):
            if choice not in known:
                raise CutlabError(f"unknown {group} {choice!r}; choose one of {group}={','.join(known)}")


def main() -> None:
    try:
        check_group_choices(sys.argv[1:])
    except CutlabError as error:
        print(f"cutlab: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    app()


if __name__ == "__main__":
    main()
