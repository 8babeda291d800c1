"""Free loopback ports for the services the tests start."""

import socket

_given: set[int] = set()


def free_port() -> int:
    """A port free on 127.0.0.1 now and not handed out before in this process: the kernel may
    offer a port again once its probe socket closes, and two of one Ray node's components on
    one port stop the node from starting."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _given:
            _given.add(port)
            return port
