"""Best-of-n prompt selection for agl: try each candidate prompt, keep the best-scoring one."""

from agl_best_of_n.algorithm import BestOfNAlgorithm

__all__ = ["BestOfNAlgorithm"]
