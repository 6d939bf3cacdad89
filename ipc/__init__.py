"""compactd's wire protocol and the client library agents embed (no daemon code, no model):
``AgentLink`` (asyncio), ``SyncAgentLink`` (threads), ``Transcript`` (OpenAI / Anthropic message
lists), ``Section`` and ``Context``. The protocol itself: docs/PROTOCOL.md."""

from ipc.adapters import AdapterError, Transcript
from ipc.client import AgentLink, LinkError
from ipc.context import Context, ContextError
from ipc.protocol import PROTOCOL_VERSION, Proposal, ProtocolError
from ipc.sections import Section, SectionError
from ipc.sync import SyncAgentLink

__all__ = [
    "PROTOCOL_VERSION",
    "AdapterError",
    "AgentLink",
    "Context",
    "ContextError",
    "LinkError",
    "Proposal",
    "ProtocolError",
    "Section",
    "SectionError",
    "SyncAgentLink",
    "Transcript",
]
