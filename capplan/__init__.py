"""capplan: workload accounting and capacity planning for LLM inference and RL post-training.

The package is a library first: every figure the command line prints comes from a pure,
importable function (``capplan.ledger``, ``capplan.kv``, ...). The command-line layer in
``capplan.cli`` only parses, calls and renders.
"""

__version__ = "0.1.0"
