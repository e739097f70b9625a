"""Per-call capability resolution for host tools.

Owns :data:`RequirementResolver`, the shipped :func:`path_argument` resolver and
:func:`resolve_call_requirement`, which turns one call's validated arguments into
the exact (resource, action) the kernel authorizes. A tool's definition declares
its **ceiling** (``requiredCapability``): a resolved requirement outside it is the
tool misbehaving (``invalid_tool_requirement``), never extra authority. Imports no
I/O library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ContractError
from .contracts import (
    AccessContext,
    CapabilityRequirement,
    PathSegment,
    ResourceRef,
    ToolCall,
    parse_wire,
)
from .matching import within_ceiling

__all__ = ["RequirementResolver", "path_argument", "resolve_call_requirement"]

RequirementResolver = Callable[[AccessContext, ToolCall, CapabilityRequirement],
                               CapabilityRequirement]
"""Derives a call's exact requirement from its arguments, inside the tool's ceiling.

Receives the trusted context, the call and the tool's declared ceiling. Raising
:class:`~sharedos_redis.errors.ContractError` means the arguments are invalid
(``invalid_tool_arguments``); raising anything else is
``tool_requirement_resolution_failed``.
"""


def path_argument(argument: str = "path") -> RequirementResolver:
    """A resolver: the ceiling's resource, extended by the path the call names.

    ``arguments[argument]`` is a ``/``-separated string or an array of segments,
    relative to the ceiling's path. Every segment must be a valid path segment
    (no ``.``/``..``, separators or control characters), so a model cannot climb
    out of the ceiling; the action is the ceiling's.
    """

    def resolve(context: AccessContext, call: ToolCall,
                ceiling: CapabilityRequirement) -> CapabilityRequirement:
        value = call.arguments.get(argument)
        segments: Any = value.split("/") if isinstance(value, str) else value
        if not isinstance(segments, list) or not segments:
            raise ContractError("ToolCall.arguments", [{
                "loc": ("arguments", argument), "type": "path", "msg": "must name a path"}])
        checked: list[str] = [parse_wire(PathSegment, segment) for segment in segments]
        resource = ResourceRef(namespace=ceiling.resource.namespace,
                               path=(*ceiling.resource.path, *checked),
                               owner=ceiling.resource.owner)
        return CapabilityRequirement(resource=resource, action=ceiling.action)

    return resolve


def resolve_call_requirement(resolve: RequirementResolver, context: AccessContext,
                             call: ToolCall, ceiling: CapabilityRequirement,
                             ) -> CapabilityRequirement | str:
    """The call's exact requirement, or the failure code.

    Codes: ``invalid_tool_arguments`` (the resolver raised ContractError),
    ``tool_requirement_resolution_failed`` (it raised anything else) and
    ``invalid_tool_requirement`` (not a valid requirement, or outside the
    ceiling). A requirement naming another owner is returned as is: the
    authorizer denies it ``invalid_request`` (a denial, not a tool fault).
    """
    try:
        resolved: object = resolve(context, call, ceiling)
    except ContractError:
        return "invalid_tool_arguments"
    except Exception:  # the resolver's own fault; its text never reaches the caller
        return "tool_requirement_resolution_failed"
    if not isinstance(resolved, CapabilityRequirement):
        return "invalid_tool_requirement"
    try:
        checked = CapabilityRequirement.from_wire(resolved.to_wire())
    except Exception:  # a model_construct'd requirement may fail anywhere
        return "invalid_tool_requirement"
    owner = checked.resource.owner
    if owner is not None and owner != context.owner:
        return checked
    if not within_ceiling(checked, ceiling, context.owner):
        return "invalid_tool_requirement"
    return checked
