"""Resources: prompt templates really format, the registry round-trips plugin types."""

from __future__ import annotations

from typing import Literal

import pytest

import agl
from agl import LLM, GenericResource, PromptTemplate, Resource, ResourcesUpdate, TemplateFormatError


def test_fstring_template_formats() -> None:
    template = PromptTemplate(template="Answer {question} in {n} words.")
    assert template.format(question="why?", n=3) == "Answer why? in 3 words."
    assert template.variables() == {"question", "n"}


def test_fstring_template_names_the_missing_variable() -> None:
    template = PromptTemplate(template="Answer {question}.")
    with pytest.raises(TemplateFormatError) as caught:
        template.format(other=1)
    assert caught.value.field == "question"
    assert "question" in caught.value.message


def test_fstring_template_reports_malformed_templates() -> None:
    with pytest.raises(TemplateFormatError):
        PromptTemplate(template="Answer {question").format(question="x")


def test_jinja2_template_formats_with_logic() -> None:
    template = PromptTemplate(
        template="{% for q in questions %}Q{{ loop.index }}: {{ q }}\n{% endfor %}",
        engine="jinja2",
    )
    assert template.format(questions=["a", "b"]) == "Q1: a\nQ2: b\n"
    assert template.variables() == {"questions"}


def test_jinja2_template_undefined_variable_is_an_error() -> None:
    with pytest.raises(TemplateFormatError) as caught:
        PromptTemplate(template="Hi {{ name }}", engine="jinja2").format()
    assert "name" in caught.value.message


def test_a_malformed_jinja2_template_is_a_template_error() -> None:
    template = PromptTemplate(template="Hi {{ name ", engine="jinja2")
    for use in (template.variables, template.format):
        with pytest.raises(TemplateFormatError, match="jinja2"):
            use()


def test_jinja2_template_runs_sandboxed() -> None:
    # Templates may come from an optimizer model: no access to Python internals.
    template = PromptTemplate(template="{{ x.__class__.__mro__ }}", engine="jinja2")
    with pytest.raises(TemplateFormatError):
        template.format(x=1)


def test_unknown_engine_is_rejected() -> None:
    with pytest.raises(ValueError, match="engine"):
        PromptTemplate(template="x", engine="mustache")  # type: ignore[arg-type]


def test_resources_update_parses_members_by_type_tag() -> None:
    update = ResourcesUpdate.model_validate(
        {
            "resources_id": "rs-1",
            "version": 1,
            "resources": {
                "llm": {"type": "llm", "endpoint": "http://h/v1", "model": "m"},
                "prompt": {"type": "prompt_template", "template": "{x}"},
                "exotic": {"type": "not-registered-here", "anything": [1, 2]},
            },
        }
    )
    assert isinstance(update.resources["llm"], LLM)
    assert isinstance(update.resources["prompt"], PromptTemplate)
    exotic = update.resources["exotic"]
    assert isinstance(exotic, GenericResource)
    # Nothing of an unknown type is lost on the way back out.
    assert update.model_dump()["resources"]["exotic"] == {
        "type": "not-registered-here",
        "anything": [1, 2],
    }


def test_resources_update_names_the_bad_member() -> None:
    with pytest.raises(ValueError, match=r"resource 'llm'.*model"):
        ResourcesUpdate.model_validate(
            {
                "resources_id": "rs",
                "version": 1,
                "resources": {"llm": {"type": "llm", "endpoint": "e"}},
            }
        )
    with pytest.raises(ValueError, match="'type'"):
        ResourcesUpdate.model_validate(
            {"resources_id": "rs", "version": 1, "resources": {"x": {"no": "type"}}}
        )


def test_register_resource_type_is_a_deprecated_shim_that_still_works() -> None:
    class Adapter(Resource):
        type: Literal["test-lora-adapter"] = "test-lora-adapter"
        path: str

    with pytest.warns(DeprecationWarning, match="agl_resource_types hook") as caught:
        assert agl.register_resource_type(Adapter) is Adapter
    assert caught[0].filename == __file__  # the warning points at the caller
    with pytest.warns(DeprecationWarning, match=r"PluginManager\(\)\.provided"):
        known = agl.resource_types()
    assert known["test-lora-adapter"] is Adapter
    assert known["llm"] is LLM
    update = ResourcesUpdate.model_validate_json(
        ResourcesUpdate(
            resources_id="rs", version=1, resources={"a": Adapter(path="/w")}
        ).model_dump_json()
    )
    assert update.resources["a"] == Adapter(path="/w")

    class Clash(Resource):
        type: Literal["llm"] = "llm"

    with (
        pytest.warns(DeprecationWarning, match="register_resource_type"),
        pytest.raises(agl.InvalidInputError, match="already registered by LLM"),
    ):
        agl.register_resource_type(Clash)


def test_core_types_come_through_the_builtin_plugin() -> None:
    from agl.plugins import PluginManager

    provided = PluginManager(entry_points=False).provided("agl_resource_types")
    assert provided == {"llm": LLM, "prompt_template": PromptTemplate}


def test_llm_requires_endpoint_and_model() -> None:
    with pytest.raises(ValueError, match="model"):
        LLM(endpoint="http://h/v1", model="")


@pytest.mark.anyio
async def test_llm_openai_client_calls_its_endpoint_with_its_key() -> None:
    from agl.testing.openai_server import OpenAIServer

    with OpenAIServer(lambda request: "hello") as server:
        llm = LLM(endpoint=server.url, model="m", api_key="secret")
        async with llm.openai_client(max_retries=0) as client:
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
        assert reply.choices[0].message.content == "hello"
        assert server.requests[-1].headers["authorization"] == "Bearer secret"


def test_llm_openai_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm = LLM(endpoint="https://models.example/v1", model="m")
    first, second = llm.openai_client_kwargs(), llm.openai_client_kwargs(timeout=5.0)
    assert first["base_url"] == "https://models.example/v1"
    assert first["api_key"] == "unused"
    assert second["timeout"] == 5.0
    # httpx keeps the context it was given on each connection pool: one object, built once
    pools = [kwargs["http_client"]._transport._pool for kwargs in (first, second)]
    assert pools[0]._ssl_context is pools[1]._ssl_context
    own = object()
    assert llm.openai_client_kwargs(http_client=own)["http_client"] is own
