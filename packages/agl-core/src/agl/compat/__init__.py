"""Compatibility layers: other projects' names on agl, so porting an agent is an import change.

- :mod:`agl.compat.agentlightning`: Agent Lightning's ``LitAgent[T]``, ``Trainer(n_workers=,
  initial_resources=)``, ``LLM.get_base_url``, ``trained_agents=``.
"""
