"""``import agl.auto``: trace every installed library, with no other change to the agent.

Put it at the top of the module that defines your agent::

    import agl.auto  # noqa: F401 - traces what is installed: LangChain, the Agents SDK, openai

    @agl.rollout
    async def my_agent(task, llm): ...

From then on, every :class:`agl.Runner` created in the process (the trainer's, or ``agl runner``
loading this module) instruments every instrumentor installed plugins provide (``agl plugins``
lists them), and the ``instrument=[...]`` it is given besides, unless it is made with
``auto_instrument=False`` (``agl runner --no-auto-instrument``). Runner processes import the
agent's module, so they see the import too.
"""

from __future__ import annotations

from agl._run._runner import enable_auto_instrumentation

enable_auto_instrumentation()
