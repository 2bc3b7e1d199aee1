"""Resources: the named, versioned things an agent uses and an algorithm improves.

An algorithm publishes a set of resources, such as
``{"main_llm": LLM(...), "system": PromptTemplate(...)}``, as one :class:`ResourcesUpdate`;
the store gives it an id and the next version number. Runners fetch the set a rollout names
(or the latest) and hand its members to the agent.

Each resource class has a ``type`` tag. Core's own types (:class:`LLM`,
:class:`PromptTemplate`) parse back into their classes everywhere. Other types come from
plugins (the ``agl_resource_types`` hook; core's built-in plugin lists its own there too): a
tag the data model does not know (a plugin's type, on a store server without the plugin, or in
a store client) parses as a :class:`GenericResource` with every field intact, never refused or
dropped, and whoever holds the plugins turns it into the plugin's class
(:meth:`agl.plugins.PluginManager.upgrade_resources`; the runner does, before its agent sees
it). :func:`register_resource_type` is the deprecated process-wide way, kept working.
"""

from __future__ import annotations

import os
import string
import time
import warnings
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializeAsAny,
    ValidationError,
    field_validator,
)

from agl._errors import InvalidInputError, TemplateFormatError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "CORE_TYPES",
    "LLM",
    "GenericResource",
    "PromptTemplate",
    "Resource",
    "ResourcesPage",
    "ResourcesUpdate",
    "register_resource_type",
    "resource_types",
]


