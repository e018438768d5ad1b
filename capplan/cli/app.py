"""The ``capplan`` application: the root typer app and its command groups."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from capplan import __version__


class DefaultCommandGroup(TyperGroup):
    """A group that runs its ``show`` command when the first argument is not a subcommand.

    This makes ``capplan ledger W.yaml`` and ``capplan ledger reconcile FILE`` both work.
    """

    default_command = "show"

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        elif not args:
            args = [self.default_command]
        return super().parse_args(ctx, args)


app = typer.Typer(
    name="capplan",
    help=(
        "Workload accounting and capacity planning for LLM inference and RL post-training.\n\n"
        "Examples:\n\n\b\n"
        "  capplan plan reasoning-rl-olmo3-7b --hardware h100-sxm   # the capacity plan\n"
        "  capplan kv --model llama-3.1-8b --hardware h100-sxm     # KV budget and concurrency\n"
        "  capplan roofline --model llama-3.1-8b --hardware h100-sxm\n"
        "  capplan ledger seed-replay                              # per-token-class ledger\n"
        "  capplan ledger my-workload.yaml --check                 # CI gate: exit 1 on a broken identity\n"
        "  capplan sweep agentic-tool-rl --hardware h100-sxm,h200 --tp 1,2,4\n"
        "  capplan workloads                                       # the bundled examples\n"
        "  capplan init agentic-rl                                 # a commented starting file\n"
        "  capplan profiles list"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

ledger_app = typer.Typer(
    cls=DefaultCommandGroup,
    help=(
        "Per-token-class ledger of a workload (recorded, sampled, prefill/decode-forwarded, cache-hit, "
        "trained, scored positions) with reconciliation checks.\n\n"
        "Examples:\n\n\b\n"
        "  capplan ledger seed-replay\n"
        "  capplan ledger workloads/seed-replay-auto.yaml --format json\n"
        "  capplan ledger my.yaml --check   # exit 1 when an identity breaks"
    ),
    no_args_is_help=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"capplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Workload accounting and capacity planning for LLM inference and RL post-training."""


def _register() -> None:
    """Add every command to the application, in the order ``capplan --help`` lists them."""
    from capplan.cli import (
        accuracy_cmd,
        calibrate_cmd,
        kv_cmd,
        ledger_cmd,
        map_cmd,
        misc_cmd,
        plan_cmd,
        profiles_cmd,
        reconcile_cmd,
        roofline_cmd,
        simulate_cmd,
        sweep_cmd,
        workloads_cmd,
    )

    plan_cmd.commands.register(app)
    sweep_cmd.commands.register(app)
    simulate_cmd.commands.register(app)
    kv_cmd.commands.register(app)
    roofline_cmd.commands.register(app)
    app.command("accuracy", help=accuracy_cmd.HELP)(accuracy_cmd.accuracy)
    app.command("calibrate", help=calibrate_cmd.HELP)(calibrate_cmd.calibrate)
    map_cmd.commands.register(app)
    misc_cmd.commands.register(app)
    ledger_cmd.commands.register(ledger_app)
    reconcile_cmd.commands.register(ledger_app)
    app.add_typer(ledger_app, name="ledger")
    app.add_typer(workloads_cmd.workloads_app, name="workloads")
    app.command("init", help=workloads_cmd.INIT_HELP)(workloads_cmd.init)
    app.add_typer(profiles_cmd.profiles_app, name="profiles")
    app.add_typer(profiles_cmd.model_app, name="model")


_register()


def run() -> None:
    """Run the app (console-script entry point), never ending in a traceback.

    A closed pipe (``capplan ... | head``) ends quietly with status 141, as Unix tools killed by
    SIGPIPE do; a closed or failing standard output, an interrupt, and any unexpected error
    print one line on standard error. ``CAPPLAN_DEBUG=1`` shows the traceback of an
    unexpected error.
    """
    import os
    import sys

    if sys.stdout is None:  # started with standard output closed (``capplan ... >&-``)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        _die("standard output is closed; nothing can be printed (redirect it to a file or /dev/null)", 1)
    try:
        app()
    except BrokenPipeError:
        _quiet_pipe()
        sys.exit(141)
    except KeyboardInterrupt:
        _die("interrupted", 130)
    except OSError as exc:
        _die(f"cannot write the output: {exc.strerror or exc}", 1)
    except RecursionError:
        _die("the input is nested too deeply to process", 2)
    except MemoryError:
        _die("out of memory; narrow the input (fewer values, a smaller grid or sample)", 1)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, never a traceback
        if os.environ.get("CAPPLAN_DEBUG"):
            raise
        from capplan.output import printable

        detail = printable(f"{type(exc).__name__}: {exc}")[:300]
        _die(f"internal error ({detail}); please report it with the command line (CAPPLAN_DEBUG=1 shows the traceback)", 1)


def _quiet_pipe() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail again."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _die(message: str, code: int) -> None:
    """Print ``Error: message`` on standard error if it is writable, and exit with ``code``."""
    import sys

    try:
        sys.stderr.write(f"Error: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    _quiet_pipe()
    sys.exit(code)
