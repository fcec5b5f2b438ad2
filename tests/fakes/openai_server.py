#!/usr/bin/env python3
"""A deterministic OpenAI-compatible LLM server for tests (standard library only).

Why it exists: the project's rule is "real components, never mocks", and the
one allowed exception is the LLM provider. This server speaks enough of the
OpenAI HTTP API for Hermes, the LCM summarizer and the embeddings client to
run end to end, offline, with replies a test can predict.

Run it: ``python tests/fakes/openai_server.py --host 127.0.0.1 --port N``.

Endpoints
- ``GET  /v1/models``: one model per ``--model`` (default ``fake-model``), with
  ``context_length`` (``--context-length``).
- ``POST /v1/chat/completions``: stream (SSE) and non-stream.
- ``POST /v1/embeddings``: deterministic bag-of-hashed-words vectors
  (``--embedding-dim``, default 64); texts sharing words get close vectors.
- ``GET /health``: ``{"status": "ok"}``.
- ``POST /_control``: ``{"mode": MODE, "hang_seconds": 30}`` changes how chat completions
  answer: ``normal``; ``fail`` = HTTP 500; ``429`` = HTTP 429 with ``Retry-After: 1``;
  ``refuse`` = the connection closed before any answer (a provider that is down);
  ``malformed`` = HTTP 200 whose body is not JSON; ``cut`` = the answer cut before its
  first word (a stream ends after its opening chunk, a plain body is shorter than its
  Content-Length);
  ``hang`` = sleep ``hang_seconds`` first; ``garbage`` = an empty/unsized reply.
  Every mode but ``normal`` and ``garbage`` fails the request (a provider's failures,
  for tests of what a client and LCM see). ``GET /_requests`` returns the recorded
  chat requests (the last 200); ``POST /_reset`` clears them and the mode.
- ``GET /_auth``: ``{"authorization": [...]}``, the ``Authorization`` header of
  each recorded chat and embeddings request (the last 200, ``null`` when absent),
  so a test can prove which API key a client sent; ``POST /_reset`` clears it.

How replies are chosen (first match wins)
1. A rule from ``--script FILE`` (JSON list of ``{"match": REGEX, "reply": TEXT,
   "tool_calls": [{"name": N, "arguments": {...}}]}``) whose regex matches the
   last user message, unless the conversation already answered that turn with
   tool results (then rule 3 applies).
2. In-band directives in the last user message: ``[[tool:NAME {json args}]]``
   (several allowed) asks for those tool calls, when the tools are offered.
3. After tool results (last message has role ``tool``): ``Tool results: NAME ->
   <first 400 chars>`` for each result of the turn.
4. A summarization request (no tools, the system message mentions "summar"): a
   deterministic summary ``SUMMARY: <head> ... <tail>`` shorter than its input,
   bounded by ``max_tokens`` (4 characters a token).
5. Otherwise: ``Echo: <last user message, first 200 chars>``.

``usage.prompt_tokens`` is the request's character count divided by 4, so a
client's compaction thresholds trigger predictably.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DIRECTIVE = re.compile(r"\[\[tool:([A-Za-z0-9_.-]+)\s*(\{.*?\})?\s*\]\]", re.DOTALL)
WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass
class ServerState:
    """Everything the handlers share; guarded by ``lock`` (handlers run on threads)."""

    models: list[str]
    context_length: int
    embedding_dim: int
    script: list[dict[str, Any]]
    mode: str = "normal"
    hang_seconds: float = 30.0
    requests: deque = field(default_factory=lambda: deque(maxlen=200))
    authorizations: deque = field(default_factory=lambda: deque(maxlen=200))
    lock: threading.Lock = field(default_factory=threading.Lock)


def estimate_tokens(payload: Any) -> int:
    return max(1, len(json.dumps(payload, ensure_ascii=False)) // 4)


def text_of(content: Any) -> str:
    """Flatten OpenAI content (a string or a list of parts) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def trailing_tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results after the last assistant message that asked for tools."""
    results: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") == "tool":
            results.append(message)
        else:
            break
    return list(reversed(results))


def tool_names_offered(body: dict[str, Any]) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            names.add(str(fn["name"]))
    return names


def call_id(seed: str) -> str:
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:16]


def make_tool_calls(calls: list[tuple[str, dict[str, Any]]], seed: str) -> list[dict[str, Any]]:
    return [
        {
            "id": call_id(f"{seed}:{i}:{name}"),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, sort_keys=True)},
        }
        for i, (name, args) in enumerate(calls)
    ]


def directive_calls(text: str, offered: set[str]) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for match in DIRECTIVE.finditer(text):
        name, raw = match.group(1), match.group(2)
        if offered and name not in offered:
            continue
        try:
            args = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            args = {"raw": raw}
        calls.append((name, args if isinstance(args, dict) else {"value": args}))
    return calls


def summary_reply(messages: list[dict[str, Any]], max_tokens: int | None) -> str:
    """A deterministic, shorter-than-input summary of the request's text."""
    body = "\n".join(
        text_of(m.get("content")) for m in messages if m.get("role") in ("user", "assistant")
    )
    words = " ".join(body.split())
    budget_chars = min(1200, max(40, len(words) // 3))
    if max_tokens:
        budget_chars = min(budget_chars, max(20, max_tokens * 4 - 20))
    if len(words) <= budget_chars:
        return "SUMMARY: " + words[: max(0, budget_chars - 9)]
    head = words[: budget_chars * 2 // 3]
    tail = words[-(budget_chars // 3 - 5) :] if budget_chars > 30 else ""
    return f"SUMMARY: {head} ... {tail}"


def is_summary_request(body: dict[str, Any]) -> bool:
    """A request without tools whose system message asks for a summary."""
    if body.get("tools"):
        return False
    for message in body.get("messages") or []:
        if message.get("role") == "system" and "summar" in text_of(message.get("content")).lower():
            return True
    return False


def choose_reply(state: ServerState, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Return (text, tool_calls) for a chat request, following the documented order."""
    messages = body.get("messages") or []
    offered = tool_names_offered(body)
    results = trailing_tool_results(messages)
    seed = json.dumps(messages[-1:], sort_keys=True, default=str) + str(len(messages))
    user = last_user_text(messages)
    if not results:
        for rule in state.script:
            if re.search(rule.get("match", "$^"), user):
                calls = [
                    (c["name"], c.get("arguments", {}))
                    for c in rule.get("tool_calls", [])
                    if not offered or c["name"] in offered
                ]
                return str(rule.get("reply", "")), make_tool_calls(calls, seed)
        calls = directive_calls(user, offered)
        if calls:
            return "", make_tool_calls(calls, seed)
    if results:
        names = _tool_names_by_id(messages)
        parts = [
            f"{names.get(str(r.get('tool_call_id')), 'tool')} -> {text_of(r.get('content'))[:400]}"
            for r in results
        ]
        return "Tool results: " + " | ".join(parts), []
    if is_summary_request(body):
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        return summary_reply(messages, limit), []
    return "Echo: " + user[:200], []


def _tool_names_by_id(messages: list[dict[str, Any]]) -> dict[str, str]:
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            names[str(call.get("id"))] = str(fn.get("name", "tool"))
    return names


def hashed_embedding(text: str, dim: int) -> list[float]:
    """Bag of hashed lower-case words, L2-normalized: shared words mean close vectors."""
    vec = [0.0] * dim
    for word in WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        vec[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class Handler(BaseHTTPRequestHandler):
    server_version = "FakeOpenAI/1.0"
    protocol_version = "HTTP/1.1"

    @property
    def state(self) -> ServerState:
        return self.server.state  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet by default: tests read /_requests instead of stderr."""

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return {}
        return body if isinstance(body, dict) else {}

    def do_GET(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/health", ""):
            self._send_json(200, {"status": "ok"})
        elif path.endswith("/models"):
            created = 1_700_000_000
            data = [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "fake",
                    "context_length": self.state.context_length,
                }
                for name in self.state.models
            ]
            self._send_json(200, {"object": "list", "data": data})
        elif path == "/_requests":
            with self.state.lock:
                self._send_json(200, list(self.state.requests))
        elif path == "/_auth":
            with self.state.lock:
                self._send_json(200, {"authorization": list(self.state.authorizations)})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        body = self._read_body()
        if path.endswith("/chat/completions"):
            self._record_authorization()
            self._chat(body)
        elif path.endswith("/embeddings"):
            self._record_authorization()
            self._embeddings(body)
        elif path == "/_control":
            with self.state.lock:
                self.state.mode = str(body.get("mode", "normal"))
                self.state.hang_seconds = float(body.get("hang_seconds", 30.0))
            self._send_json(200, {"mode": self.state.mode})
        elif path == "/_reset":
            with self.state.lock:
                self.state.mode = "normal"
                self.state.requests.clear()
                self.state.authorizations.clear()
            self._send_json(200, {"mode": "normal"})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}"}})

    def _record_authorization(self) -> None:
        """Keep the API key the client sent: the fake accepts any, tests check which."""
        with self.state.lock:
            self.state.authorizations.append(self.headers.get("Authorization"))

    def _chat(self, body: dict[str, Any]) -> None:
        with self.state.lock:
            self.state.requests.append(body)
            mode, hang = self.state.mode, self.state.hang_seconds
        if self._failed(mode, body):
            return
        if mode == "hang":
            time.sleep(hang)
        tool_calls: list[dict[str, Any]] = []
        if mode == "garbage":
            text = ""
        else:
            text, tool_calls = choose_reply(self.state, body)
        model = str(body.get("model") or self.state.models[0])
        usage = {
            "prompt_tokens": estimate_tokens(body.get("messages") or []),
            "completion_tokens": max(1, len(text) // 4),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if body.get("stream"):
            self._stream(model, text, tool_calls, usage, body)
        else:
            self._send_json(200, completion(model, text, tool_calls, usage))

    def _failed(self, mode: str, body: dict[str, Any]) -> bool:
        """Answer as a failing provider does in ``mode``; False when the mode answers."""
        if mode == "fail":
            self._send_json(500, {"error": {"message": "fake server told to fail"}})
        elif mode == "429":
            data = json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}})
            self.send_response(429)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())
        elif mode == "refuse":
            self.close_connection = True  # no status line: the client sees the socket close
        elif mode == "malformed":
            data = b'{"id": "chatcmpl-malformed", "choices": [{"message": '
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif mode == "cut":
            self._cut(body)
        else:
            return False
        return True

    def _cut(self, body: dict[str, Any]) -> None:
        """An answer that stops before its first word, then the connection closes.

        A stream cut after some text is a truncated answer to Hermes (it asks the model to
        continue, then hands back what it has, ``finish_reason: "length"``), not a failure.
        """
        self.send_response(200)
        if body.get("stream"):
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            delta = {"role": "assistant", "content": ""}
            chunk = {"id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 0}
            chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": None}]
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        else:
            text = "this answer is cut off before it ends"
            data = json.dumps(completion("fake-model", text, [], {"prompt_tokens": 1})).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def _stream(
        self,
        model: str,
        text: str,
        tool_calls: list[dict[str, Any]],
        usage: dict[str, int],
        body: dict[str, Any],
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        ident, created = "chatcmpl-" + uuid.uuid4().hex[:12], int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None, extra: dict | None = None) -> None:
            payload = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            payload.update(extra or {})
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""}, None)
        for start in range(0, len(text), 16):
            chunk({"content": text[start : start + 16]}, None)
        for index, call in enumerate(tool_calls):
            chunk({"tool_calls": [{"index": index, **call}]}, None)
        chunk({}, "tool_calls" if tool_calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            payload = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _embeddings(self, body: dict[str, Any]) -> None:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dim = int(body.get("dimensions") or self.state.embedding_dim)
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_embedding(str(t), dim)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(max(1, len(str(t)) // 4) for t in texts)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": str(body.get("model") or "fake-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


def completion(
    model: str, text: str, tool_calls: list[dict[str, Any]], usage: dict[str, int]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    else:
        message["content"] = text
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:12],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": usage,
    }


def make_server(
    host: str,
    port: int,
    models: list[str] | None = None,
    context_length: int = 128_000,
    embedding_dim: int = 64,
    script: list[dict[str, Any]] | None = None,
) -> ThreadingHTTPServer:
    """Build (not start) a server; ``server.server_address[1]`` is the bound port."""
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.state = ServerState(  # type: ignore[attr-defined]
        models=models or ["fake-model"],
        context_length=context_length,
        embedding_dim=embedding_dim,
        script=script or [],
    )
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", action="append", dest="models", help="model id (repeatable)")
    parser.add_argument("--context-length", type=int, default=128_000)
    parser.add_argument("--embedding-dim", type=int, default=64)
    parser.add_argument("--script", help="JSON file of reply rules")
    args = parser.parse_args(argv)
    script: list[dict[str, Any]] = []
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = json.load(fh)
    server = make_server(
        args.host, args.port, args.models, args.context_length, args.embedding_dim, script
    )
    print(f"fake OpenAI server on http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
