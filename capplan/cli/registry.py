"""Command sets: each command module collects its commands here; ``capplan.cli.app`` registers
them on the application explicitly (no registration by import side effect, no import cycle)."""

from __future__ import annotations

from typing import Any, Callable

import typer


class CommandSet:
    """The commands one module defines, in order, until :meth:`register` adds them to an app."""

    def __init__(self) -> None:
        self.entries: list[tuple[str | None, dict[str, Any], Callable[..., Any]]] = []

    def command(self, name: str | None = None, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator with :meth:`typer.Typer.command`'s arguments."""

        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.entries.append((name, kwargs, fn))
            return fn

        return add

    def register(self, app: typer.Typer) -> None:
        """Add every collected command to ``app``."""
        for name, kwargs, fn in self.entries:
            app.command(name, **kwargs)(fn)
