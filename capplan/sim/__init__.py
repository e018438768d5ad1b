"""Internals of ``capplan simulate`` (:mod:`capplan.simulate` is the public interface).

* :mod:`capplan.sim.stepcost`: engine-step prices as affine coefficients probed from
  :func:`capplan.roofline.engine_step`;
* :mod:`capplan.sim.engine`: the discrete-event core (replicas, environment, trainer).
"""
