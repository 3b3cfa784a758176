"""A second host on this machine: a network namespace joined to this one by a veth pair.

A test runs a process there and cuts the link (a ``blackhole`` qdisc on both ends): packets
vanish with no reset, as when a server's host dies, a failover moves its address or a firewall
drops a flow. Nothing in user space can fake that (a proxy's kernel still acknowledges every
byte), and the kernel's dead-peer detection acts only on unacknowledged data. A
:class:`~tests.support.faultproxy.FaultProxy` on this side's address forwards to the local
servers, which listen on loopback only. Needs root and iproute2, as on this machine's kind.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

# RFC 2544's benchmarking range, unused by real networks: a /30 per host, by process and count.
SUBNETS = ipaddress.ip_network("198.18.0.0/15")
_count = itertools.count()


def run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def ip(*args: str) -> None:
    run(["ip", *args])


@dataclass(frozen=True)
class RemoteHost:
    name: str  # the namespace, and the prefix of both link ends
    near: str  # this side's address on the link
    far: str  # the other side's

    @property
    def near_link(self) -> str:
        return f"{self.name}a"

    @property
    def far_link(self) -> str:
        return f"{self.name}b"

    def command(self, *argv: str) -> list[str]:
        """``argv`` run on the other host."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Every packet on the link is dropped from now on, both ways."""
        # The blackhole qdisc drops every packet it is given (netem is not in every kernel).
        loss = ("root", "blackhole")
        run(["tc", "qdisc", "add", "dev", self.near_link, *loss])
        run(self.command("tc", "qdisc", "add", "dev", self.far_link, *loss))


@contextlib.contextmanager
def remote_host() -> Iterator[RemoteHost]:
    index = (os.getpid() * 16 + next(_count)) % (SUBNETS.num_addresses // 4)
    base = SUBNETS.network_address + index * 4
    name = f"aw{os.getpid() % 100000}x{index % 1000}"  # link names: at most 15 characters
    host = RemoteHost(name=name, near=str(base + 1), far=str(base + 2))
    ip("netns", "add", host.name)
    try:
        ip("link", "add", host.near_link, "type", "veth", "peer", "name", host.far_link)
        ip("link", "set", host.far_link, "netns", host.name)
        ip("addr", "add", f"{host.near}/30", "dev", host.near_link)
        ip("link", "set", host.near_link, "up")
        run(host.command("ip", "addr", "add", f"{host.far}/30", "dev", host.far_link))
        run(host.command("ip", "link", "set", host.far_link, "up"))
        run(host.command("ip", "link", "set", "lo", "up"))
        yield host
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            ip("link", "del", host.near_link)  # takes its peer with it
        with contextlib.suppress(subprocess.SubprocessError):
            ip("netns", "del", host.name)
