"""Alias kept for ``from capplan.sweep import sweep``: the sweep lives in :mod:`capplan.plan.grid`."""

from capplan.plan.grid import COLUMNS, best, default_inference_gpus, default_trainer_gpus, sweep

__all__ = ["COLUMNS", "best", "default_inference_gpus", "default_trainer_gpus", "sweep"]
