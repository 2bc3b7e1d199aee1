"""The running side of agl: the runner, its heartbeats and resources, the agent and rollout
decorators, the emitters agents call, and agents that are programs (``agl.CommandAgent``).

Private: everything here is reached through :mod:`agl` (``agl.Runner``, ``agl.rollout``,
``agl.emit_reward``, ``agl.CommandAgent``, ...).
"""
