"""Limits in front of the OpenEnv app: request size, WebSocket sessions per client, idle sessions.

A plain ASGI middleware (no OpenEnv import), so every limit answers before OpenEnv's routes run:

* an HTTP body over ``max_request_bytes`` is a 413 (read at most that many bytes, never the whole
  body); a WebSocket message over it is refused by uvicorn (``ws_max_size``, set by ``serve``);
* a client (by peer address) holding ``per_client`` WebSocket sessions gets an error frame
  (``CAPACITY_REACHED``, OpenEnv's own code) and a close, instead of another session;
* a WebSocket session whose client sends nothing for ``idle_timeout_s`` gets an error frame saying so
  and is closed, which frees its slot (OpenEnv's reaper skips sessions with a live WebSocket);
* ``openenv/session/create`` over HTTP ``/mcp`` is refused: the game has no MCP tools, and such
  sessions have no connection whose end would free them.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["GuardMiddleware", "ServeLimits"]

Scope = dict[str, Any]


@dataclass(frozen=True)
class ServeLimits:
    """What one ``spyrl serve`` process allows (``spyrl serve --help`` names each flag)."""

    max_sessions: int = 64
    per_client: int = 16
    idle_timeout_s: float = 300.0
    max_request_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_sessions", "per_client", "max_request_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.idle_timeout_s > 0:
            raise ValueError(f"idle_timeout_s must be > 0, got {self.idle_timeout_s!r}")


class GuardMiddleware:
    """ASGI middleware enforcing :class:`ServeLimits` (see the module's docstring)."""

    def __init__(
        self, app: Any, limits: ServeLimits, check_body: Callable[[str, bytes], str | None] | None = None
    ) -> None:
        self.app = app
        self.limits = limits
        self.check_body = check_body  # (path, body) -> a client mistake's one-line reason, or None
        self.live: Counter[str] = Counter()  # WebSocket sessions per client address

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Any, send: Any) -> None:
        limit = self.limits.max_request_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared and (not declared.isdigit() or int(declared) > limit):
            await _reply(send, 413, f"request body over {limit} bytes")
            return
        body = bytearray()
        while True:
            try:
                message = await receive()
            except asyncio.CancelledError:  # the server stops (Ctrl-C) while a client is half-way through a body
                return
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await _reply(send, 413, f"request body over {limit} bytes")
                return
            if not message.get("more_body", False):
                break
        if scope.get("path") == "/mcp" and _jsonrpc_method(body) == "openenv/session/create":
            await _reply(send, 400, "MCP sessions are not offered: the game has no MCP tools; play over /ws")
            return
        problem = self.check_body(str(scope.get("path")), bytes(body)) if self.check_body else None
        if problem:
            await _reply(send, 400, problem)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _websocket(self, scope: Scope, receive: Any, send: Any) -> None:
        client = str((scope.get("client") or ("unknown",))[0])
        if self.live[client] >= self.limits.per_client:
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            message = f"this client already holds {self.limits.per_client} sessions (the per-client limit)"
            await send({"type": "websocket.send", "text": _ws_error(message, "CAPACITY_REACHED")})
            await send({"type": "websocket.close", "code": 1008})
            return
        self.live[client] += 1
        accepted = False

        async def watch_send(message: dict[str, Any]) -> None:
            nonlocal accepted
            accepted = accepted or message["type"] == "websocket.accept"
            await send(message)

        async def idle_receive() -> dict[str, Any]:
            try:
                return await asyncio.wait_for(receive(), self.limits.idle_timeout_s)
            except asyncio.TimeoutError:
                if accepted:
                    message = f"session closed after {self.limits.idle_timeout_s:g} s without a message"
                    await send({"type": "websocket.send", "text": _ws_error(message, "SESSION_ERROR")})
                return {"type": "websocket.disconnect", "code": 1001}

        try:
            await self.app(scope, idle_receive, watch_send)
        finally:
            self.live[client] -= 1
            if self.live[client] <= 0:
                del self.live[client]


def _jsonrpc_method(body: bytes) -> str | None:
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return request.get("method") if isinstance(request, dict) else None


def _ws_error(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
