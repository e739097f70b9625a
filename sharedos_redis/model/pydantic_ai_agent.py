"""A ``pydantic_ai.Agent`` as a turn's model loop (install the ``pydantic-ai`` extra).

Owns :class:`PydanticAIRuntime`. The agent keeps its own model, instructions
and output type; the adapter adds, per turn: the turn's offered tools as
pydantic-ai tools (provider-safe aliases, the tools' own JSON Schemas), each of
which calls ``host.call`` so every call is counted, authorized and audited by
the envelope and its result — refusals included — is the tool's return value;
a wrapper model that declares one step per model request, so the envelope's
step ceiling applies exactly as in :class:`~sharedos_redis.model.StandardRuntime`;
and usage limits mapped from the turn's: ``request_limit = maxSteps + 2`` (the
same bound on model calls), no ``tool_calls_limit`` (the envelope refuses each
call past the ceiling as a result instead). Endings: the agent's output (a
pydantic model is dumped as JSON); a model that will not stop past that bound,
or that misbehaves past the agent's retries, fails the turn
``invalid_driver_decision``; a provider error ``driver_failed``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..errors import TurnFailure
from ..kernel.contracts import JsonValue
from ..kernel.turn import RuntimeHost, TurnRequest
from .names import ToolNameCodec
from .runtime import default_prompt, render_result

if TYPE_CHECKING:
    from pydantic_ai import Agent

__all__ = ["PydanticAIRuntime"]


def _tool_function(host: RuntimeHost, name: str) -> Callable[..., Awaitable[Any]]:
    async def call(**arguments: Any) -> Any:
        return render_result(await host.call(name, arguments))

    return call


class PydanticAIRuntime:
    """A :class:`~sharedos_redis.kernel.turn.RuntimePlugin` that runs a pydantic-ai agent.

    Args:
        agent: the agent (its model, instructions and output type are its own).
        prompt: how the turn's message becomes the user prompt.
    """

    def __init__(self, agent: Agent[Any, Any], *,
                 prompt: Callable[[TurnRequest], str] = default_prompt) -> None:
        self.agent, self.prompt = agent, prompt

    async def run(self, turn: TurnRequest, host: RuntimeHost) -> JsonValue:
        """Run the agent for this turn with the turn's tools and limits."""
        from pydantic_ai import Tool, exceptions
        from pydantic_ai.toolsets import FunctionToolset
        from pydantic_ai.usage import UsageLimits

        codec = ToolNameCodec(tool.name for tool in turn.tools)
        tools = [Tool.from_schema(_tool_function(host, t.name), name=codec.to_wire(t.name),
                                  description=t.description, json_schema=dict(t.input_schema),
                                  sequential=True) for t in turn.tools]
        limits = UsageLimits(request_limit=host.limits.max_steps + 2, tool_calls_limit=None)
        try:
            result = await self.agent.run(
                self.prompt(turn), toolsets=[FunctionToolset(tools)], usage_limits=limits,
                model=_step_declaring(self.agent, host),
                instructions=f"Purpose of this turn: {turn.purpose}.")
        except (exceptions.UsageLimitExceeded, exceptions.UnexpectedModelBehavior) as exc:
            raise TurnFailure("invalid_driver_decision", type(exc).__name__) from exc
        except exceptions.AgentRunError as exc:
            raise TurnFailure("driver_failed", type(exc).__name__) from exc
        output = result.output
        return output.model_dump(mode="json") if isinstance(output, BaseModel) else output


def _step_declaring(agent: Agent[Any, Any], host: RuntimeHost) -> Any:
    """The agent's model, wrapped so each model request declares the next step."""
    from pydantic_ai.models import infer_model
    from pydantic_ai.models.wrapper import WrapperModel

    class StepDeclaring(WrapperModel):
        async def request(self, *args: Any, **kwargs: Any) -> Any:
            host.declare_step()
            return await super().request(*args, **kwargs)

    if agent.model is None:
        raise TurnFailure("driver_failed", "the agent has no model")
    return StepDeclaring(infer_model(agent.model))
