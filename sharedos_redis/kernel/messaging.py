"""Messaging: host-authored ``send_message`` and the built-in ``messages.request`` tool.

Owns the built-in requirements (``sharedos.messaging``/send,
``sharedos.execution``/invoke), the ``messages.request`` definition and
:class:`MessageService`, which the :class:`~sharedos_redis.kernel.kernel.Kernel`
delegates to. A message carries data and one host-bound purpose, never
authority: every trusted envelope field comes from the :class:`AccessContext`
and the host's id factory, never from the model. Imports no I/O library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from ..errors import ContractError, RequestOutcomeError
from .audit import audit_event
from .authorizer import CapabilityAuthorizer
from .contracts import (
    AccessContext,
    Address,
    AgentAddress,
    AuditEvent,
    AuditOutcome,
    CapabilityRequirement,
    DeliveryAccepted,
    DeliveryDelivered,
    DeliveryDenied,
    DeliveryFailed,
    MessageDeliveryResult,
    MessageEnvelope,
    MessageRequestArguments,
    ToolCall,
    ToolDefinition,
    ToolResult,
    format_timestamp,
)
from .outbox import EffectAudit, effect_audit
from .ports import AuditSink, MessageRequestRouter, MessageTransport
from .replies import check_receipt, check_reply
from .tools import (
    ToolOutcome,
    protocol_error,
    record_outcome,
    tool_denied,
    tool_failed,
    tool_succeeded,
)
from .usage import UseReservation, reserved_use

__all__ = [
    "EXECUTION_NAMESPACE",
    "MESSAGES_REQUEST",
    "MESSAGES_REQUEST_TOOL",
    "MESSAGES_TOOL_NAMESPACE",
    "MESSAGING_NAMESPACE",
    "MessageService",
    "invoke_requirement",
    "messaging_requirement",
]

MESSAGING_NAMESPACE: Final = "sharedos.messaging"
EXECUTION_NAMESPACE: Final = "sharedos.execution"
MESSAGES_TOOL_NAMESPACE: Final = "messages"
MESSAGES_REQUEST: Final = "messages.request"

_RECIPIENT_FIELDS = (("agent", "agentId"), ("human", "userId"), ("group", "conversationId"),
                     ("service", "serviceId"))


def _recipient_schema(kind: str, field: str) -> dict[str, object]:
    return {"type": "object", "additionalProperties": False, "required": ["kind", field],
            "properties": {"kind": {"const": kind},
                           field: {"type": "string", "minLength": 1, "maxLength": 256}}}


MESSAGES_REQUEST_TOOL: Final = ToolDefinition.from_wire({
    "name": MESSAGES_REQUEST,
    "description": "Send a request message to one recipient and return the payload of its reply.",
    "namespace": MESSAGES_TOOL_NAMESPACE,
    "source": "sharedos",
    "readWrite": "write",
    "inputSchema": {
        "type": "object",
        "properties": {
            "recipient": {"description": "Who should answer.", "oneOf": [
                _recipient_schema(kind, field) for kind, field in _RECIPIENT_FIELDS]},
            "payload": {"description": "Any JSON value."},
        },
        "required": ["recipient", "payload"],
        "additionalProperties": False,
    },
    # The real requirement is recipient-scoped (see messaging_requirement); this
    # placeholder only names the capability family for catalogs.
    "requiredCapability": {"resource": {"namespace": MESSAGING_NAMESPACE, "path": []},
                           "action": "send"},
    "annotations": {"readOnly": False, "destructive": False, "idempotent": False},
})
"""The ``messages.request`` tool (namespace ``messages``, readWrite ``write``)."""

_ACCEPTED: Final = (DeliveryAccepted, DeliveryDelivered)


_SCOPED_CAP: Final = 4096
_SCOPED: dict[tuple[object, ...], CapabilityRequirement] = {}
"""Recipient-scoped requirements built lately (frozen, validated): a pure function of
the namespace, the action, the path and the owner, so a hit equals a fresh build."""


def _scoped_requirement(context: AccessContext, namespace: str, path: tuple[str, str],
                        action: str) -> CapabilityRequirement:
    """``{namespace, path, owner=context.owner}`` with ``action``, validated like wire input.

    Raises:
        ContractError: a path segment is invalid (e.g. an id holding ``/``).
    """
    key: tuple[object, ...] | None = None
    if type(context) is AccessContext and context.is_validated:  # its owner is a valid address
        key = (namespace, action, *path, context.owner.kind, context.owner.id)
        try:
            found = _SCOPED.get(key)
        except TypeError:  # an unhashable path segment: invalid, decided below
            key, found = None, None
        if found is not None:
            return found
    requirement = CapabilityRequirement.from_wire({
        "resource": {"namespace": namespace, "path": list(path),
                     "owner": context.owner.to_wire()},
        "action": action,
    })
    if key is not None:
        if len(_SCOPED) >= _SCOPED_CAP:
            _SCOPED.clear()  # bounded; a forgotten requirement is only built again
        _SCOPED[key] = requirement
    return requirement


def messaging_requirement(context: AccessContext, recipient: Address) -> CapabilityRequirement:
    """``{sharedos.messaging, [kind, id], owner=context.owner}`` with action ``send``.

    Raises:
        ContractError: the recipient id cannot be a path segment (e.g. it holds ``/``).
    """
    return _scoped_requirement(context, MESSAGING_NAMESPACE, (recipient.kind, recipient.id),
                               "send")


def invoke_requirement(context: AccessContext, agent: AgentAddress) -> CapabilityRequirement:
    """``{sharedos.execution, ["agent", id], owner=context.owner}`` with action ``invoke``.

    Raises:
        ContractError: the agent id cannot be a path segment.
    """
    return _scoped_requirement(context, EXECUTION_NAMESPACE, ("agent", agent.agent_id), "invoke")


def _delivery_outcome(receipt: MessageDeliveryResult) -> AuditOutcome:
    if isinstance(receipt, _ACCEPTED):
        return "succeeded"
    return "denied" if isinstance(receipt, DeliveryDenied) else "failed"


class MessageService:
    """Sends host-authored messages and runs the ``messages.request`` tool.

    Args:
        authorizer: decides and consumes the recipient-scoped send requirement.
        audit: where ``message.sent`` records go.
        transport: the already-authorized delivery path, if configured.
        router: resolves replies to accepted requests, if configured.
        message_ids: the trusted id factory for request envelopes.
        clock: the host clock (timestamps of envelopes, receipts, results).
    """

    def __init__(self, *, authorizer: CapabilityAuthorizer, audit: AuditSink,
                 transport: MessageTransport | None, router: MessageRequestRouter | None,
                 message_ids: Callable[[], str], clock: Callable[[], datetime]) -> None:
        self._authorizer, self._audit = authorizer, audit
        self._transport, self._router = transport, router
        self._message_ids, self._clock = message_ids, clock

    @property
    def request_configured(self) -> bool:
        """True when both a transport and a router are configured."""
        return self._transport is not None and self._router is not None

    async def request_unavailable(self, context: AccessContext) -> str | None:
        """Why ``messages.request`` is unusable in ``context`` (a cause), or None.

        Discovery only: never consumes.
        """
        if not self.request_configured:
            return "not_configured"
        if MESSAGES_TOOL_NAMESPACE not in context.enabled_tool_namespaces:
            return "namespace_disabled"
        if not await self._authorizer.can_reach(context, MESSAGING_NAMESPACE, "send"):
            return "not_discoverable"
        return None

    def _now(self) -> str:
        return format_timestamp(self._clock())

    async def send(self, context: AccessContext,
                   envelope: MessageEnvelope | Mapping[str, Any]) -> MessageDeliveryResult:
        """Deliver a host-authored envelope after consuming the send requirement once.

        Raises:
            ContractError: the envelope is malformed (nothing audited or delivered).
        """
        # An instance is re-parsed too: one built with model_construct skipped validation.
        envelope = MessageEnvelope.from_wire(
            envelope.to_wire() if isinstance(envelope, MessageEnvelope) else envelope)
        code = self._context_refusal(context, envelope)
        reservation = None
        if code is None:  # authorization decides first, whatever the host configured
            code, reservation = await self._consume_send(context, envelope)
        if code is not None:
            receipt = DeliveryDenied(message_id=envelope.id, timestamp=self._now(),
                                     error=protocol_error(code))
            await self._audit_sent(context, envelope, receipt)
            return receipt
        return await self._deliver(context, envelope, reservation)

    @staticmethod
    def _context_refusal(context: AccessContext, envelope: MessageEnvelope) -> str | None:
        if (envelope.sender.to_wire() != context.actor.to_wire()
                or envelope.purpose != context.purpose or envelope.trace_id != context.trace_id):
            return "message_context_mismatch"
        return None

    async def _consume_send(self, context: AccessContext, envelope: MessageEnvelope,
                            requirement: CapabilityRequirement | None = None,
                            ) -> tuple[str | None, UseReservation | None]:
        """Consume the recipient-scoped send requirement (``requirement``, when the caller
        built it already): (refusal code, reserved use)."""
        if requirement is None:
            try:
                requirement = messaging_requirement(context, envelope.receiver)
            except ContractError:
                return "invalid_request", None
        decision = await self._authorizer.consume(context, requirement, operation_id=envelope.id)
        if not decision.allowed:
            return decision.reason_code, None
        reserved = decision.metadata is not None and decision.matched_grant_id is not None
        return None, (UseReservation(context.namespace_id, decision.matched_grant_id)
                      if reserved and decision.matched_grant_id else None)

    async def _deliver(self, context: AccessContext, envelope: MessageEnvelope,
                       reservation: UseReservation | None) -> MessageDeliveryResult:
        """The already-authorized path: hand ``envelope`` to the transport, audit the receipt.

        A refusal before admission (a ``denied`` receipt, or no transport) gives back
        the use the decision reserved; a failure after which the request may have
        been accepted keeps it spent.
        """
        if self._transport is None:
            receipt: MessageDeliveryResult = DeliveryFailed(
                message_id=envelope.id, timestamp=self._now(),
                error=protocol_error("message_transport_not_configured"))
        else:
            outbox = effect_audit.get()
            if outbox is not None:  # written by the accept itself, if it accepts
                outbox.on_accept.append(self._sent_event(context, envelope, None))
            token = reserved_use.set(reservation)
            try:
                raw: object = await self._transport.deliver(context, envelope)
            except Exception:  # its text never reaches the caller; cancellation propagates
                receipt = DeliveryFailed(message_id=envelope.id, timestamp=self._now(),
                                         error=protocol_error("message_delivery_failed"))
            else:
                receipt = check_receipt(raw, envelope, self._now())
            finally:
                reserved_use.reset(token)
                await self._write_untaken()
        refused = isinstance(receipt, DeliveryDenied) or (
            isinstance(receipt, DeliveryFailed)
            and receipt.error.code == "message_transport_not_configured")
        if reservation is not None and refused and isinstance(receipt,
                                                              DeliveryDenied | DeliveryFailed):
            await self._authorizer.release_use(context, reservation, reason=receipt.error.code,
                                               operation_id=envelope.id)
        outbox = effect_audit.get()
        if outbox is None or not outbox.on_accept_written:
            await self._audit_sent(context, envelope, receipt)
        return receipt

    async def _write_untaken(self) -> None:
        """Write the before-effect records the transport did not take (kernel.outbox)."""
        outbox = effect_audit.get()
        if outbox is not None:
            outbox.on_accept.clear()  # only ever written with the accept
        while outbox is not None and outbox.events:
            await record_outcome(self._audit, outbox.events.pop(0))

    def _sent_event(self, context: AccessContext, envelope: MessageEnvelope,
                    receipt: MessageDeliveryResult | None) -> AuditEvent:
        """The ``message.sent`` record of ``receipt`` (None: an accepted one)."""
        reason = getattr(receipt, "error", None)
        return audit_event(
            context, "message.sent", "succeeded" if receipt is None else _delivery_outcome(receipt),
            at=self._now(), message_id=envelope.id, receiver=envelope.receiver,
            action="send", reason=reason.code if reason is not None else None)

    async def _audit_sent(self, context: AccessContext, envelope: MessageEnvelope,
                          receipt: MessageDeliveryResult) -> None:
        await record_outcome(self._audit, self._sent_event(context, envelope, receipt))

    async def request(self, context: AccessContext, call: ToolCall) -> ToolOutcome:
        """Run ``messages.request`` for ``call`` (its traceId was already checked).

        Returns:
            The tool result and its audit fields; never raises for a refusal.
        """
        invalid: ContractError | None = None
        try:
            arguments = MessageRequestArguments.from_wire(call.arguments)
            recipient = arguments.recipient_address()
            requirement = messaging_requirement(context, recipient)  # built once per call
        except ContractError as exc:
            invalid = exc
        else:
            # Drawn before the first await: a turn's well-formed calls get their ids in the
            # order they were started, whatever their I/O (a re-run names the same requests).
            message_id = self._message_ids()
        cause = await self.request_unavailable(context)
        if cause is not None:
            return ToolOutcome(tool_denied(call, self._now(), "tool_unavailable"), cause=cause)
        if invalid is not None:
            details = {"errors": [{"loc": [str(p) for p in e.get("loc", ())],
                                   "type": str(e.get("type", ""))} for e in invalid.errors[:8]]}
            return ToolOutcome(tool_failed(call, self._now(), "invalid_tool_arguments", details),
                               cause="invalid_arguments")
        envelope = self._trusted_envelope(context, recipient, arguments, message_id)
        return await self._send_request(context, call, envelope, requirement)

    def _trusted_envelope(self, context: AccessContext, recipient: Address,
                          arguments: MessageRequestArguments, message_id: str) -> MessageEnvelope:
        """The request envelope: every field but receiver and payload is the host's."""
        return MessageEnvelope.from_wire({
            "version": "2", "id": message_id, "sender": context.actor.to_wire(),
            "receiver": recipient.to_wire(), "purpose": context.purpose,
            "payload": arguments.payload, "traceId": context.trace_id,
            "createdAt": self._now(),
        })

    async def _send_request(self, context: AccessContext, call: ToolCall,
                            envelope: MessageEnvelope,
                            requirement: CapabilityRequirement) -> ToolOutcome:
        result, cause = await self._request_reply(context, call, envelope, requirement)
        return ToolOutcome(result, cause=cause, message_id=envelope.id,
                           receiver=envelope.receiver)

    async def _request_reply(self, context: AccessContext, call: ToolCall,
                             envelope: MessageEnvelope, requirement: CapabilityRequirement,
                             ) -> tuple[ToolResult, str | None]:
        """Steps 5-9 of SPEC §3: consume once, deliver, resolve, validate the reply."""
        carried = bool(getattr(self._transport, "writes_effect_audit", False))
        token = effect_audit.set(EffectAudit() if carried else None)
        try:
            code, reservation = await self._consume_send(context, envelope, requirement)
            if code is not None:
                denied = DeliveryDenied(message_id=envelope.id, timestamp=self._now(),
                                        error=protocol_error(code))
                await self._audit_sent(context, envelope, denied)
                return tool_denied(call, self._now(), code), None
            receipt = await self._deliver(context, envelope, reservation)
        finally:
            effect_audit.reset(token)
        if isinstance(receipt, DeliveryDenied | DeliveryFailed):
            details = {"status": receipt.status, "code": receipt.error.code}
            return (tool_failed(call, self._now(), "message_request_not_accepted", details),
                    receipt.error.code)
        router = self._router
        if router is None:  # request_unavailable() already refused this; kept for the types
            return tool_denied(call, self._now(), "tool_unavailable"), "not_configured"
        try:
            raw_reply: object = await router.resolve_reply(context, envelope, receipt)
        except RequestOutcomeError as exc:
            return tool_failed(call, self._now(), "message_reply_resolution_failed",
                               {"outcome": exc.code}), exc.code
        except Exception as exc:  # its text never reaches the caller; cancellation propagates
            return (tool_failed(call, self._now(), "message_reply_resolution_failed"),
                    type(exc).__name__)
        reply, problem = check_reply(envelope, raw_reply)
        if reply is None:
            return tool_failed(call, self._now(), "invalid_message_reply"), problem
        return tool_succeeded(call, self._now(), reply.payload,
                              {"messageId": envelope.id, "replyId": reply.id}), None

