"""Optional build step: compile the simulator's event loop with mypyc when ``CAPPLAN_COMPILE=1``.

Every other setting lives in ``pyproject.toml``. Without the variable (the default, and what
CI and editable installs use) nothing is compiled and the same modules run as plain Python, with
identical results. A compiled build needs mypy (``capplan[compile]``) installed first and build
isolation off::

    pip install 'mypy>=2.4' 'setuptools>=77'    # the compile extra and a build backend
    CAPPLAN_COMPILE=1 pip install --no-build-isolation .

Do not compile an editable install: the compiled modules would sit beside the sources and
shadow later edits.
"""

import os

from setuptools import setup

COMPILED_MODULES = [
    "capplan/sim/events.py",
    "capplan/sim/stepcost.py",
    "capplan/sim/conversations.py",
    "capplan/sim/scheduler.py",
    "capplan/sim/controller.py",
    "capplan/sim/loop.py",
]
"""The simulator's hot loop (``docs/simulate.md``, Performance)."""

ext_modules = []
if os.environ.get("CAPPLAN_COMPILE") == "1":
    from mypyc.build import mypycify

    # the modules they import are type-checked for the compiled code's sake, but only the compiled
    # modules must pass mypy
    ext_modules = mypycify(["--follow-imports=silent", "--ignore-missing-imports", *COMPILED_MODULES], opt_level="3")

setup(ext_modules=ext_modules)
