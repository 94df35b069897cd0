"""Move fuseplanner's flat modules into one package per pipeline stage and rewrite every reference.

    python tools/relayout.py             # from the repository root, on a clean git tree
    python tools/relayout.py --dry-run   # print what would change, write nothing

The stages follow the data: ONNX -> graph -> candidates -> costs -> plan -> kernels -> run ->
measurement. `MOVES` is the whole mapping (old module -> new module, relative to ``fuseplanner``);
every other file stays where it is, so a tree with more files than the mapping names is fine.

Steps, in order:

1. refuse unless every mapped source exists and no target does (so the script never runs twice, and
   never on a half-moved tree), and unless tracked files are unmodified (``--allow-dirty`` skips that);
2. every relative import in ``fuseplanner/`` becomes absolute, resolved against the file's current
   package (``from .. import tiles`` in kernels/ -> ``from fuseplanner import tiles``); so do
   ``importlib.import_module(".x", __name__)`` calls and the lazy-attribute table ``_LAZY`` of a
   package ``__init__``;
3. ``from fuseplanner[.pkg] import name`` where ``pkg.name`` is a moved module is split into one
   import per moved module, keeping the local name (``from fuseplanner import specs`` ->
   ``from fuseplanner.hw import spec as specs``);
4. every dotted reference ``fuseplanner.<old>`` (imports, ``python -m``, mock/monkeypatch strings, docs)
   and every path ``fuseplanner/<old>.py`` becomes the new one, in the files `TEXT_FILES` selects;
5. ``git mv`` each module, create each new package's ``__init__.py`` (a one-line docstring), then
   ``ruff check --select I --fix`` on the changed Python files (import order only).

Anything it cannot rewrite mechanically stops it before a file is written, with the place named.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PKG = "fuseplanner"

#: Old module -> new module, both relative to the package. Files move whole.
MOVES: dict[str, str] = {
    # core: records and errors every stage shares
    "ir": "core.ir",
    "errors": "core.errors",
    # frontend: ONNX file -> ModelGraph
    "onnx_import": "frontend.load",
    "onnx_shapes": "frontend.shapes",
    "onnx_view": "frontend.view",
    "onnx_ops": "frontend.ops",
    "epilogues": "frontend.epilogues",
    "zoo": "frontend.zoo",
    "fold": "frontend.fold",
    "rebatch": "frontend.rebatch",
    "shape_errors": "frontend.shape_errors",
    # hw: GPU descriptions
    "specs": "hw.spec",
    "kernel_fit": "hw.kernel_fit",
    # kernels: what each kernel accepts (tiles, registers) beside its launchers
    "tiles": "kernels.tiles",
    "registers": "kernels.registers",
    # cost: per-image geometry (not to be confused with frontend.shapes)
    "cost.shapes": "cost.geometry",
    # planning: candidates -> tile search and exact choice -> the Plan value -> outputs
    "graph": "planning.candidates",
    "planner": "planning.search",
    "plans": "planning.result",
    "export": "planning.export",
    "fused_function": "planning.fused_function",
    # validation: run on the GPU, time, count, compare, fit
    "validate": "validation.validate",
    "measure": "validation.timing",
    "ncu": "validation.ncu",
    "reference": "validation.reference",
    "calibrate": "validation.microbench",
    "fit": "validation.fit",
    "report": "validation.report",
}

#: New stage packages and the docstring of their __init__.py (an existing __init__.py is kept).
PACKAGES: dict[str, str] = {
    "core": "Records, kinds and errors shared by every stage.",
    "frontend": "ONNX model -> ModelGraph: read, infer shapes, classify nodes, absorb epilogues.",
    "hw": "GPU descriptions: datasheet and measured facts per GPU, bundled specs, device detection.",
    "planning": "Candidate groups -> best tile per group and layer -> exact choice of groups -> Plan.",
    "validation": "Measurement on the GPU: reference outputs, timing, counters, accuracy reports, fits.",
}

#: (folder or file, suffixes, folders skipped inside it) whose text is rewritten.
TEXT_FILES: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (PKG, (".py", ".md"), (f"{PKG}/data",)),
    ("tests", (".py", ".md", ".sh"), ("tests/fixtures",)),
    ("scripts", (".py", ".md", ".sh"), ()),
    ("benchmarks", (".py", ".md", ".sh"), ("benchmarks/results",)),
    ("models", (".py", ".md"), ()),
    ("tools", (".py", ".md", ".sh"), ()),
    ("kernels", (".md", ".cu", ".cuh"), ()),
    ("docs", (".md",), ("docs/validation",)),
    ("README.md", (".md",), ()),
    ("BENCHMARKS.md", (".md",), ()),
    ("pyproject.toml", (".toml",), ()),
)

#: Text that looks like a module reference but is data (bundled models carry this producer name).
KEEP: tuple[str, ...] = ('producer_name="fuseplanner.zoo"',)

_OLD_KEYS = sorted(MOVES, key=len, reverse=True)
_DOTTED = re.compile(rf"(?<![\w.]){PKG}\.({'|'.join(map(re.escape, _OLD_KEYS))})(?!\w)")
_PATHS = re.compile(
    rf"(?<![\w/]){PKG}/({'|'.join(re.escape(k.replace('.', '/')) for k in _OLD_KEYS)})(\.py)?(?![\w/])")
_MD_FROM = re.compile(rf"^(\s*)from ({PKG}(?:\.[\w.]+)?) import ([\w ,]+?)(\s*(?:#.*)?)$")


class RelayoutError(Exception):
    """Something the script cannot do mechanically; the message names the place."""


@dataclass(frozen=True)
class Edit:
    """Replace lines[first..last] (0-based, inclusive) with `text` (no trailing newline)."""

    first: int
    last: int
    text: str


def module_path(module: str) -> Path:
    """`cost.shapes` -> fuseplanner/cost/shapes.py."""
    return Path(PKG, *module.split(".")).with_suffix(".py")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


# ---------------------------------------------------------------------------------------- preflight

def check_layout(root: Path) -> None:
    """Refuse an already moved, half-moved or colliding tree."""
    src_there = {old for old in MOVES if (root / module_path(old)).exists()}
    dst_there = {old for old in MOVES if (root / module_path(MOVES[old])).exists()}
    if not src_there and len(dst_there) == len(MOVES):
        raise RelayoutError("the tree is already relaid out (every target module exists); nothing to do")
    if len(src_there) != len(MOVES) or dst_there:
        missing = sorted(str(module_path(o)) for o in set(MOVES) - src_there)
        present = sorted(str(module_path(MOVES[o])) for o in dst_there)
        raise RelayoutError(f"half-moved tree: missing sources {missing}, existing targets {present}")
    for pkg in {new.split(".")[0] for new in MOVES.values()}:
        if (root / PKG / f"{pkg}.py").exists():
            raise RelayoutError(f"{PKG}/{pkg}.py exists where package {PKG}/{pkg}/ must go")
    public = public_names(root / PKG / "__init__.py")
    clash = sorted(public & {new.split(".")[0] for new in MOVES.values()})
    if clash:
        raise RelayoutError(f"package names {clash} would shadow public attributes of {PKG}")


def public_names(init: Path) -> set[str]:
    """Names in the package's __all__ and _LAZY (a subpackage of that name would shadow them)."""
    names: set[str] = set()
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple, ast.Dict)):
            target = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elts = node.value.keys if isinstance(node.value, ast.Dict) else node.value.elts
            if target and target[0] in ("__all__", "_LAZY"):
                names |= {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return names


def check_clean(root: Path) -> None:
    if git(root, "status", "--porcelain", "--untracked-files=no").strip():
        raise RelayoutError("tracked files are modified: commit or stash first (or pass --allow-dirty)")


def text_files(root: Path) -> list[Path]:
    """Tracked, non-symlink files that `TEXT_FILES` selects, relative to root."""
    tracked = [Path(p) for p in git(root, "ls-files", "-z").split("\0") if p]
    this = Path(__file__).resolve()
    out = []
    for rel in tracked:
        if (root / rel).is_symlink() or not (root / rel).is_file() or (root / rel).resolve() == this:
            continue
        for top, suffixes, skipped in TEXT_FILES:
            inside = rel == Path(top) or Path(top) in rel.parents
            if inside and rel.suffix in suffixes and not any(Path(s) in rel.parents for s in skipped):
                out.append(rel)
                break
    return out


# ------------------------------------------------------------------------------ relative -> absolute

def package_of(rel: Path) -> str:
    """Dotted package a module file belongs to: fuseplanner/kernels/lbl.py -> fuseplanner.kernels."""
    return ".".join(rel.parent.parts)


def resolve(rel: Path, level: int, module: str | None) -> str:
    parts = package_of(rel).split(".")
    if level - 1 >= len(parts):
        raise RelayoutError(f"{rel}: relative import beyond the top-level package")
    base = parts[: len(parts) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def absolute_imports(rel: Path, source: str) -> list[Edit]:
    """Edits that make every relative import of one package file absolute."""
    lines = source.splitlines()
    tree = ast.parse(source, str(rel))
    edits = [_absolute_from(rel, lines, node) for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.level]
    edits += _import_module_calls(rel, lines, tree)
    return edits


def _absolute_from(rel: Path, lines: list[str], node: ast.ImportFrom) -> Edit:
    i = node.lineno - 1
    line = lines[i]
    m = re.compile(r"from\s+\.+\s*([\w.]*)\s+import\b").match(line, node.col_offset)
    if not m:
        raise RelayoutError(f"{rel}:{node.lineno}: cannot parse the relative import {line.strip()!r}")
    target = resolve(rel, node.level, node.module)
    return Edit(i, i, f"{line[:m.start()]}from {target} import{line[m.end():]}")


def _import_module_calls(rel: Path, lines: list[str], tree: ast.Module) -> list[Edit]:
    """`import_module(".x", __name__)` -> absolute; `import_module(f".{v}", __name__)` only with _LAZY."""
    edits: list[Edit] = []
    lazy = _lazy_table(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_import_module(node.func) and len(node.args) == 2):
            continue
        first, anchor = node.args
        if not (isinstance(anchor, ast.Name) and anchor.id in ("__name__", "__package__")):
            continue
        # the anchor's value: __name__ is the module itself (the package for an __init__.py)
        here = package_of(rel)
        if anchor.id == "__name__" and rel.name != "__init__.py":
            here = ".".join(rel.with_suffix("").parts)
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.startswith("."):
            dots = len(first.value) - len(first.value.lstrip("."))
            target = _resolve_from(here, dots, first.value.lstrip("."))
            new_args = repr(target)
        elif _is_dot_fstring(first) and lazy is not None:
            new_args = first.values[1].value.id  # type: ignore[attr-defined]
            edits += _absolute_lazy(rel, lines, lazy, here)
        else:
            raise RelayoutError(f"{rel}:{node.lineno}: dynamic relative import_module; make it absolute by hand")
        edits.append(_replace_args(rel, lines, node, new_args))
    return edits


def _resolve_from(package: str, dots: int, name: str) -> str:
    parts = package.split(".")
    base = parts[: len(parts) - (dots - 1)]
    return ".".join(base + ([name] if name else []))


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")


def _is_dot_fstring(node: ast.expr) -> bool:
    return (isinstance(node, ast.JoinedStr) and len(node.values) == 2
            and isinstance(node.values[0], ast.Constant) and node.values[0].value == "."
            and isinstance(node.values[1], ast.FormattedValue) and isinstance(node.values[1].value, ast.Name))


def _lazy_table(tree: ast.Module) -> ast.Dict | None:
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in node.targets)):
            return node.value
    return None


