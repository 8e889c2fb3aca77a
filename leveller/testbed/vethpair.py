"""Two fresh network namespaces joined by a veth pair, removed on exit.

    with VethPair() as pair:
        subprocess.run(pair.exec_in(pair.ns_b, ["iperf3", "-s", "-1"]))
        ...  # pair.ns_a / pair.if_a / pair.ip_a talk to pair.ns_b / pair.if_b / pair.ip_b

Names carry the pid and a random suffix so concurrent runs never collide.
Each side gets an IPv4 and an IPv6 address (no DAD wait) and its loopback up.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import socket
from types import TracebackType
from typing import Any

from leveller.errors import UserError

IFA_F_NODAD = 0x02


class VethPair:
    """ns_a:if_a (ip_a, ip6_a) <-> ns_b:if_b (ip_b, ip6_b)."""

    def __init__(self, prefix: str = "lv", net4: str = "10.213.0.0/24", net6: str = "fd00:213::/64",
                 mtu: int | None = None) -> None:
        if not prefix.isalnum() or len(prefix) > 4:
            raise UserError(f"prefix={prefix!r}: allowed are 1-4 letters or digits (interface names are short)")
        n4, n6 = ipaddress.ip_network(net4), ipaddress.ip_network(net6)
        if n4.version != 4 or n4.num_addresses < 4 or n6.version != 6 or n6.num_addresses < 4:
            raise UserError(f"net4={net4!r}, net6={net6!r}: need an IPv4 and an IPv6 network of 4+ addresses")
        tag = f"{os.getpid() % 100000}{secrets.token_hex(2)}"
        self.ns_a, self.ns_b = f"{prefix}-{tag}-a", f"{prefix}-{tag}-b"
        self.if_a, self.if_b = f"{prefix}{tag}a"[:15], f"{prefix}{tag}b"[:15]
        self.ip_a, self.ip_b = n4[1], n4[2]
        self.ip6_a, self.ip6_b = n6[1], n6[2]
        self.prefixlen4, self.prefixlen6 = n4.prefixlen, n6.prefixlen
        self.mtu = mtu
        self._created: list[str] = []

    def __enter__(self) -> VethPair:
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _create(self) -> None:
        from pyroute2 import IPRoute, NetNS, netns

        for ns in (self.ns_a, self.ns_b):
            netns.create(ns)
            self._created.append(ns)
        with IPRoute() as ipr:
            ipr.link("add", ifname=self.if_a, kind="veth", peer=self.if_b)
            try:
                for ifname, ns in ((self.if_a, self.ns_a), (self.if_b, self.ns_b)):
                    ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], net_ns_fd=ns)
            except BaseException:
                ipr.link("del", ifname=self.if_a)
                raise
        for ns, ifname, ip4, ip6 in ((self.ns_a, self.if_a, self.ip_a, self.ip6_a),
                                     (self.ns_b, self.if_b, self.ip_b, self.ip6_b)):
            nsr: Any = NetNS(ns, flags=0)
            try:
                idx = nsr.link_lookup(ifname=ifname)[0]
                if self.mtu:
                    nsr.link("set", index=idx, mtu=self.mtu)
                nsr.addr("add", index=idx, address=str(ip4), prefixlen=self.prefixlen4)
                nsr.addr("add", index=idx, address=str(ip6), prefixlen=self.prefixlen6, flags=IFA_F_NODAD)
                nsr.link("set", index=idx, state="up")
                nsr.link("set", index=nsr.link_lookup(ifname="lo")[0], state="up")
            finally:
                nsr.close()

    def close(self) -> None:
        """Remove both namespaces (the veth ends go with them); idempotent."""
        from pyroute2 import netns

        while self._created:
            ns = self._created.pop()
            try:
                netns.remove(ns)
            except OSError:
                pass

    @staticmethod
    def exec_in(ns: str, argv: list[str]) -> list[str]:
        """argv prefixed to run inside namespace ns."""
        return ["ip", "netns", "exec", ns, *argv]

    @staticmethod
    def socket(ns: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM, proto: int = 0) -> socket.socket:
        """A socket created inside namespace ns (usable from this process)."""
        from pyroute2 import netns

        return netns.create_socket(ns, family, kind, proto)
