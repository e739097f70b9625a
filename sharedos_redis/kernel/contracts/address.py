"""Addresses: who sends, receives, acts, issues and owns (a union on ``kind``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from ._base import Contract, Identifier, encodable

__all__ = [
    "Address",
    "AgentAddress",
    "GroupAddress",
    "HumanAddress",
    "RecipientAddress",
    "ServiceAddress",
    "agent",
    "group",
    "human",
    "service",
]


class HumanAddress(Contract):
    """A person, ``{"kind": "human", "userId": ...}``."""

    kind: Literal["human"] = "human"
    user_id: Identifier

    @property
    def id(self) -> str:
        """The identifier inside the address."""
        return self.user_id


class AgentAddress(Contract):
    """An agent, ``{"kind": "agent", "agentId": ...}``."""

    kind: Literal["agent"] = "agent"
    agent_id: Identifier

    @property
    def id(self) -> str:
        """The identifier inside the address."""
        return self.agent_id


class GroupAddress(Contract):
    """A conversation, ``{"kind": "group", "conversationId": ...}``."""

    kind: Literal["group"] = "group"
    conversation_id: Identifier

    @property
    def id(self) -> str:
        """The identifier inside the address."""
        return self.conversation_id


class ServiceAddress(Contract):
    """A service, ``{"kind": "service", "serviceId": ...}``."""

    kind: Literal["service"] = "service"
    service_id: Identifier

    @property
    def id(self) -> str:
        """The identifier inside the address."""
        return self.service_id


Address = Annotated[
    HumanAddress | AgentAddress | GroupAddress | ServiceAddress, Field(discriminator="kind")
]
"""Any address; two addresses are equal when their canonical JSON is equal."""


def _recipient_id(value: str) -> str:
    if not value or value != value.strip():
        raise PydanticCustomError(
            "recipient_id", "recipient identifiers must not be empty or padded with whitespace"
        )
    if not encodable(value):
        raise PydanticCustomError("recipient_id", "recipient identifiers must be valid Unicode")
    if len(value) > 256:
        raise PydanticCustomError(
            "recipient_id", "recipient identifiers have at most 256 code points"
        )
    return value


_RecipientId = Annotated[str, AfterValidator(_recipient_id)]


class _HumanRecipient(Contract):
    kind: Literal["human"]
    user_id: _RecipientId


class _AgentRecipient(Contract):
    kind: Literal["agent"]
    agent_id: _RecipientId


class _GroupRecipient(Contract):
    kind: Literal["group"]
    conversation_id: _RecipientId


class _ServiceRecipient(Contract):
    kind: Literal["service"]
    service_id: _RecipientId


RecipientAddress = Annotated[
    _HumanRecipient | _AgentRecipient | _GroupRecipient | _ServiceRecipient,
    Field(discriminator="kind"),
]
"""A model-authored recipient: identifiers are NOT trimmed; padding is rejected."""


def human(user_id: str) -> HumanAddress:
    """``{"kind": "human", "userId": user_id}``."""
    return HumanAddress(user_id=user_id)


def agent(agent_id: str) -> AgentAddress:
    """``{"kind": "agent", "agentId": agent_id}``."""
    return AgentAddress(agent_id=agent_id)


def group(conversation_id: str) -> GroupAddress:
    """``{"kind": "group", "conversationId": conversation_id}``."""
    return GroupAddress(conversation_id=conversation_id)


def service(service_id: str) -> ServiceAddress:
    """``{"kind": "service", "serviceId": service_id}``."""
    return ServiceAddress(service_id=service_id)
