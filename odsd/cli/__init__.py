"""The ``odsd`` command line (typer).

Every error a user can cause is printed as one line, ``odsd: error: …``, with the exit code of
its class (see ``odsd --help``); tracebacks are reserved for bugs.
"""

from __future__ import annotations

import sys
from typing import Annotated

import click
import typer
from typer.core import TyperOption
from typer.exceptions import TyperException

from odsd.cli.collect import check_env_cmd, collect_cmd, eval_cmd, resume_cmd
from odsd.cli.demo import demo_cmd
from odsd.cli.export import export_lerobot_cmd
from odsd.cli.learn import learn_cmd
from odsd.cli.logs import configure_logging, emit_error, use_json_logs
from odsd.cli.replay import replay_cmd, verify_cmd
from odsd.cli.report import report_cmd
from odsd.cli.status import status_cmd
from odsd.cli.store import store_app
from odsd.errors import OdsdError, as_user_error

EXIT_CODES = """Exit codes: 0 ok; 1 unexpected failure; 2 bad usage or config; 3 store error (missing store,
format version, schema mismatch); 4 corrupt store, fsck found errors or store verify found episodes that do not reproduce; 5 run lock held by
another process; 6 storage refused a write (no space left, quota, read-only filesystem, I/O error, no
permission); 130 interrupted."""

app = typer.Typer(
    name="odsd",
    help=f"Online data streaming daemon: DAgger data production into a versioned Zarr episode store.\n\n{EXIT_CODES}",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
app.add_typer(store_app, name="store")
app.command("collect")(collect_cmd)
app.command("resume")(resume_cmd)
app.command("status")(status_cmd)
app.command("eval")(eval_cmd)
app.command("check-env")(check_env_cmd)
app.command("demo")(demo_cmd)
app.command("export-lerobot")(export_lerobot_cmd)
app.command("learn")(learn_cmd)
app.command("replay")(replay_cmd)
app.command("report")(report_cmd)
store_app.command("verify")(verify_cmd)


@app.command()
def version() -> None:
    """Print the odsd version."""
    from odsd import __version__

    typer.echo(__version__)


def _print_version(value: bool) -> None:
    if value:
        version()
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the odsd version and exit."
        ),
    ] = False,
) -> None:
    """Online data streaming daemon: DAgger data production into a versioned Zarr episode store."""


def _flag_type_rich(self: TyperOption, ctx: click.Context) -> str | None:
    """No value placeholder for flags: typer shows ``<bool>`` for them, which reads as if
    ``--json true`` were accepted (it is an error)."""
    if self.is_flag:
        return None
    return _option_type_rich(self, ctx)


_option_type_rich = TyperOption.display_type_rich
TyperOption.display_type_rich = _flag_type_rich  # type: ignore[method-assign]


def error_line(message: str, exit_code: int = 1) -> None:
    emit_error(message, exit_code)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the app and maps errors to one line and an exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    configure_logging()
    options = args[: args.index("--")] if "--" in args else args
    if "--json-logs" in options:
        use_json_logs()  # before anything logs: every line of the run is JSON, its error too
    try:
        result = app(args=args, prog_name="odsd", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        error_line("aborted", 130)
        sys.exit(130)
    except TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = exc.format_message() or "missing command"  # no_args_is_help prints help, no message
        error_line(message + hint, exc.exit_code)
        sys.exit(exc.exit_code)
    except OdsdError as exc:
        error_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        error_line("interrupted", 130)
        sys.exit(130)
    except OSError as exc:
        user = as_user_error(exc)  # a full disk, a read-only filesystem, a file in the way: wherever it hit
        if user is None:
            raise
        error_line(str(user), user.exit_code)
        sys.exit(user.exit_code)
    sys.exit(result if isinstance(result, int) else 0)
