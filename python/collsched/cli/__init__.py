"""The ``collsched`` command line (typer + rich).

Each area registers its own commands from its own module in this package, so the
command tree grows without everyone editing this file. ``demo`` and ``bench`` hold
what those two commands run (torch is imported only when they run).
"""
from __future__ import annotations

import os
import signal
import sys

import typer

app = typer.Typer(
    name="collsched",
    help="Plan, verify, simulate and run collective communication on two-tier GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


# One module per area, each with a `register(app)`; add a name here to add an area.
AREAS = ("core", "runtime", "forest", "testbed", "moe", "calibrate")


def _register_all() -> None:
    import importlib

    for name in AREAS:
        importlib.import_module(f"collsched.cli.{name}").register(app)


def main() -> None:
    try:
        _register_all()
    except KeyboardInterrupt:  # Ctrl-C while the commands are imported: nothing has started yet
        print("interrupted: nothing was started", file=sys.stderr)
        raise SystemExit(130) from None
    try:
        _run_app()
    except BrokenPipeError:
        _exit_on_closed_pipe()
    finally:
        # The command is over (output printed, any fabric removed): a Ctrl-C while the interpreter
        # exits has nothing left to stop and would only kill it half-way (exit by SIGINT without
        # the command's message, at times a traceback from an exit hook), so from here it is ignored.
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _exit_on_closed_pipe() -> None:
    """The reader of stdout went away after the command wrote its last line (``collsched
    clusters --json | head``): say nothing (the reader asked for no more) and exit 1, as click
    does when a write fails the same way during the command. stdout now points at /dev/null, so
    the interpreter's own flush at exit cannot raise again ("Exception ignored ...")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise SystemExit(1)


# click's exception classes, wherever typer takes click from (its own copy in recent versions).
_USAGE_ERROR = typer.BadParameter.__mro__[1]
_CLICK_EXCEPTION = typer.BadParameter.__mro__[2]


def _run_click() -> None:
    """Run the app; a usage error (unknown flag, bad value) is one line, ``error: ...``, exit 2,
    like every other bad input (click's own form is a boxed block of five lines)."""
    try:
        code = app(standalone_mode=False)
    except _USAGE_ERROR as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `collsched testbed`: the help, as click shows it
            e.show()
            raise SystemExit(e.exit_code) from None
        ctx = getattr(e, "ctx", None)
        hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        print(f"error: {' '.join(e.format_message().split())}{hint}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    except _CLICK_EXCEPTION as e:
        print(f"error: {' '.join(e.format_message().split())}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _run_app() -> None:
    try:
        _run_click()
    except SystemExit as e:
        sys.stdout.flush()  # a closed pipe shows here (BrokenPipeError), not at interpreter exit
        if e.code == 130:  # a Ctrl-C the command reported ("interrupted: ...")
            # Observed: after a caught Ctrl-C, CPython sometimes still kills itself by SIGINT at exit
            # (exit -2 after the one-line message; cause not pinned down), so leave as told.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise

