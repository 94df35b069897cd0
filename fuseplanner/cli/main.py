"""Entry point of the `fuseplanner` console script.

Every command module `fuseplanner.cli.cmd_<name>` exposes ``register(subparsers)``, which adds its
sub-parser and sets ``func`` (a callable taking the parsed namespace and returning an exit code).
Errors that fuseplanner raises on purpose become one `error:` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import warnings

from fuseplanner import __version__
from fuseplanner.core.errors import FusePlannerError, ModelNote

COMMANDS = ("inspect", "gpus", "plan", "compare", "run", "validate", "calibrate", "analyze")
#: Commands that run once over one model and exit within seconds: they run without the cyclic
#: garbage collector, whose collections over the imported libraries' objects took a tenth of a
#: `plan` (reference counting still frees everything not in a cycle). The others turn it back on.
#: Run as the console script (`main()` reading sys.argv), a short command also ends the process
#: without the interpreter's teardown (`_exit_now`).
SHORT_COMMANDS = ("inspect", "gpus", "plan", "compare")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line `error:` messages and exit code 2 for bad options."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fuseplanner",
        description="Plan fused depthwise/pointwise convolutions for a model on a GPU, predict the savings, "
        "and check them on the hardware.",
    )
    parser.add_argument("--version", action="version", version=f"fuseplanner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"fuseplanner.cli.cmd_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"fuseplanner.cli.cmd_{name}":
                raise
            continue
        module.register(sub)
    return parser


def _note_printer():
    """A `warnings.showwarning` that prints each distinct ModelNote once as a `note:` line."""
    shown: set[str] = set()
    default = warnings.showwarning

    def show(message, category, *args, **kwargs):
        if not issubclass(category, ModelNote):
            return default(message, category, *args, **kwargs)
        if str(message) not in shown:
            shown.add(str(message))
            sys.stderr.write(f"note: {message}\n")
        return None

    return show


def main(argv: list[str] | None = None) -> int:
    collecting = gc.isenabled()
    gc.disable()  # imports and parsing; a short command keeps it off (SHORT_COMMANDS)
    try:
        code = _main(argv, collecting)
    except BaseException:
        if collecting:
            gc.enable()
        raise
    if argv is None and not gc.isenabled():
        _exit_now(code)  # the console script after a short command
    if collecting:
        gc.enable()
    return code


def _exit_now(code: int) -> None:
    """End the process after a short command run as the console script: flush stdout and stderr and
    exit without tearing the interpreter down (its last garbage collection and the unloading of every
    imported library took about 50 ms of a 0.9 s `plan`). Nothing is left to clean up: the command
    closed its files and its worker processes."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written
            pass
    os._exit(code)


def _main(argv: list[str] | None, collecting: bool) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if collecting and args.command not in SHORT_COMMANDS:
        gc.enable()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", ModelNote)
            warnings.showwarning = _note_printer()
            return int(args.func(args) or 0)
    except FusePlannerError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
