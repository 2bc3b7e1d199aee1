"""The adapter package: its plugin, script helpers, public surface, and a clean uninstrument."""

from __future__ import annotations

from agl.testing.adapter import AdapterConformance


class TestLangChainAdapter(AdapterConformance):
    package = "agl_langchain"
    plugin = "langchain"
    instrumentor = "LangChainInstrumentor"
    framework_modules = ("langchain_core", "langgraph")
    helpers = ("chat_model", "close_chat_models")
    patched = (
        ("langchain_core.callbacks:BaseCallbackManager", "__init__"),  # openinference's
        ("langchain_openai.chat_models.base:BaseChatOpenAI", "_convert_chunk_to_generation_chunk"),
    )
