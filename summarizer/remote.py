"""The remote inference backend: any OpenAI-compatible server does the model's work over HTTP.

``[model] backend = "openai"`` sends gists to ``POST {url}/chat/completions`` (greedy, the prompt's
ChatML turns as messages) and scoring to ``POST {url}/completions`` with ``echo`` and ``logprobs``
(the server returns the prompt's token log-probabilities: llama.cpp's Python server, vLLM). Each
call has a deadline (the job's); failures are retried with exponential backoff while the deadline
allows (connection errors, timeouts, 408/429/5xx, a body that is not the JSON asked for), other
4xx are not retried. A call that still fails runs on the local engine instead (``fallback``), if
there is one, else raises ModelError and the Summarizer writes its deterministic digest: nothing is
lost, and no agent waits on a remote server (jobs run off the agents' path; the HTTP client is
async). After a failure the remote is skipped for a backoff period (``degraded_reason`` says why;
``stats()`` counts requests, retries, failures and fallbacks) and tried again after it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import httpx

from summarizer.backend import Backend
from summarizer.engine import STOP_TEXT, EngineSettings, GenerateOptions, Generation, LlamaEngine
from summarizer.gguf import ModelError, ScoringUnsupported
from summarizer.logprobs import PieceScore, Scoring

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
SKIP_AFTER_FAILURE_S = (5.0, 15.0, 60.0, 300.0)  # remote skipped after 1, 2, 3, 4+ failed calls
_DATA = "\x00compactd-data\x00"  # placeholder: untrusted data is put into a message after parsing


class RemoteError(RuntimeError):
    """The remote server did not give a usable answer; the message says what went wrong."""


@dataclass(frozen=True)
class RemoteSettings:
    url: str  # the API base, e.g. "http://gpu-box:8000/v1"
    model: str = ""  # the server's model name ("" = the server's default)
    api_key_file: str = ""  # a file holding the bearer token ("" = none)
    connect_timeout_s: float = 2.0
    timeout_s: float = 60.0  # one request, at most (the job's deadline may cut it shorter)
    retries: int = 2  # extra attempts after a retryable failure
    backoff_s: float = 0.25  # first retry delay; doubled each time, with jitter


def read_api_key(path: str) -> str:
    if not path:
        return ""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ModelError(f"api_key_file unreadable: {path}: {exc.strerror}") from exc


def chat_messages(prefix: str, data: str, suffix: str) -> tuple[list[dict[str, str]], str]:
    """The ChatML prompt ``prefix + data + suffix`` as chat messages, and the assistant's prefilled
    start (text the reply continues, "" if none). Only the trusted prefix and suffix are parsed;
    ``data`` goes into its message afterwards, so it cannot open a turn."""
    messages: list[dict[str, str]] = []
    lead = ""
    for part in (prefix + _DATA + suffix).split("<|im_start|>"):
        if not part:
            continue
        role, _, body = part.partition("\n")
        closed = "<|im_end|>" in body
        content = body.split("<|im_end|>", 1)[0].replace(_DATA, data)
        if role not in ("system", "user", "assistant") or not body:
            role, content, closed = "user", part.replace(_DATA, data), True
        if role == "assistant" and not closed:
            lead = content
        else:
            messages.append({"role": role, "content": content})
    return messages, lead


def piece_scores(body: Any, data: str, pieces: Sequence[str]) -> tuple[PieceScore, ...]:
    """Map echoed prompt token log-probabilities to the pieces ``data`` is made of."""
    try:
        lp = body["choices"][0]["logprobs"]
        tokens = [str(t) for t in lp["tokens"]]
        values = [None if v is None else float(v) for v in lp["token_logprobs"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise RemoteError(f"no prompt log-probabilities in the answer ({type(exc).__name__}: {exc})") from exc
    if len(tokens) != len(values):
        raise RemoteError("tokens and token_logprobs differ in length")
    echoed = "".join(tokens)
    start = echoed.rfind(data) if data else -1
    if start < 0:
        raise RemoteError("the echoed prompt does not contain the data (server tokens do not round-trip)")
    bounds: list[int] = []
    at = start
    for p in pieces:
        at += len(p)
        bounds.append(at)
    sums = [0.0] * len(pieces)
    counts = [0] * len(pieces)
    pos, k = 0, 0
    for tok, v in zip(tokens, values, strict=True):
        begin, pos = pos, pos + len(tok)
        if begin < start or begin >= bounds[-1] or not tok:
            continue
        while bounds[k] <= begin:
            k += 1
        sums[k] += v or 0.0
        counts[k] += 1
    return tuple(PieceScore(s, n) for s, n in zip(sums, counts, strict=True))


class RemoteEngine:
    """Backend over an OpenAI-compatible server, with the local engine (if any) as its fallback."""

    def __init__(
        self, remote: RemoteSettings, fallback: LlamaEngine | None, settings: EngineSettings | None = None
    ) -> None:
        self.remote = remote
        self.fallback = fallback
        self.settings = settings or (fallback.settings if fallback else EngineSettings(path=""))
        key = read_api_key(remote.api_key_file)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = httpx.Timeout(remote.timeout_s, connect=remote.connect_timeout_s)
        self._http = httpx.AsyncClient(
            base_url=remote.url.rstrip("/") + "/", headers=headers, timeout=timeout
        )
        self.degraded_reason = ""
        # why this server cannot score ("" = it can): its answers carry no prompt log-probabilities;
        # not a failure (gists still go to it), scoring runs locally from then on
        self.scoring_unsupported = ""
        self.consecutive_failures = 0
        self._skip_until = 0.0
        self.counts = {"requests": 0, "retries": 0, "failures": 0, "fallbacks": 0, "skipped": 0}

    @property
    def path(self) -> str:
        return self.remote.url

    @property
    def n_threads(self) -> int:
        return self.fallback.n_threads if self.fallback else 0

    # --- the Backend protocol --------------------------------------------------------------------
    async def generate(
        self, prefix: str, data: str, suffix: str, **opts: Unpack[GenerateOptions]
    ) -> Generation:
        deadline, remote_deadline = self._deadlines(opts.get("timeout_s"))
        limit = opts.get("max_tokens") or self.settings.max_tokens
        stop = opts.get("stop", ())
        messages, lead = chat_messages(prefix, data, suffix)
        payload = {
            "messages": messages,
            "max_tokens": limit,
            "temperature": 0.0,
            "stop": list((*stop, *STOP_TEXT))[:4],
        }
        if self.remote.model:
            payload["model"] = self.remote.model
        t0 = time.perf_counter()
        failure: RemoteError | None
        try:
            body = await self._call("chat/completions", payload, remote_deadline)
            choice = body["choices"][0]
            text = str(choice["message"]["content"] or "")
            reason = str(choice.get("finish_reason") or "stop")
            usage = body.get("usage") or {}
        except (KeyError, IndexError, TypeError) as exc:  # JSON, but not a chat completion
            failure = self._failed(RemoteError(f"malformed chat completion: {exc!r}"))
        except RemoteError as exc:
            failure = exc
        else:
            failure = None
        if failure is not None:
            if self.fallback is None:
                raise ModelError(f"remote model failed and no local model: {failure}") from failure
            self.counts["fallbacks"] += 1
            opts["timeout_s"] = _left(deadline)  # what is left of this call's deadline
            return await self.fallback.generate(prefix, data, suffix, **opts)
        text = text.strip()
        if lead and text.startswith(lead.strip()):  # the reply repeats the prefilled start
            text = text[len(lead.strip()) :]
        seconds = time.perf_counter() - t0
        return Generation(
            text=text.strip(),
            prompt_tokens=int(usage.get("prompt_tokens", 0) or 0),
            reused_tokens=0,
            prefix_tokens=0,
            completion_tokens=int(usage.get("completion_tokens", 0) or 0),
            prefill_s=0.0,
            decode_s=seconds,
            stopped="length" if reason == "length" else "stop",
        )

    async def score(self, prefix: str, pieces: Sequence[str], timeout_s: float | None = None) -> Scoring:
        deadline, remote_deadline = self._deadlines(timeout_s)
        data = "".join(pieces)
        payload: dict[str, Any] = {"prompt": prefix + data, "max_tokens": 1, "echo": True, "logprobs": 0}
        payload["temperature"] = 0.0
        if self.remote.model:
            payload["model"] = self.remote.model
        t0 = time.perf_counter()
        try:
            if self.scoring_unsupported:
                raise RemoteError(
                    f"the server gives no prompt log-probabilities ({self.scoring_unsupported})"
                )
            body = await self._call("completions", payload, remote_deadline)
            try:
                scored = piece_scores(body, data, pieces)
            except RemoteError as exc:  # the server works but cannot score: the local model scores
                self.scoring_unsupported = str(exc)
                raise
        except RemoteError as exc:
            if self.fallback is None and self.scoring_unsupported:
                raise ScoringUnsupported(
                    f"the remote server cannot score and there is no local model: {exc}"
                ) from exc
            if self.fallback is None:
                raise ModelError(f"remote scoring failed and no local model: {exc}") from exc
            self.counts["fallbacks"] += 1
            return await self.fallback.score(prefix, pieces, _left(deadline))
        n = sum(p.tokens for p in scored)
        return Scoring(scored, n, n, time.perf_counter() - t0)

    def _deadlines(self, timeout_s: float | None) -> tuple[float, float]:
        """The job's deadline, and the remote's: half the job's time when a local fallback exists,
        so that the fallback still has time to run."""
        total = timeout_s if timeout_s is not None else self.settings.timeout_s
        now = time.monotonic()
        return now + total, now + (total / 2 if self.fallback is not None else total)

    async def prime(self, prefix: str) -> int:
        return await self.fallback.prime(prefix) if self.fallback else 0

    async def reload(self, path: str | None = None) -> None:
        if self.fallback is not None:
            await self.fallback.reload(path)
            self.settings = self.fallback.settings

    def data_room(self, prefix: str, suffix: str, max_tokens: int) -> int:
        if self.fallback is not None:
            return self.fallback.data_room(prefix, suffix, max_tokens)
        return max(0, self.settings.n_ctx - self.count_tokens(prefix + suffix) - max_tokens - 1)

    def count_tokens(self, text: str) -> int:
        return self.fallback.count_tokens(text) if self.fallback else len(text) // 3 + 1

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = dict(self.fallback.stats()) if self.fallback else {}
        out.update({f"remote_{k}": v for k, v in self.counts.items()})
        out["remote_degraded"] = 1 if self.degraded_reason else 0
        out["remote_scores"] = 0 if self.scoring_unsupported else 1  # 0: the local model scores
        return out

    def close(self) -> None:
        """Close the local fallback engine (the daemon's shutdown); aclose() closes the HTTP client."""
        if self.fallback is not None:
            self.fallback.close()

    async def aclose(self) -> None:
        """Close the HTTP connections (the fallback engine stays open: close() closes it)."""
        await self._http.aclose()

    # --- HTTP ------------------------------------------------------------------------------------
    async def _call(self, endpoint: str, payload: dict[str, Any], deadline: float) -> Any:
        """POST with retries and backoff inside the deadline; RemoteError when it does not work out."""
        if time.monotonic() < self._skip_until:
            self.counts["skipped"] += 1
            raise RemoteError(f"remote skipped after a failure: {self.degraded_reason}")
        delay = self.remote.backoff_s
        for attempt in range(self.remote.retries + 1):
            left = _left(deadline)
            if left <= 0.05:
                raise self._failed(RemoteError(f"deadline passed after {attempt} attempt(s)"))
            self.counts["requests"] += 1
            try:
                return self._ok(await self._post(endpoint, payload, left))
            except _Retryable as exc:
                error: RemoteError = exc
            except RemoteError as exc:
                raise self._failed(exc) from exc
            if attempt == self.remote.retries or _left(deadline) <= delay:
                raise self._failed(error)
            self.counts["retries"] += 1
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay *= 2
        raise AssertionError("unreachable")

    async def _post(self, endpoint: str, payload: dict[str, Any], left: float) -> Any:
        t = httpx.Timeout(min(self.remote.timeout_s, left), connect=min(self.remote.connect_timeout_s, left))
        try:
            resp = await self._http.post(endpoint, json=payload, timeout=t)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:  # connection refused, reset, protocol errors
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code in RETRY_STATUS:
            raise _Retryable(f"HTTP {resp.status_code}: {resp.text[:200]}")
        if resp.status_code >= 400:
            raise RemoteError(f"HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            body = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _Retryable(f"answer is not JSON: {resp.text[:80]!r}") from exc
        if not isinstance(body, dict) or not body.get("choices"):
            raise _Retryable(f"answer has no choices: {str(body)[:80]}")
        return body

    def _ok(self, body: Any) -> Any:
        self.consecutive_failures = 0
        self._skip_until = 0.0
        self.degraded_reason = ""
        return body

    def _failed(self, exc: RemoteError) -> RemoteError:
        """Count a failed call, back off, say why; returns ``exc`` for the caller to raise."""
        self.counts["failures"] += 1
        self.consecutive_failures += 1
        wait = SKIP_AFTER_FAILURE_S[min(self.consecutive_failures, len(SKIP_AFTER_FAILURE_S)) - 1]
        self._skip_until = time.monotonic() + wait
        self.degraded_reason = f"remote model {self.remote.url} failed ({exc}); local fallback for {wait:g} s"
        return exc


class _Retryable(RemoteError):
    """A failure worth another attempt (network, timeout, overload, a garbled answer)."""


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _conforms(local: LlamaEngine, remote: RemoteEngine) -> list[Backend]:
    """Never called: mypy checks here that both engines implement summarizer.backend.Backend."""
    return [local, remote]
