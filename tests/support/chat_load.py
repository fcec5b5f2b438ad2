"""Chat load and /health probing against a Hermes API server, with per-attempt records.

Shared by bench/agent_faults.py (on the host, against a local entrypoint) and the e2e fault
suite (tests/e2e/test_faults.py), which ships this file into a pod and runs it as a program
against the agent's Service: standard library only, so any image with python3 runs it.

Each client sends the turns of one conversation one after another (back to back, or with a
think time between an answer and the next turn: ``pause``) and retries a turn until it is
answered with HTTP 200 (every failed attempt is recorded). A turn's user text carries a unique
marker (``[A:00012]``) so a checker can count it in LCM. Every attempt carries the turn's
``Idempotency-Key`` (the same on each retry of the turn, unique to this client's run), as
docs/retries.md asks of clients: a turn the gateway answered and then died with is answered
again from its durable cache instead of a second time. Two conversation shapes:

- ``session``: one user message per request plus ``X-Hermes-Session-Id`` (history from state.db);
- ``history``: the client sends the history (a fixed opening exchange, then the new turn), as
  an OpenAI client does; Hermes keys the session on the first user message.

Connect time is measured apart from the request (a connect that hangs on a vanished pod is a
different failure from a slow answer), and all times are wall-clock seconds (``time.time()``),
so records from a pod line up with the moments a test injected its faults.

Run as a program it prints one JSON object per line: ``{"kind": "attempt", ...}`` per chat
attempt and ``{"kind": "health", ...}`` per change of /health (up/down); the API key comes
from the environment (``HERMES_API_KEY``), never from the arguments.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONNECT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 60.0
RETRY_PAUSE = 0.05
HEALTH_INTERVAL = 0.05
HEALTH_TIMEOUT = 2.0


def marker(client: str, turn: int) -> str:
    """The unique text of one turn; brackets keep ``[A:00001]`` from matching ``[A:000012]``."""
    return f"[{client}:{turn:05d}]"


def conversation(opening: str, text: str) -> list[dict[str, str]]:
    """One ongoing conversation: Hermes keys its session (and cached agent) on the first user
    message, so every turn reuses it instead of building a new agent."""
    return [
        {"role": "user", "content": opening},
        {"role": "assistant", "content": f"Echo: {opening}"},
        {"role": "user", "content": text},
    ]


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt of one turn. ``status`` 0: no HTTP answer (``error`` says why)."""

    client: str
    turn: int
    marker: str
    started: float
    connect_s: float
    total_s: float
    status: int
    error: str = ""
    kind: str = "attempt"

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(frozen=True)
class HealthChange:
    """/health turned up or down at ``at`` (the start of the first probe that saw it)."""

    at: float
    up: bool
    detail: str = ""
    kind: str = "health"