def _absolute_lazy(rel: Path, lines: list[str], table: ast.Dict, package: str) -> list[Edit]:
    """Each `"name": ("module", "attr")` of _LAZY -> `("fuseplanner.module", "attr")`."""
    edits = []
    for value in table.values:
        if not (isinstance(value, ast.Tuple) and value.elts and isinstance(value.elts[0], ast.Constant)):
            raise RelayoutError(f"{rel}:{value.lineno}: _LAZY entry is not a (module, attribute) tuple")
        const = value.elts[0]
        if const.lineno != const.end_lineno:
            raise RelayoutError(f"{rel}:{const.lineno}: multi-line _LAZY module name")
        i = const.lineno - 1
        line = lines[i]
        name = const.value.lstrip(".")
        new = f"{package}.{name}"
        edits.append(Edit(i, i, line[: const.col_offset] + repr(new).replace("'", '"') + line[const.end_col_offset:]))
    return edits


def _replace_args(rel: Path, lines: list[str], call: ast.Call, new_args: str) -> Edit:
    first, last = call.args[0], call.args[-1]
    if first.lineno != last.end_lineno:
        raise RelayoutError(f"{rel}:{call.lineno}: multi-line import_module call")
    i = first.lineno - 1
    line = lines[i]
    text = new_args.replace("'", '"')
    return Edit(i, i, line[: first.col_offset] + text + line[last.end_col_offset:])


