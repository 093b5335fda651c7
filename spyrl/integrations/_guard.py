"""Limits in front of the OpenEnv app: request size, WebSocket sessions per client, idle sessions.

A plain ASGI middleware (no OpenEnv import), so every limit answers before OpenEnv's routes run:

* an HTTP body over ``max_request_bytes`` is a 413 (read at most that many bytes, never the whole
  body); a WebSocket message over it is refused by uvicorn (``ws_max_size``, set by ``serve``);
* an HTTP body or WebSocket message that is not JSON, or nests deeper than
  :data:`spy_env.io.MAX_DEPTH` levels, is a 400 (an error frame over WebSocket, the session going on)
  with a one-line reason: the routes behind read it with a parser that recurses, and a
  ``RecursionError`` there is a 500 and a traceback in the log;
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
import math
import numbers
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spy_env.io import parse_json

__all__ = ["MAX_IDLE_TIMEOUT_S", "GuardMiddleware", "ServeLimits"]

Scope = dict[str, Any]
# A session idle this long is abandoned; a larger (or infinite) timeout would be no limit at all.
MAX_IDLE_TIMEOUT_S = 86_400.0
# Bodies larger than this are parsed on a worker thread, so the event loop goes on answering.
_INLINE_PARSE_BYTES = 64 * 1024


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
        timeout = self.idle_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not math.isfinite(timeout):
            raise ValueError(f"idle_timeout_s must be a finite number of seconds, got {timeout!r}")
        if not 0 < timeout <= MAX_IDLE_TIMEOUT_S:
            raise ValueError(f"idle_timeout_s must be > 0 and at most {MAX_IDLE_TIMEOUT_S:g}, got {timeout!r}")


class GuardMiddleware:
    """ASGI middleware enforcing :class:`ServeLimits` (see the module's docstring)."""

    def __init__(
        self, app: Any, limits: ServeLimits, check_body: Callable[[str, Any], str | None] | None = None
    ) -> None:
        self.app = app
        self.limits = limits
        # (path, the body's JSON value, None when empty) -> a client mistake's one-line reason, or None
        self.check_body = check_body
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
        body = await _read_body(receive, limit)
        if body is None:  # the client left, or the server stops
            return
        if len(body) > limit:
            await _reply(send, 413, f"request body over {limit} bytes")
            return
        try:
            request = await _parsed(body, "request body") if body else None
        except ValueError as e:
            await _reply(send, 400, str(e))
            return
        if scope.get("path") == "/mcp" and _jsonrpc_method(request) == "openenv/session/create":
            await _reply(send, 400, "MCP sessions are not offered: the game has no MCP tools; play over /ws")
            return
        problem = self.check_body(str(scope.get("path")), request) if self.check_body else None
        if problem:
            await _reply(send, 400, problem)
            return
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
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

        async def json_receive() -> dict[str, Any]:
            """The next message that is JSON; each other one is answered with an error frame."""
            while True:
                message = await idle_receive()
                data = message.get("text") if message.get("text") is not None else message.get("bytes")
                if message["type"] != "websocket.receive" or data is None:
                    return message
                try:
                    await _parsed(data, "message")
                    return message
                except ValueError as e:
                    await send({"type": "websocket.send", "text": _ws_refusal(str(scope.get("path")), str(e))})

        try:
            await self.app(scope, json_receive, watch_send)
        finally:
            self.live[client] -= 1
            if self.live[client] <= 0:
                del self.live[client]


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The request's body, or its first bytes past ``limit``; ``None`` when the client disconnects
    or the server stops (Ctrl-C) while a client is half-way through a body."""
    body = bytearray()
    while True:
        try:
            message = await receive()
        except asyncio.CancelledError:
            return None
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit or not message.get("more_body", False):
            return bytes(body)


async def _parsed(data: str | bytes, where: str) -> Any:
    """``data``'s JSON value, read with the depth-checked parser; a ``ValueError`` naming ``where``."""
    if len(data) > _INLINE_PARSE_BYTES:
        return await asyncio.to_thread(parse_json, data, where)
    return parse_json(data, where)


def _jsonrpc_method(request: Any) -> str | None:
    method = request.get("method") if isinstance(request, dict) else None
    return method if isinstance(method, str) else None


def _ws_refusal(path: str, message: str) -> str:
    """An error frame for a message that is not JSON, in the shape the route's clients read."""
    if path == "/mcp":  # JSON-RPC 2.0: a parse error carries no request id
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": message}})
    return _ws_error(message, "INVALID_JSON")


def _ws_error(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
