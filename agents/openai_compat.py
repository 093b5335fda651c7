"""``openai`` backend: any OpenAI-compatible chat server (vLLM serve, SGLang, ``transformers
serve``, hosted APIs).

Requests run concurrently (``asyncio`` + ``httpx``) under a concurrency limit, each attempt with a
total deadline (``timeout`` seconds from sending to the last byte, so a server that drips a byte
at a time cannot hold a request) and a cap on the response size (``max_response_bytes``), and
retries with exponential backoff and jitter on connection errors, timeouts, 408, 409, 429 and 5xx. A request that finally fails becomes a forfeit :class:`Action` whose ``error``
says why: the game goes on and the buffer row records it; the batch is never aborted.

The API key is read from an environment variable (``OPENAI_API_KEY`` by default) and is never
logged or shown in ``repr``. Logprobs are requested and kept when the server returns them;
token ids are kept when it returns them (vLLM with ``extra_body={"return_token_ids": True}``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.registry import register_backend
from agents.sampling import SamplingParams
from spy_env.io import parse_json
from spy_env.policy import Action, Observation, chat_messages

logger = logging.getLogger(__name__)

__all__ = ["OpenAIPolicy", "RequestLimits", "load_openai"]

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class _RetryableStatus(Exception):
    pass


class _TooLarge(Exception):
    pass


def _httpx():
    try:
        import httpx
    except ImportError as e:
        raise ImportError("the openai backend needs httpx: pip install 'spyrl[openai]'") from e
    return httpx


@dataclass(frozen=True)
class RequestLimits:
    """How an :class:`OpenAIPolicy` talks to its server: at most ``max_concurrency`` requests at once,
    each attempt bounded by ``timeout`` seconds (sending to last byte) and ``max_response_bytes``,
    ``max_retries`` retries with exponential backoff from ``backoff`` up to ``max_backoff`` seconds."""

    max_concurrency: int = 16
    timeout: float = 120.0
    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_response_bytes: int = 16 * 2**20

    def __post_init__(self) -> None:
        if self.max_concurrency < 1 or self.max_retries < 0 or self.timeout <= 0 or self.max_response_bytes < 1:
            raise ValueError("max_concurrency must be >= 1, max_retries >= 0, timeout > 0 and max_response_bytes >= 1")


class OpenAIPolicy:
    """Chat completions from an OpenAI-compatible server as a batched policy (``limits``: :class:`RequestLimits`)."""

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        sampling: SamplingParams | None = None,
        name: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        limits: RequestLimits | None = None,
        logprobs: bool = True,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        _httpx()
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.sampling = sampling or SamplingParams()
        self.name = name or f"openai:{model}"
        self.api_key_env = api_key_env
        self.limits = limits or RequestLimits()
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.stats: Counter[str] = Counter()
        self._requests = 0
        self._jitter = random.Random(self.sampling.seed)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIPolicy(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    # ------------------------------------------------------------------ policy
    def act(self, observations: Sequence[Observation]) -> list[Action]:
        payloads = [self._payload(obs) for obs in observations]
        return _run_sync(self._complete_all(payloads))

    def _payload(self, observation: Observation) -> dict[str, Any]:
        s = self.sampling
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(observation),
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_new_tokens,
        }
        if s.top_k:
            payload["top_k"] = s.top_k
        if s.seed is not None:
            payload["seed"] = s.seed + self._requests  # distinct draws for identical prompts
        if self.logprobs:
            payload["logprobs"] = True
        payload.update(self.extra_body)
        self._requests += 1
        return payload

    async def _complete_all(self, payloads: list[dict[str, Any]]) -> list[Action]:
        httpx = _httpx()
        headers = {}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(max_connections=self.limits.max_concurrency)
        semaphore = asyncio.Semaphore(self.limits.max_concurrency)
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=self.limits.timeout, limits=limits
        ) as client:
            return list(await asyncio.gather(*(self._complete(client, semaphore, p) for p in payloads)))

    async def _complete(self, client: Any, semaphore: asyncio.Semaphore, payload: dict[str, Any]) -> Action:
        httpx = _httpx()
        last_error = "no attempt made"
        for attempt in range(self.limits.max_retries + 1):
            if attempt:
                self.stats["retries"] += 1
                delay = min(self.limits.max_backoff, self.limits.backoff * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + 0.5 * self._jitter.random()))
            try:
                async with semaphore:
                    self.stats["requests"] += 1
                    status, body = await asyncio.wait_for(self._post(client, payload), self.limits.timeout)
                text = body.decode("utf-8", errors="replace")
                if status in RETRY_STATUS:
                    raise _RetryableStatus(f"HTTP {status}: {text[:200]}")
                if status >= 400:
                    self.stats["failures"] += 1
                    return Action.forfeit(f"HTTP {status}: {text[:300]}")
                action = _parse(parse_json(body, "the response"))
                self.stats["completed"] += 1
                return action
            except asyncio.TimeoutError:
                last_error = f"no complete response within {self.limits.timeout:g} s"
                logger.debug("request to %s failed (attempt %d): %s", self.base_url, attempt + 1, last_error)
            except (httpx.TransportError, _RetryableStatus) as e:
                last_error = f"{type(e).__name__}: {e}"
                logger.debug("request to %s failed (attempt %d): %s", self.base_url, attempt + 1, last_error)
            except Exception as e:  # a malformed answer must not crash the batch
                self.stats["failures"] += 1
                return Action.forfeit(f"bad response: {type(e).__name__}: {e}")
        self.stats["failures"] += 1
        return Action.forfeit(f"gave up after {self.limits.max_retries + 1} attempts: {last_error}")

    async def _post(self, client: Any, payload: dict[str, Any]) -> tuple[int, bytes]:
        """POST ``payload``; the status and the body, read up to :attr:`max_response_bytes`."""
        async with client.stream("POST", "/chat/completions", json=payload) as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.limits.max_response_bytes:
                    raise _TooLarge(f"response larger than {self.limits.max_response_bytes} bytes")
            return response.status_code, bytes(body)


@register_backend(
    "openai",
    spec="openai:MODEL@URL",
    help="any OpenAI-compatible server (vLLM serve, SGLang, `transformers serve`, hosted APIs); URL is the "
    "API base, e.g. `http://127.0.0.1:8000/v1`; key from `OPENAI_API_KEY`",
    accepts=lambda argument: "@" in argument,
    llm=True,
)
def load_openai(argument: str, *, sampling: SamplingParams, **kwargs: Any) -> OpenAIPolicy:
    """``openai:MODEL@URL``: an :class:`OpenAIPolicy` (the URL is the part after the last ``@``)."""
    model, _, url = argument.rpartition("@")
    if not model:
        raise ValueError(f"agent spec {'openai:' + argument!r}: expected openai:MODEL@URL")
    return OpenAIPolicy(model, url, sampling=sampling, **kwargs)


def _parse(body: dict[str, Any]) -> Action:
    choice = body["choices"][0]
    text = choice["message"].get("content") or ""
    logprobs = None
    content = (choice.get("logprobs") or {}).get("content")
    if content:
        logprobs = [float(item["logprob"]) for item in content]
    return Action(
        text=text,
        prompt_token_ids=body.get("prompt_token_ids") or choice.get("prompt_token_ids"),
        completion_token_ids=choice.get("token_ids"),
        logprobs=logprobs,
        finish_reason=choice.get("finish_reason") or "",
    )


def _run_sync(coro):
    """Run a coroutine to completion, also from inside a running event loop (notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as e:
            result["error"] = e

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
