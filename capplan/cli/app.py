"""The ``capplan`` application: the root typer app and its command groups.

``app`` (every command) is built on first use. The console script builds, for the five
commands run most (``plan``, ``sweep``, ``simulate``, ``kv``, ``roofline``), an application
holding only the command asked for: typer resolves the options of every command it holds
before it runs one, which was a fifth of a ``capplan kv`` run. Help, usage lines, errors and
results are the same either way (``tests/test_cli.py`` compares them).
"""

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


HELP = (
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
)


def _root_app() -> typer.Typer:
    """The root application with its ``--version`` callback and no command yet."""
    root = typer.Typer(
        name="capplan",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    root.callback()(_root)
    return root


def _ledger_app() -> typer.Typer:
    """``capplan ledger``: ``show`` by default, and ``reconcile``."""
    return typer.Typer(
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


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Workload accounting and capacity planning for LLM inference and RL post-training."""


LEAN = {"plan": "plan_cmd", "sweep": "sweep_cmd", "simulate": "simulate_cmd", "kv": "kv_cmd", "roofline": "roofline_cmd"}
"""Commands the console script runs from an application holding only them (module of each)."""


def build_app(only: str | None = None) -> typer.Typer:
    """The application with every command, in the order ``capplan --help`` lists them.

    ``only`` (a key of :data:`LEAN`) builds it with that one command instead.
    """
    import importlib

    root = _root_app()
    if only is not None:
        importlib.import_module(f"capplan.cli.{LEAN[only]}").commands.register(root)
        return root
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

    plan_cmd.commands.register(root)
    sweep_cmd.commands.register(root)
    simulate_cmd.commands.register(root)
    kv_cmd.commands.register(root)
    roofline_cmd.commands.register(root)
    root.command("accuracy", help=accuracy_cmd.HELP)(accuracy_cmd.accuracy)
    root.command("calibrate", help=calibrate_cmd.HELP)(calibrate_cmd.calibrate)
    map_cmd.commands.register(root)
    misc_cmd.commands.register(root)
    ledger = _ledger_app()
    ledger_cmd.commands.register(ledger)
    reconcile_cmd.commands.register(ledger)
    root.add_typer(ledger, name="ledger")
    root.add_typer(workloads_cmd.workloads_app, name="workloads")
    root.command("init", help=workloads_cmd.INIT_HELP)(workloads_cmd.init)
    root.add_typer(profiles_cmd.profiles_app, name="profiles")
    root.add_typer(profiles_cmd.model_app, name="model")
    return root


_built: dict[str, typer.Typer] = {}


def __getattr__(name: str) -> Any:
    """``app``: the application with every command, built on first use."""
    if name == "app":
        if "app" not in _built:
            _built["app"] = build_app()
        return _built["app"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_for(argv: list[str]) -> typer.Typer:
    """The application to run ``capplan`` with these arguments (lean for a :data:`LEAN` command)."""
    import sys

    if argv and argv[0] in LEAN:
        return build_app(only=argv[0])
    return sys.modules[__name__].app  # type: ignore[no-any-return]


def run() -> None:
    """Run the app (console-script entry point), never ending in a traceback.

    A closed pipe (``capplan ... | head``) ends quietly with status 141, as Unix tools killed by
    SIGPIPE do; a closed or failing standard output, an interrupt, and any unexpected error
    print one line on standard error. ``CAPPLAN_DEBUG=1`` shows the traceback of an
    unexpected error.
    """
    import os
    import sys

    import warnings

    warnings.showwarning = _warning_line
    if sys.stdout is None:  # started with standard output closed (``capplan ... >&-``)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        _die("standard output is closed; nothing can be printed (redirect it to a file or /dev/null)", 1)
    try:
        app_for(sys.argv[1:])()
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


_warned: set[str] = set()


def _warning_line(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Show a warning as one ``Warning: ...`` line on standard error, each message once.

    Python's default format adds the source file and line of the library code that warned,
    which means nothing to a user of the command line.
    """
    import sys

    text = str(message)
    if text in _warned:
        return
    _warned.add(text)
    try:
        sys.stderr.write(f"Warning: {text}\n")
    except (OSError, ValueError, AttributeError):
        pass


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
