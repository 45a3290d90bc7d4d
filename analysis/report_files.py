"""What a report writes in its folder, and where: ``Report`` (the paths written) and the files of earlier reports.

Layout of the report folder::

    REPORT_DIR/report.md                      the report (relative links to everything below)
    REPORT_DIR/report.html                    the same report as one file, every figure embedded
    REPORT_DIR/tables/<table>.{md,csv,tex}    Tables 3 and 4
    REPORT_DIR/figures/<figure>.{png,pdf}     the figures
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .figures import STEMS, FigureResult
from .tables import TABLES, Table

REPORT = "report.md"
TABLES_DIR = "tables"
FIGURES_DIR = "figures"


@dataclass
class Report:
    """What ``write_report`` wrote."""

    path: Path
    tables: list[Table] = field(default_factory=list)
    table_files: list[Path] = field(default_factory=list)
    figures: list[FigureResult] = field(default_factory=list)
    html: Path | None = None  # report.html beside report.md
    evaluation_files: list[Path] = field(default_factory=list)  # the cutlab-eval section's table and figures

    def moved(self, staging: Path, out_dir: Path) -> "Report":
        """This report's paths once its files are moved from ``staging`` to ``out_dir``."""
        def place(path: Path) -> Path:
            return out_dir / path.relative_to(staging)

        for figure in self.figures:
            figure.paths = [place(path) for path in figure.paths]
        return Report(place(self.path), self.tables, [place(p) for p in self.table_files], self.figures,
                      place(self.html) if self.html else None, [place(p) for p in self.evaluation_files])


def own_files(out_dir: Path) -> set[Path]:
    """The report's earlier outputs in tables/ and figures/, cutlab-eval's section's (transfer.STEM) among them."""
    from .transfer import STEM

    tables = {spec.stem for spec in TABLES} | {STEM}
    return {*(path for path in (out_dir / TABLES_DIR).glob("*") if path.stem in tables),
            *(path for path in (out_dir / FIGURES_DIR).glob("*") if path.name.startswith(f"{STEM}_")
              or path.suffix in (".png", ".pdf") and path.stem in STEMS)}