def post_json(
    base_url: str,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    timeouts: tuple[float, float] = (CONNECT_TIMEOUT, REQUEST_TIMEOUT),
) -> tuple[float, int, str]:
    """(connect seconds, status, error) of one POST; status 0 when no HTTP answer came."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=timeouts[0])
    started = time.monotonic()
    connect_s = 0.0
    try:
        conn.connect()
        connect_s = time.monotonic() - started
        assert conn.sock is not None
        conn.sock.settimeout(timeouts[1])
        payload = json.dumps(body).encode()
        conn.request("POST", path, payload, {"Content-Type": "application/json", **headers})
        response = conn.getresponse()
        response.read()
        return connect_s, response.status, "" if response.status == 200 else response.reason
    except (OSError, http.client.HTTPException) as exc:
        if not connect_s:
            connect_s = time.monotonic() - started
        return connect_s, 0, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


@dataclass
class ChatClient:
    """A retrying client: each turn is sent until it is answered (``RETRY_PAUSE`` between),
    the next one ``pause`` seconds after the answer (a user's think time; 0: back to back).

    ``base_url`` is a one-element list so a caller can switch servers under a running client.
    """

    base_url: list[str]
    key: str
    name: str = "A"
    session: str = ""  # set: the ``session`` shape; empty: the ``history`` shape
    record: Callable[[Attempt], None] = lambda attempt: None
    ok: int = 0
    failed_attempts: int = 0
    retried_turns: int = 0
    slowest_turn_s: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # keys of this run only
    pause: float = 0.0

    def run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            if turn and self.pause:
                self.stop.wait(self.pause)
            turn += 1
            started, attempts = time.monotonic(), 0
            while not self.stop.is_set():
                attempts += 1
                if self.attempt(turn).ok:
                    self.ok += 1
                    self.retried_turns += attempts > 1
                    self.slowest_turn_s = max(self.slowest_turn_s, time.monotonic() - started)
                    break
                self.failed_attempts += 1
                time.sleep(RETRY_PAUSE)

    def request(self, turn: int) -> tuple[dict[str, Any], dict[str, str]]:
        """Body and headers of one turn in this client's conversation shape (the same for
        every attempt of the turn, its ``Idempotency-Key`` too)."""
        text = f"fault turn {marker(self.name, turn)}"
        headers = {
            "Authorization": f"Bearer {self.key}",
            "Idempotency-Key": f"{self.name}-{turn:05d}-{self.run_id}",
        }
        if self.session:
            headers["X-Hermes-Session-Id"] = self.session
            messages = [{"role": "user", "content": text}]
        else:
            messages = conversation(f"conversation of client {self.name}", text)
        return {"model": "hermes-agent", "messages": messages}, headers

    def attempt(self, turn: int) -> Attempt:
        body, headers = self.request(turn)
        wall, started = time.time(), time.monotonic()
        path = "/v1/chat/completions"
        connect_s, status, error = post_json(self.base_url[0], path, body, headers)
        result = Attempt(
            self.name,
            turn,
            marker(self.name, turn),
            wall,
            round(connect_s, 3),
            round(time.monotonic() - started, 3),
            status,
            error,
        )
        self.record(result)
        return result

    def figures(self) -> dict[str, Any]:
        return {
            "ok_turns": self.ok,
            "retried_turns": self.retried_turns,
            "failed_attempts": self.failed_attempts,
            "slowest_turn_s": round(self.slowest_turn_s, 2),
        }


def health_ok(base_url: str, timeout: float = HEALTH_TIMEOUT) -> tuple[bool, str]:
    """Whether ``GET /health`` answers ``{"status": "ok"}``, and why not."""
    url = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=timeout)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        status = json.loads(response.read() or b"{}").get("status")
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return status == "ok", "" if status == "ok" else f"status {status!r}"


@dataclass
class HealthProbe:
    """Polls /health every ``HEALTH_INTERVAL`` s and records each change (up/down)."""

    base_url: str
    record: Callable[[HealthChange], None]
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        last: bool | None = None
        while not self.stop.is_set():
            started = time.time()
            up, detail = health_ok(self.base_url)
            if up != last:
                self.record(HealthChange(round(started, 3), up, detail))
                last = up
            time.sleep(HEALTH_INTERVAL)


@dataclass(frozen=True)
class FaultFigures:
    """What one fault cost the clients, from the records between ``start`` and ``end``."""

    outage_s: float  # first failed /health probe -> first good one after the last failure
    failed_requests: int  # attempts without an HTTP 200 (a client retries every 50 ms)
    turns_hit: int  # distinct turns that needed a retry
    longest_connect_s: float
    max_latency_s: float  # the slowest answered (HTTP 200) attempt
    answered: int


def fault_figures(
    attempts: list[Attempt], health: list[HealthChange], start: float, end: float
) -> FaultFigures:
    """Figures of the window [start, end): attempts that started in it, /health changes in it."""
    window = [a for a in attempts if start <= a.started < end]
    changes = [h for h in health if start <= h.at < end]
    downs = [h.at for h in changes if not h.up]
    outage = 0.0
    if downs:
        back = [h.at for h in changes if h.up and h.at > downs[-1]]
        outage = (back[0] if back else end) - downs[0]
    answered = [a.total_s for a in window if a.ok]
    return FaultFigures(
        outage_s=round(outage, 2),
        failed_requests=sum(1 for a in window if not a.ok),
        turns_hit=len({(a.client, a.turn) for a in window if not a.ok}),
        longest_connect_s=round(max((a.connect_s for a in window), default=0.0), 2),
        max_latency_s=round(max(answered, default=0.0), 2),
        answered=len(answered),
    )


def parse_records(lines: list[str]) -> tuple[list[Attempt], list[HealthChange]]:
    """The records a ``main`` run printed (other lines are skipped)."""
    attempts, health = [], []
    for line in lines:
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        kind = record.pop("kind", "")
        if kind == "attempt":
            attempts.append(Attempt(**record))
        elif kind == "health":
            health.append(HealthChange(**record))
    return attempts, health


def previous_starts(path: Path) -> int:
    """How often the load started before (0 the first time); this start is counted."""
    starts = int(path.read_text()) if path.exists() else 0
    path.write_text(str(starts + 1))
    return starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of the API server")
    parser.add_argument("--session-clients", type=int, default=1)
    parser.add_argument("--history-clients", type=int, default=1)
    parser.add_argument(
        "--starts-file",
        type=Path,
        help="count the starts in this file and name the clients after the previous start's "
        "(a container restarted with the node must not reuse a marker: A, B, then C, D...)",
    )
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds each client waits after an answer before its next turn (default 0)",
    )
    args = parser.parse_args()
    key = os.environ["HERMES_API_KEY"]
    lock = threading.Lock()

    def emit(record: Attempt | HealthChange) -> None:
        with lock:
            sys.stdout.write(json.dumps(asdict(record)) + "\n")
            sys.stdout.flush()

    threads = [threading.Thread(target=HealthProbe(args.url, emit).run, daemon=True)]
    count = args.session_clients + args.history_clients
    first = count * previous_starts(args.starts_file) if args.starts_file else 0
    names = [chr(ord("A") + first + i) for i in range(count)]
    for index, name in enumerate(names):
        session = f"fault-session-{name}" if index < args.session_clients else ""
        client = ChatClient([args.url], key, name, session, emit, pause=args.pause)
        threads.append(threading.Thread(target=client.run, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
