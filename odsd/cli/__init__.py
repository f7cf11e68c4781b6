"""The ``odsd`` command line (typer).

Every error a user can cause is printed as one line, ``odsd: error: …``, with the exit code of
its class (see ``odsd --help``); tracebacks are reserved for bugs.
"""

from __future__ import annotations

import logging
import sys

import typer
from typer.exceptions import TyperException

from odsd.cli.collect import check_env_cmd, collect_cmd, eval_cmd, resume_cmd
from odsd.cli.demo import demo_cmd
from odsd.cli.export import export_lerobot_cmd
from odsd.cli.learn import learn_cmd
from odsd.cli.replay import replay_cmd, verify_cmd
from odsd.cli.report import report_cmd
from odsd.cli.status import status_cmd
from odsd.cli.store import store_app
from odsd.errors import OdsdError

EXIT_CODES = """Exit codes: 0 ok; 1 unexpected failure; 2 bad usage or config; 3 store error (missing store,
format version, schema mismatch); 4 corrupt store, fsck found errors or store verify found episodes that do not reproduce; 5 run lock held by
another process; 130 interrupted."""

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


def error_line(message: str) -> None:
    typer.echo(f"odsd: error: {message}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the app and maps errors to one line and an exit code."""
    logging.basicConfig(level=logging.INFO, format="odsd: %(message)s")
    try:
        result = app(args=argv, prog_name="odsd", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        error_line("aborted")
        sys.exit(130)
    except TyperException as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) else ""
        error_line(exc.format_message() + hint)
        sys.exit(exc.exit_code)
    except OdsdError as exc:
        error_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        error_line("interrupted")
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)
