"""The command-line layer: parses, calls the library, renders. No computation lives here.

Modules import numpy, pandas and the heavier parts of capplan inside the commands that need
them, so that ``capplan --help`` stays fast.
"""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``capplan`` console script."""
    from capplan.cli.app import run

    run()
