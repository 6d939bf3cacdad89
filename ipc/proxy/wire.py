"""The two wire formats: read a request body without decoding more of it than needed, build the
upstream body with substituted messages, and errors in each API's own format.

A body is decoded as a map of raw JSON values (``msgspec.Raw``: views of the original bytes) and
its ``messages`` as a list of raw messages, so a rebuilt body keeps every byte of every value it
does not substitute. Only messages the proxy has not seen before are decoded fully."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Api = Literal["openai", "anthropic"]
PATHS: dict[str, Api] = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()
_ENC = msgspec.json.Encoder()


class WireError(ValueError):
    """A request the proxy cannot read: answered with ``status`` in the API's error format."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Body(msgspec.Struct):
    """What the proxy reads of a chat request, in one pass; every value stays raw JSON."""

    messages: list[msgspec.Raw]
    model: msgspec.Raw = msgspec.Raw(b'""')
    stream: msgspec.Raw = msgspec.Raw(b"false")
    system: msgspec.Raw = msgspec.Raw(b"null")


_BODY = msgspec.json.Decoder(_Body)


@dataclass(slots=True)
class ChatRequest:
    api: Api
    body: bytes  # as it came
    messages: list[msgspec.Raw]  # each message as raw JSON (views of ``body``)
    model: str
    stream: bool
    system: msgspec.Raw | None  # Anthropic's top-level system prompt, raw; None for OpenAI


def parse(api: Api, body: bytes) -> ChatRequest:
    try:
        b = _BODY.decode(body)
        model, stream = _ANY.decode(b.model), _ANY.decode(b.stream)
    except msgspec.ValidationError as exc:
        raise WireError(400, f"invalid request body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise WireError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(model, str):
        raise WireError(400, "model must be a string")
    system = b.system if api == "anthropic" and bytes(b.system) != b"null" else None
    return ChatRequest(api, body, b.messages, model, stream is True, system)


def decode_message(raw: msgspec.Raw | bytes) -> Any:
    return _ANY.decode(raw)


def encode(obj: Any) -> bytes:
    return _ENC.encode(obj)


def rebuild(req: ChatRequest, messages: list[msgspec.Raw | bytes]) -> bytes:
    """The body with ``messages`` in place of the original ones; every other field byte-identical."""
    parts = [bytes(m) for m in messages]
    top = _TOP.decode(req.body)  # the top-level fields as raw JSON, in order
    top["messages"] = msgspec.Raw(b"[" + b",".join(parts) + b"]")
    return _ENC.encode(top)


def digest_message(api: Api, text: str) -> bytes:
    """A digest as a user message (deterministic bytes: the same digest always encodes the same)."""
    if api == "openai":
        return _ENC.encode({"role": "user", "content": text})
    return _ENC.encode({"role": "user", "content": [{"type": "text", "text": text}]})


# --- errors in each API's format ------------------------------------------------------------------

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
}


def error_body(api: Api, status: int, message: str) -> bytes:
    kind = _TYPES.get(status, "api_error")
    if api == "anthropic":
        return _ENC.encode({"type": "error", "error": {"type": kind, "message": message}})
    return _ENC.encode({"error": {"message": message, "type": kind, "param": None, "code": None}})


def error_event(api: Api, message: str) -> bytes:
    """An SSE event that ends a stream the upstream broke off, as each API reports stream errors."""
    body = error_body(api, 502, message)
    if api == "anthropic":
        return b"event: error\ndata: " + body + b"\n\n"
    return b"data: " + body + b"\n\n"


def api_of(path: str, headers: Any) -> Api:
    """Which API a request speaks (for paths other than the two chat endpoints: by its headers)."""
    known = PATHS.get(path.rstrip("/"))
    if known is not None:
        return known
    if "anthropic-version" in headers or "x-api-key" in headers or path.startswith("/v1/messages"):
        return "anthropic"
    return "openai"