# ------------------------------------------------------------------- from fuseplanner import <module>

def split_import(indent: str, module: str, names: list[tuple[str, str | None]], tail: str) -> str | None:
    """`from module import names` with every moved module given its own import; None if none moved."""
    base = module[len(PKG) + 1:] if module != PKG else ""
    kept, moved = [], []
    for name, asname in names:
        old = f"{base}.{name}" if base else name
        if old in MOVES:
            parent, _, leaf = f"{PKG}.{MOVES[old]}".rpartition(".")
            local = asname or name
            moved.append(f"from {parent} import {leaf}" + (f" as {local}" if local != leaf else ""))
        else:
            kept.append(f"{name} as {asname}" if asname else name)
    if not moved:
        return None
    stmts = ([f"from {module} import {', '.join(kept)}"] if kept else []) + moved
    return "\n".join(f"{indent}{s}{tail}" for s in stmts)


def from_imports_py(rel: Path, source: str) -> list[Edit]:
    lines = source.splitlines()
    edits = []
    for node in ast.walk(ast.parse(source, str(rel))):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and (node.module == PKG or node.module.startswith(PKG + "."))):
            continue
        first, last = node.lineno - 1, node.end_lineno - 1
        indent, tail = lines[first][: node.col_offset], lines[last][node.end_col_offset:]
        names = [(a.name, a.asname) for a in node.names]
        text = split_import(indent, node.module, names, tail)
        if text is None:
            continue
        if indent.strip() or (tail.strip() and not tail.strip().startswith("#")):
            raise RelayoutError(f"{rel}:{node.lineno}: import shares its line with other code; split it by hand")
        edits.append(Edit(first, last, text))
    return edits


