"""The evaluation record: one folder per (run, data, gamma_test grid, split, sigma), inside the run's folder.

    <run>/evaluations/<data>-<key>/evaluation.json   the request, the headline numbers, the verdict on the new data,
                                                     provenance; written last: the evaluation is done exactly when
                                                     it says ``"status": "complete"``
    <run>/evaluations/<data>-<key>/metrics.csv       long format as the run's eval.csv: split, gamma_test, layer,
                                                     metric, value (split: the evaluated split of the new data)
    <run>/evaluations/<data>-<key>/sample_losses.csv per-sample, per-layer losses at every gamma_test

The run's own files are never written. The names differ from the run record's (summary.json, config.yaml, eval.csv,
history.csv), so that nothing reading run folders takes an evaluation for a run.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from cutlab.config.data_settings import apart_from_default, named_with
from cutlab.errors import CutlabError
from cutlab.run.records import (evaluation_rows, linked, read_mapping, write_evaluation, write_json,
                                 write_sample_losses)

EVALUATIONS = "evaluations"
RECORD = "evaluation.json"
METRICS = "metrics.csv"
RECORD_VERSION = 1


def check_not_linked(run_dir: Path, folder: Path) -> None:
    """The evaluation is read and written in the run's own folder: an ``evaluations`` (or evaluation) folder that
    links elsewhere had it written there (over another run's evaluation of the same data, say) and had that one
    reported as this run's, "already done"."""
    for path in (run_dir / EVALUATIONS, folder):
        if linked(path):
            raise CutlabError(f"{linked(path)}: an evaluation is kept only inside its run's folder; remove the link "
                              "and run the same command again")


def request_key(request: dict) -> str:
    return hashlib.sha1(json.dumps(request, sort_keys=True, default=str).encode()).hexdigest()[:10]


def data_name(data: dict) -> str:
    """The evaluated data's name: ``ucsd_ped2``, ``video_folder:my_clips`` (the folder's name)."""
    name = str(data.get("name"))
    return name + (f":{Path(str(data['root'])).name}" if name == "video_folder" and data.get("root") else "")


def data_label(request: dict, reference: dict | None = None, apart: list[str] | None = None) -> str:
    """The evaluated data as shown (the command's lines, the report): its name with the settings that tell it apart
    from ``reference`` (the data set's default config: ``ucsd_ped2 (root=/elsewhere/ped2.npz)``), or with ``apart``
    where those are already known, then the split unless test and ``sigma=run`` unless sigma_x is the evaluated
    data's own (``--sigma data``, the default). Only shown: the folder keeps its name (folder_label)."""
    data = request["data"]
    name = data_name(data)
    said = f"root={name.partition(':')[2]}" if name != str(data.get("name")) else None  # video_folder:<root's name>
    if apart is None:  # against the defaults, where a null is a setting too: video_folder's null root is not shown
        apart = apart_from_default(data, reference) if reference else []
        apart = [part for part in apart if not (said and part.startswith("root="))]
    parts = [part for part in apart if part != said]
    split = [] if request["split"] == "test" else [request["split"]]
    sigma = [] if request.get("sigma", "data") == "data" else [f"sigma={request['sigma']}"]
    return named_with(name, parts + split + sigma)


def folder_label(request: dict) -> str:
    """The name in the evaluation's folder, as it has always been (``ucsd_ped2``, ``video_folder:clips (all)``):
    a new display label must not rename it, or evaluations already done would not be found and would run again."""
    return data_name(request["data"]) + ("" if request["split"] == "test" else f" ({request['split']})")


def evaluation_dir(run_dir: Path, request: dict) -> Path:
    name = re.sub(r"[^\w.=+-]+", "_", folder_label(request)).strip("_")
    return run_dir / EVALUATIONS / f"{name}-{request_key(request)}"


def read_record(folder: Path) -> dict | None:
    return read_mapping(folder / RECORD, json.loads, (json.JSONDecodeError,), "evaluation record")


def done(folder: Path, request: dict, files: dict | None) -> dict | None:
    """The complete record of ``request`` in ``folder``, or None when it still has to be computed. ``files``:
    ``data_files`` of the data as it is now, which must be what the record evaluated (the key names the data's path,
    not its contents)."""
    record = read_record(folder)
    if record is None or record.get("status") != "complete":
        return None
    if record.get("request") != json.loads(json.dumps(request, default=str)):
        raise CutlabError(f"{folder / RECORD} holds another evaluation than this one (same key, other request); "
                          "move that folder aside")
    then = record.get("data_files")
    if then is not None and files is not None and then != files:
        raise CutlabError(f"{folder / RECORD} evaluated {request['data'].get('root')} as it was then ({then['files']} "
                          f"files); its files changed since ({files['files']} now, or other sizes or times): move that "
                          "folder aside to evaluate the data as it is now")
    return record


def write_record(folder: Path, record: dict, evaluation, split: str) -> None:
    """metrics.csv and sample_losses.csv first, evaluation.json last (the record is complete when it exists)."""
    write_evaluation(folder, evaluation_rows(split, evaluation), METRICS)
    write_sample_losses(folder, evaluation)
    write_json(folder / RECORD, {"record_version": RECORD_VERSION, "status": "complete", **record})