class Resource(BaseModel):
    """Base class of every resource. Subclasses set a unique ``type`` literal."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    type: str


_DEPRECATED_REGISTRY: dict[str, type[Resource]] = {}
"""Types given to the deprecated :func:`register_resource_type`, by tag."""

R = TypeVar("R", bound=type[Resource])

_USE_THE_HOOK = (
    "provide resource classes from a plugin's agl_resource_types hook "
    "(see agl.hookspecs) and read them back with agl.plugins.PluginManager.upgrade_resources"
)


def register_resource_type(cls: R) -> R:
    """Register a resource class under its ``type`` tag, for this whole process (deprecated).

    Deprecated: provide the class from a plugin's ``agl_resource_types`` hook instead (see
    :mod:`agl.hookspecs`); :meth:`agl.plugins.PluginManager.upgrade_resources` turns what a
    store hands back into it. A registered class still parses back into itself wherever
    resources are validated in this process.

    Raises:
        InvalidInputError: the class has no literal default for ``type``, or another class
            already holds the tag.
    """
    warnings.warn(
        f"agl.register_resource_type is deprecated: {_USE_THE_HOOK}",
        DeprecationWarning,
        stacklevel=2,
    )
    tag = cls.model_fields["type"].default  # type: ignore[call-overload]
    if not isinstance(tag, str) or not tag:
        raise InvalidInputError(
            f"{cls.__qualname__} needs a string default for its 'type' field to be registered",
            field="type",
            value=tag,
        )
    existing = _known_types().get(tag)
    if existing is not None and existing is not cls:
        raise InvalidInputError(
            f"resource type {tag!r} is already registered by {existing.__qualname__}",
            field="type",
            value=tag,
        )
    _DEPRECATED_REGISTRY[tag] = cls
    return cls


def resource_types() -> dict[str, type[Resource]]:
    """Return core's resource types and those given to :func:`register_resource_type`, by tag
    (deprecated).

    Deprecated: ``agl.plugins.PluginManager().provided("agl_resource_types")`` is every type
    core and the plugins provide.
    """
    warnings.warn(
        "agl.resource_types is deprecated: "
        'agl.plugins.PluginManager().provided("agl_resource_types") lists the types '
        "core and the plugins provide",
        DeprecationWarning,
        stacklevel=2,
    )
    return _known_types()


def _known_types() -> dict[str, type[Resource]]:
    return {**CORE_TYPES, **_DEPRECATED_REGISTRY}


class GenericResource(Resource):
    """A resource of a type this process has not registered, kept with all its fields."""

    model_config = ConfigDict(defer_build=True, extra="allow")


class LLM(Resource):
    """An OpenAI-compatible model endpoint an agent calls.

    Attributes:
        endpoint: The base URL to give an OpenAI client (``.../v1``).
        model: The model name to ask for.
        sampling_parameters: Defaults for the request (``temperature``, ``top_p``, ...).
        api_key: The key to call ``endpoint`` with, if it needs one. Never stored: the runner
            sets it for an endpoint served by a gateway started with a token (from the
            runner's ``AGL_GATEWAY_TOKEN``), so agents pass ``api_key=llm.api_key``.
        weight_version: The version of the weights behind ``endpoint`` when this resource was
            published, for engines that do not name it on their responses (vLLM): the gateway
            records it on such a rollout's calls. Responses that name a version
            (``x-agl-weight-version``) are recorded with theirs. The weights may have moved on
            by the time a call is served, so this version is never newer than the true one:
            a staleness bound checked on it is kept, if anything too strictly.
    """

    type: Literal["llm"] = "llm"
    endpoint: str = Field(min_length=1)
    model: str = Field(min_length=1)
    sampling_parameters: dict[str, JsonValue] = Field(default_factory=dict)
    api_key: str | None = Field(default=None, exclude=True, repr=False)
    weight_version: int | None = Field(default=None, ge=0)

    def for_attempt(self, rollout_id: str, attempt_id: str, *, api_key: str | None = None) -> LLM:
        """Return this LLM with ``{rollout_id}`` and ``{attempt_id}`` in its endpoint filled in.

        An LLM served through the gateway is published with an endpoint such as
        ``http://gateway/rollout/{rollout_id}/attempt/{attempt_id}/v1``; the runner gives each
        attempt its own concrete URL, so the agent simply uses ``base_url=llm.endpoint``, and
        the gateway's ``api_key`` when one is given. Endpoints without placeholders are
        returned unchanged.
        """
        if "{rollout_id}" not in self.endpoint and "{attempt_id}" not in self.endpoint:
            return self
        endpoint = self.endpoint.replace("{rollout_id}", rollout_id).replace(
            "{attempt_id}", attempt_id
        )
        update: dict[str, Any] = {"endpoint": endpoint}
        if api_key is not None:
            update["api_key"] = api_key
        return self.model_copy(update=update)

    def openai_client(self, **kwargs: Any) -> AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client for this endpoint (:meth:`openai_client_kwargs`;
        ``kwargs`` such as ``max_retries`` or ``timeout`` go to it too), to close when done
        (``async with``)."""
        arguments = self.openai_client_kwargs(**kwargs)  # names the package when it is missing
        import openai

        return openai.AsyncOpenAI(**arguments)

    def openai_client_kwargs(self, **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments of an ``openai.AsyncOpenAI`` for this endpoint, for agent
        frameworks that build the client themselves (autogen's
        ``OpenAIChatCompletionClient(model=..., **llm.openai_client_kwargs())``): ``base_url``
        the endpoint; ``api_key`` this LLM's, else ``OPENAI_API_KEY``'s, else a placeholder
        (for servers that check none); ``http_client`` one sharing the process's TLS context;
        then ``kwargs``, which may replace any of them.

        The shared context is the point: ``AsyncOpenAI(base_url=llm.endpoint)`` parses the CA
        bundle again for its own (25-60 ms of CPU), which an agent that opens a client per
        rollout pays on every rollout, however local its model.
        """
        from agl._serving._tls import tls_context

        try:
            import openai
        except ModuleNotFoundError as error:
            raise ImportError(
                "an OpenAI client needs the openai package: pip install openai"
            ) from error
        api_key = self.api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        base: dict[str, Any] = {"base_url": self.endpoint, "api_key": api_key}
        if "http_client" not in kwargs:
            base["http_client"] = openai.DefaultAsyncHttpxClient(verify=tls_context())
        return {**base, **kwargs}


class PromptTemplate(Resource):
    """A prompt with placeholders, filled in with :meth:`format`.

    Two engines: ``"f-string"`` (Python ``str.format`` syntax: ``"Answer {question}"``) and
    ``"jinja2"`` (``"Answer {{ question }}"``, rendered in a sandbox with undefined variables
    as errors, since templates may be written by an optimizer model).
    """

    type: Literal["prompt_template"] = "prompt_template"
    template: str
    engine: Literal["f-string", "jinja2"] = "f-string"

    _jinja_environment: ClassVar[Any] = None

    def format(self, **variables: Any) -> str:
        """Return the template filled in with ``variables``.

        Raises:
            TemplateFormatError: a placeholder has no value, or the template is malformed.
        """
        if self.engine == "f-string":
            return self._format_fstring(variables)
        return self._format_jinja2(variables)

    def variables(self) -> set[str]:
        """Return the top-level placeholder names the template uses."""
        if self.engine == "f-string":
            try:
                parsed = list(string.Formatter().parse(self.template))
            except ValueError as exc:
                raise TemplateFormatError(
                    f"malformed f-string template: {exc}", field="template", value=self.template
                ) from exc
            names = set()
            for _, field_name, _, _ in parsed:
                if field_name:
                    names.add(field_name.split(".")[0].split("[")[0])
            return names
        import jinja2
        from jinja2 import meta

        try:
            parsed_jinja = self._jinja().parse(self.template)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateFormatError(
                f"malformed jinja2 template: {exc}", field="template", value=self.template
            ) from exc
        return set(meta.find_undeclared_variables(parsed_jinja))

    def _format_fstring(self, variables: dict[str, Any]) -> str:
        try:
            return self.template.format(**variables)
        except KeyError as exc:
            name = exc.args[0]
            raise TemplateFormatError(
                f"prompt template needs a value for {name!r}; got {sorted(variables)}",
                field=str(name),
            ) from exc
        except (IndexError, ValueError) as exc:
            raise TemplateFormatError(
                f"cannot format f-string template: {exc}", field="template", value=self.template
            ) from exc

    def _format_jinja2(self, variables: dict[str, Any]) -> str:
        import jinja2

        try:
            return str(self._jinja().from_string(self.template).render(**variables))
        except jinja2.UndefinedError as exc:
            raise TemplateFormatError(
                f"prompt template uses an undefined variable ({exc.message}); "
                f"got {sorted(variables)}",
                field="template",
            ) from exc
        except jinja2.TemplateError as exc:
            raise TemplateFormatError(
                f"cannot render jinja2 template: {exc}", field="template", value=self.template
            ) from exc

    @classmethod
    def _jinja(cls) -> Any:
        if cls._jinja_environment is None:
            from jinja2 import StrictUndefined
            from jinja2.sandbox import SandboxedEnvironment

            cls._jinja_environment = SandboxedEnvironment(
                undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False
            )
        return cls._jinja_environment


CORE_TYPES: Final[Mapping[str, type[Resource]]] = MappingProxyType(
    {"llm": LLM, "prompt_template": PromptTemplate}
)
"""Core's own resource types, by tag: the data model parses these without any plugin."""


def parse_resource(data: Any) -> Resource:
    """Validate ``data`` into the class its ``type`` names, if the data model knows it.

    A model instance passes through unchanged; a tag of neither core's types nor the
    deprecated registry becomes a :class:`GenericResource`.
    """
    if isinstance(data, Resource):
        return data
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError("a resource must be an object with a string 'type' field")
    cls = CORE_TYPES.get(data["type"]) or _DEPRECATED_REGISTRY.get(data["type"])
    return (cls or GenericResource).model_validate(data)


class ResourcesUpdate(BaseModel):
    """One published set of resources, as the store holds it.

    Attributes:
        resources_id: The set's id (the store picks one if the publisher did not).
        version: 1 for the first set in a store, then 2, 3, ... in publishing order.
        create_time: When the store took it (Unix seconds).
        resources: The members, by the name the agent asks for them.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid")

    resources_id: str
    version: int = Field(ge=1)
    create_time: float = Field(default_factory=time.time)
    resources: dict[str, SerializeAsAny[Resource]] = Field(
        # In JSON each member is its type's fields under a "type" tag; the schema says so
        # (the Resource base alone would forbid every field but "type").
        json_schema_extra={
            "additionalProperties": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"type": "string", "minLength": 1}},
                "additionalProperties": True,
            }
        }
    )

    @field_validator("resources", mode="before")
    @classmethod
    def _parse_members(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        parsed: dict[str, Resource] = {}
        for name, item in value.items():
            try:
                parsed[name] = parse_resource(item)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                raise ValueError(f"resource {name!r}: {where}: {first['msg']}") from None
            except ValueError as exc:
                raise ValueError(f"resource {name!r}: {exc}") from None
        return parsed


class ResourcesPage(BaseModel):
    """One page of the resource sets a store holds, newest version first."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    resources: list[ResourcesUpdate]
    total: int = Field(description="How many resource sets the store holds in all.")
    offset: int
    next_offset: int | None = Field(description="The offset of the next page, None at the end.")
