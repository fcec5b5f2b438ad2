"""The test servers' port picks: below the kernel's outgoing range, free, twins included."""

from __future__ import annotations

import socket

import pytest
from support.net import LOWEST_PORT, first_ephemeral_port, free_port, port_is_free


def test_a_picked_port_is_free_and_below_the_outgoing_range() -> None:
    port = free_port()
    assert LOWEST_PORT <= port < first_ephemeral_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises if the pick was taken


def test_a_pick_with_a_twin_keeps_both_free_below_the_range_and_out_of_taken() -> None:
    taken = frozenset(range(LOWEST_PORT, LOWEST_PORT + 2000))
    for _ in range(50):
        port = free_port(10000, taken)
        assert port not in taken and port + 10000 not in taken
        assert port + 10000 < first_ephemeral_port()
        assert port_is_free(port) and port_is_free(port + 10000)


def test_a_bound_port_is_not_free() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert not port_is_free(int(sock.getsockname()[1]))


def test_a_twin_wider_than_the_range_below_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no port range below"):
        free_port(first_ephemeral_port())