def from_imports_text(source: str) -> list[Edit]:
    """The same for single-line imports in docs and shell scripts."""
    edits = []
    for i, line in enumerate(source.splitlines()):
        m = _MD_FROM.match(line)
        if not m:
            continue
        names = []
        for part in m.group(3).split(","):
            words = part.split()
            names.append((words[0], words[2] if len(words) == 3 and words[1] == "as" else None))
        text = split_import(m.group(1), m.group(2), names, m.group(4))
        if text is not None:
            edits.append(Edit(i, i, text))
    return edits


# ----------------------------------------------------------------------------------------- rewrite

def apply_edits(source: str, edits: list[Edit]) -> str:
    lines = source.splitlines()
    taken: set[int] = set()
    for e in sorted(edits, key=lambda e: e.first, reverse=True):
        span = set(range(e.first, e.last + 1))
        if span & taken:
            raise RelayoutError(f"two rewrites on line {e.first + 1} ({e.text.strip()!r}); split that line by hand")
        taken |= span
        lines[e.first: e.last + 1] = e.text.split("\n")
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def rewrite_names(text: str) -> str:
    kept = {f"\0keep{i}\0": k for i, k in enumerate(KEEP)}
    for mark, k in kept.items():
        text = text.replace(k, mark)
    text = _DOTTED.sub(lambda m: f"{PKG}.{MOVES[m.group(1)]}", text)
    text = _PATHS.sub(lambda m: "/".join((PKG, *MOVES[m.group(1).replace("/", ".")].split("."))) + (m.group(2) or ""),
                      text)
    for mark, k in kept.items():
        text = text.replace(mark, k)
    return text


def rewrite(root: Path, rel: Path) -> str:
    """The new text of one file (steps 2 to 4)."""
    text = (root / rel).read_text()
    try:
        if rel.suffix == ".py":
            if rel.parts[0] == PKG:
                text = apply_edits(text, absolute_imports(rel, text))
            text = apply_edits(text, from_imports_py(rel, text))
        else:
            text = apply_edits(text, from_imports_text(text))
    except RelayoutError as exc:
        raise RelayoutError(f"{rel}: {exc}") from None
    return rewrite_names(text)


def move_files(root: Path) -> list[Path]:
    """git mv every module; create the new packages' __init__.py files. Returns the new paths."""
    created = []
    for pkg, doc in PACKAGES.items():
        init = root / PKG / pkg / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}"""\n')
            git(root, "add", str(init.relative_to(root)))
            created.append(init.relative_to(root))
    for old, new in MOVES.items():
        dst = module_path(new)
        if not (root / dst.parent / "__init__.py").exists():
            raise RelayoutError(f"{dst.parent} is not a package: add it to PACKAGES")
        git(root, "mv", str(module_path(old)), str(dst))
        created.append(dst)
    return created


def sort_imports(root: Path, files: list[Path]) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists() and not shutil.which("ruff"):
        print("ruff not found: run `ruff check --select I --fix .` yourself", file=sys.stderr)
        return
    py = [str(f) for f in files if f.suffix == ".py" and (root / f).exists()]
    if py:
        subprocess.run([ruff, "check", "--quiet", "--select", "I", "--fix", *py], cwd=root, check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="repository root (default: current folder)")
    ap.add_argument("--dry-run", action="store_true", help="print the files that would change; write nothing")
    ap.add_argument("--allow-dirty", action="store_true", help="run although tracked files are modified")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    try:
        if not (root / PKG / "__init__.py").is_file() or not (root / ".git").exists():
            raise RelayoutError(f"{root} is not a {PKG} git checkout (run from the repository root)")
        check_layout(root)
        if not args.allow_dirty and not args.dry_run:
            check_clean(root)
        changed = {rel: new for rel in text_files(root)
                   if (new := rewrite(root, rel)) != (root / rel).read_text()}
    except (RelayoutError, SyntaxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for rel in sorted(changed):
        print(f"rewrite {rel}")
    for old, new in MOVES.items():
        print(f"move    {module_path(old)} -> {module_path(new)}")
    if args.dry_run:
        return 0
    for rel, text in changed.items():
        (root / rel).write_text(text)
    moved = move_files(root)
    renamed = {module_path(o): module_path(n) for o, n in MOVES.items()}
    sort_imports(root, [renamed.get(r, r) for r in changed] + moved)
    print(f"done: {len(changed)} files rewritten, {len(MOVES)} modules moved; review with `git status`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
