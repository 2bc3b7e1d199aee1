"""The training side of agl: the trainer, the algorithm base and the step loop, per-agent runs,
the algorithm's context, runner processes, metrics, datasets and the script harness.

Private: everything here is reached through :mod:`agl` (``agl.Trainer``, ``agl.StepAlgorithm``,
``agl.PerAgent``, ``agl.Script``, ...).
"""
