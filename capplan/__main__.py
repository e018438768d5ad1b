"""``python -m capplan`` runs the command-line interface."""

from capplan.cli import main

main()
