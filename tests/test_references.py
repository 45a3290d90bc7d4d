"""Every module, function and file that cutlab's and analysis's comments, docstrings and messages name exists.

A dotted ``cutlab.x.y`` (or ``analysis.x``) must be a module of the checkout, or a name defined or imported at the
top of one (or a member of a class defined there); a ``dir/file.py`` path (under cutlab/, analysis/, tests/, conf/,
sweeps/, searches/, slurm/ or benchmarks/) must exist in the checkout. The text is read with ``tokenize`` (comments
and string literals, docstrings included), so code such as ``cutlab.__file__`` is not taken for a reference, and
nothing is imported: the check takes well under a second.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import tomllib

from conftest import ROOT

SCANNED = ("cutlab", "analysis")
DOTTED = re.compile(r"(?<![\w./-])((?:cutlab|analysis)(?:\.\w+)+)")
PATH = re.compile(r"(?<![\w./-])((?:cutlab|analysis|tests|conf|sweeps|searches|slurm|benchmarks)/[\w./{}*<>-]*)")
# words that stand for any name in a pattern (sweeps/NAME.yaml, analysis.figures.X), not a name themselves
PLACEHOLDERS = {"NAME", "X"}
# the installed package's resource folders, which sit beside cutlab/ in a checkout (pyproject.toml's package-dir)
PACKAGE_DIRS = {name: folder for name, folder in
                tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].items()
                if name}


def references(path: Path) -> list[tuple[int, str]]:
    """``(line, reference)`` for each dotted name or path in ``path``'s comments and string literals."""
    source = path.read_text(encoding="utf-8")
    if not (DOTTED.search(source) or PATH.search(source)):
        return []
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            continue
        for pattern in (DOTTED, PATH):
            for match in pattern.finditer(token.string):
                reference = match.group(1).rstrip(".")
                line = token.start[0] + token.string.count("\n", 0, match.start())
                found.append((line, reference))
    return found


def is_pattern(reference: str) -> bool:
    """A reference written as a pattern: an f-string's field, a glob, <name>, or a placeholder word."""
    if set(reference) & set("{}*<>"):
        return True
    return any(part.split(".")[0] in PLACEHOLDERS for part in re.split(r"[/.]", reference))


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    return next((file for file in (base.with_suffix(".py"), base / "__init__.py") if file.is_file()), None)


@cache
def top_level_names(module: Path) -> dict[str, ast.AST | None]:
    """The names ``module`` defines or imports at its top level (under if/try too); classes map to their node."""
    names: dict[str, ast.AST | None] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[node.name] = node if isinstance(node, ast.ClassDef) else None
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update((name.id, None) for target in targets for name in ast.walk(target)
                             if isinstance(name, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update(((alias.asname or alias.name).split(".")[0], None) for alias in node.names)
            for field in ("body", "orelse", "finalbody", "handlers"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    visit(getattr(node, field, []))

    visit(ast.parse(module.read_text(encoding="utf-8")).body)
    return names


def dotted_resolves(reference: str) -> bool:
    parts = reference.split(".")
    if ".".join(parts[:2]) in PACKAGE_DIRS:  # cutlab.conf, cutlab.sweeps, ...: a folder of YAML files
        return len(parts) == 2 and (ROOT / PACKAGE_DIRS[".".join(parts[:2])]).is_dir()
    if parts[-1].startswith("__") and parts[-1].endswith("__"):
        parts = parts[:-1]  # a module's own attribute (__version__, __main__ is a module and is found as one)
    for split in range(len(parts), 0, -1):
        module = module_file(parts[:split])
        if module is None:
            continue
        rest = parts[split:]
        if not rest:
            return True
        names = top_level_names(module)
        if rest[0] not in names:
            return False
        node = names[rest[0]]
        if len(rest) == 1:
            return True
        return len(rest) == 2 and isinstance(node, ast.ClassDef) and any(
            getattr(member, "name", None) == rest[1] or getattr(member, "id", None) == rest[1]
            or getattr(member, "attr", None) == rest[1] for member in ast.walk(node))
    return False


def path_resolves(reference: str) -> bool:
    for name, folder in PACKAGE_DIRS.items():  # cutlab/conf/... as installed is conf/... here
        installed = name.replace(".", "/")
        if reference == installed or reference.startswith(installed + "/"):
            reference = folder + reference[len(installed):]
    return (ROOT / reference).exists()


def stale_references() -> list[str]:
    stale = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for line, reference in references(path):
                if is_pattern(reference):
                    continue
                resolves = path_resolves if "/" in reference else dotted_resolves
                if not resolves(reference):
                    stale.append(f"{where}:{line}: {reference}")
    return stale


def test_every_module_function_and_file_named_in_the_text_exists():
    stale = stale_references()
    assert not stale, "references to modules, names or files that do not exist:\n" + "\n".join(stale)


def test_the_check_finds_a_stale_reference(tmp_path):
    """The resolver itself: a moved module, a missing function and a missing file are each caught."""
    assert dotted_resolves("cutlab.run.records.evaluation_rows")
    assert dotted_resolves("cutlab.run.build.Evaluator")
    assert dotted_resolves("cutlab.conf")
    assert path_resolves("cutlab/core/models/text_encoder.py") and path_resolves("cutlab/conf/config.yaml")
    assert not dotted_resolves("cutlab.records.evaluation_rows")
    assert not dotted_resolves("cutlab.run.build.check_reference")
    assert not path_resolves("cutlab/text_task.py")
    assert is_pattern("sweeps/NAME.yaml") and is_pattern("sweeps/feasibility_{") and is_pattern("conf/train/*.yaml")
