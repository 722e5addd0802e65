"""The ``collsched`` command line (typer + rich).

Each area registers its own commands from its own module, so the command tree
grows without everyone editing this file.
"""
from __future__ import annotations

import typer

app = typer.Typer(
    name="collsched",
    help="Plan, verify, simulate and run collective communication on two-tier GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    from collsched import cli_core, cli_runtime, cli_forest

    for module in (cli_core, cli_runtime, cli_forest):
        module.register(app)


def main() -> None:
    _register_all()
    app()


if __name__ == "__main__":
    main()
