"""Layout rules for the stage packages of fuseplanner, checked from the source (nothing is imported).

    python tools/check_imports.py          # from the repository root; exit 1 on a violation not allowed

1. No import cycle between stage packages (core, frontend, hw, cost, kernels, planning, run,
   validation, cli): every import counts, lazy ones inside functions included. An edge listed in
   `ALLOWED_EDGES` is left out of the cycle search.
2. No module reads a private name (a leading underscore, dunders excepted) of another stage package:
   ``from fuseplanner.kernels._build import x``, ``from fuseplanner.cost.time import _rate`` or
   ``mod._rate`` on a module imported from another stage. `ALLOWED_PRIVATE` lists the known ones.
3. No function or method longer than `MAX_FUNCTION_LINES` lines; `ALLOWED_LONG` lists the known ones.

The allow-lists record what the tree does today, so the check can only tighten: an entry that no
longer matches a violation is reported as ``stale`` (remove it). tests/test_layout.py runs this check.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

PKG = "fuseplanner"
MAX_FUNCTION_LINES = 80

#: Stage -> stage imports left out of the cycle search: (importer stage, imported stage).
ALLOWED_EDGES: frozenset[tuple[str, str]] = frozenset()
#: (importing module, private module or name of another stage), module paths below the package.
ALLOWED_PRIVATE: frozenset[tuple[str, str]] = frozenset({
    ("validation.microbench", "kernels._build"),  # require_device
    ("validation.timing", "kernels._build"),  # require_device, compile_kernel, launch
})
#: "module.qualified function name" of functions over the limit, module paths below the package.
ALLOWED_LONG: frozenset[str] = frozenset({
    "cost.best_tile",
    "planning.search.plan",
})


@dataclass(frozen=True)
class Violation:
    rule: str  # "cycle", "private", "long"
    key: tuple[str, str] | str  # what the allow-list holds
    where: str  # file:line, for people

    def __str__(self) -> str:
        return f"{self.rule:8} {self.key}  ({self.where})"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (the data/ links skipped)."""
    out = {}
    for path in sorted((root / PKG).rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[1] == "data":
            continue
        parts = rel.with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def stage(module: str) -> str | None:
    """fuseplanner.cost.time -> cost; the package root and top-level modules have no stage."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and _is_package(parts[1])) else None


_PACKAGES: set[str] = set()


def _is_package(name: str) -> bool:
    return name in _PACKAGES


def imports(module: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(imported module, names taken from it, line) for every absolute or relative import."""
    out = []
    is_init = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names if a.name.startswith(PKG)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: None if is_init else -1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            if base.startswith(PKG):
                out.append((base, [a.name for a in node.names], node.lineno))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def check_cycles(mods: dict[str, Path]) -> list[Violation]:
    edges: dict[tuple[str, str], str] = {}
    for mod, path in mods.items():
        src = stage(mod)
        for target, names, line in imports(mod, path):
            for full in [target] + [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]:
                dst = stage(full)
                if src and dst and src != dst:
                    edges.setdefault((src, dst), f"{path}:{line}")
    graph = defaultdict(set)
    for a, b in edges:
        if (a, b) not in ALLOWED_EDGES:
            graph[a].add(b)
    out = []
    for comp in _cycles(graph):
        for a, b in sorted(edges):
            if a in comp and b in comp and (a, b) not in ALLOWED_EDGES:
                out.append(Violation("cycle", (a, b), edges[(a, b)]))
    out += [Violation("stale", e, "ALLOWED_EDGES") for e in sorted(ALLOWED_EDGES - set(edges))]
    return out


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one stage."""
    nodes = set(graph) | {b for bs in graph.values() for b in bs}
    reach = {n: _reachable(graph, n) for n in nodes}
    comps, seen = [], set()
    for n in sorted(nodes):
        comp = {m for m in nodes if m in reach[n] and n in reach[m]} | {n}
        if len(comp) > 1 and not comp & seen:
            comps.append(comp)
            seen |= comp
    return comps


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def check_private(mods: dict[str, Path]) -> list[Violation]:
    found: dict[tuple[str, str], str] = {}
    for mod, path in mods.items():
        src = stage(mod)
        bound: dict[str, str] = {}  # local name -> module of another stage
        for target, names, line in imports(mod, path):
            dst = stage(target)
            if dst is None or dst == src:
                continue
            rest = target[len(PKG) + 1:]
            private = [rest] if any(_private(p) for p in rest.split(".")) else [
                f"{rest}.{n}" for n in names if _private(n)]
            for name in private:
                found.setdefault((mod[len(PKG) + 1:], name), f"{path}:{line}")
            bound.update({n: f"{rest}.{n}" for n in names if f"{target}.{n}" in mods})
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and _private(node.attr)):
                found.setdefault((mod[len(PKG) + 1:], f"{bound[node.value.id]}.{node.attr}"), f"{path}:{node.lineno}")
    out = [Violation("private", k, w) for k, w in sorted(found.items()) if k not in ALLOWED_PRIVATE]
    return out + [Violation("stale", k, "ALLOWED_PRIVATE") for k in sorted(ALLOWED_PRIVATE - set(found))]


def check_lengths(mods: dict[str, Path]) -> list[Violation]:
    found: dict[str, str] = {}
    for mod, path in mods.items():
        for qual, node in _functions(ast.parse(path.read_text()), ""):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                found[f"{mod[len(PKG) + 1:] or PKG}.{qual}"] = f"{path}:{node.lineno} ({n} lines)"
    out = [Violation("long", k, w) for k, w in sorted(found.items()) if k not in ALLOWED_LONG]
    return out + [Violation("stale", k, "ALLOWED_LONG") for k in sorted(ALLOWED_LONG - set(found))]


def _functions(node: ast.AST, prefix: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qual = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield qual, child
            yield from _functions(child, qual + ".")


def check(root: Path) -> list[Violation]:
    mods = modules(root)
    _PACKAGES.clear()
    _PACKAGES.update(m.split(".")[1] for m, p in mods.items() if p.name == "__init__.py" and m.count(".") == 1)
    return check_cycles(mods) + check_private(mods) + check_lengths(mods)


def main() -> int:
    found = check(Path.cwd())
    for v in found:
        print(v)
    bad = [v for v in found if v.rule != "stale"]
    print(f"{len(bad)} violation(s) outside the allow-lists, {len(found) - len(bad)} stale allow-list entries")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
