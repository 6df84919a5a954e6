"""The network of a real node: a namespace of its own, a veth pair to the host, and a way to the API server.

The control plane listens on 127.0.0.1 only, and this machine's own network
interface is never a destination. So each real node lives in a network
namespace the cluster creates (`phx-<cluster>-<n>`), joined to the host by a
veth pair on a /30 of 10.213.0.0/16; its pods get a /24 of 10.244.0.0/16 on a
CNI bridge inside it. Every address traffic goes to is loopback or inside a
namespace of ours:

- the kubelet, and pods, reach the API server through a forwarder listening
  inside the node's namespace on the API server's port, whose outgoing
  sockets are made in the host's namespace and connect to 127.0.0.1 (a
  socket keeps the namespace it was made in);
- a pod's in-cluster address of the API server (the `kubernetes` Service,
  10.0.0.1:443; there is no kube-proxy) is DNATed by one iptables rule in the
  node's namespace to that forwarder;
- the API server reaches the kubelet (logs, exec) at the node's address, and
  webhook pods at their pod address (it routes to Service endpoints), through
  a host route into the node's namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import ipaddress
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
NODE_NET = ipaddress.ip_network("10.213.0.0/16")
POD_NET = ipaddress.ip_network("10.244.0.0/16")
KUBERNETES_SERVICE = ("10.0.0.1", 443)
_CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class NodeNet:
    """One node's slot: slot n owns 10.213.n.0/30 (host .1, node .2) and pods 10.244.n.0/24."""

    netns: str
    slot: int

    @property
    def host_ip(self) -> str:
        return str(NODE_NET.network_address + (self.slot << 8) + 1)

    @property
    def node_ip(self) -> str:
        return str(NODE_NET.network_address + (self.slot << 8) + 2)

    @property
    def pod_cidr(self) -> str:
        return str(ipaddress.ip_network((int(POD_NET.network_address) + (self.slot << 8), 24)))

    @property
    def pod_gateway(self) -> str:
        return str(ipaddress.ip_network(self.pod_cidr).network_address + 1)

    @property
    def host_link(self) -> str:
        return f"phx{self.slot}h"

    def nsenter(self) -> list[str]:
        """Prefix that runs a command in this node's network namespace only (mounts stay shared with the host)."""
        return ["nsenter", f"--net={NETNS_DIR / self.netns}"]


def netns_name(cluster: str, index: int) -> str:
    return f"phx-{cluster}-{index}"


def used_slots() -> set[int]:
    """Slots whose host route exists, whatever cluster made them."""
    out = _ip("-4", "route", "show", "root", str(POD_NET), check=False).stdout
    slots = set()
    for line in out.splitlines():
        net = ipaddress.ip_network(line.split()[0], strict=False)
        if net.prefixlen == 24:
            slots.add((int(net.network_address) - int(POD_NET.network_address)) >> 8)
    return slots


def create(netns: str, api_port: int, *, taken: set[int]) -> NodeNet:
    """Make the namespace, its veth pair, routes and the Service DNAT; `taken` holds slots already handed out."""
    slot = next(s for s in range(256) if s not in taken | used_slots())
    net = NodeNet(netns, slot)
    delete(net)
    _ip("netns", "add", netns)
    inside = net.nsenter()
    _ip("link", "add", net.host_link, "type", "veth", "peer", "name", "eth0", "netns", netns)
    _ip("addr", "add", f"{net.host_ip}/30", "dev", net.host_link)
    _ip("link", "set", net.host_link, "up")
    for cmd in (
        ["ip", "link", "set", "lo", "up"],
        ["ip", "addr", "add", f"{net.node_ip}/30", "dev", "eth0"],
        ["ip", "link", "set", "eth0", "up"],
        ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
        # a route, so the node's own processes (host-network pods) get as far as the OUTPUT rule below
        ["ip", "route", "add", f"{KUBERNETES_SERVICE[0]}/32", "dev", "eth0"],
        _dnat("PREROUTING", f"{net.node_ip}:{api_port}"),  # pods
        _dnat("OUTPUT", f"{net.node_ip}:{api_port}"),  # the node's own processes
    ):
        subprocess.run([*inside, *cmd], check=True, capture_output=True, text=True)
    _ip("route", "add", net.pod_cidr, "via", net.node_ip, "dev", net.host_link)
    return net


def _dnat(chain: str, to: str) -> list[str]:
    """The rule that stands in for kube-proxy for the one Service a pod needs: the API server's."""
    service, port = KUBERNETES_SERVICE
    return ["iptables", *f"-t nat -A {chain} -d {service} -p tcp --dport {port} -j DNAT --to-destination {to}".split()]


def delete(net: NodeNet) -> None:
    """Remove the namespace (its end of the veth pair goes with it, and the host end and route with that)."""
    _ip("route", "del", net.pod_cidr, check=False)
    _ip("link", "del", net.host_link, check=False)
    _ip("netns", "delete", net.netns, check=False)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def _forward(listener: socket.socket, target: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def serve(netns: str, port: int) -> None:
    """Listen on every address of `netns` at `port`, forward each connection to 127.0.0.1:`port` of the host.

    The listening socket is made inside the node's namespace, the process then returns to the host's, where
    every outgoing socket is made: no address outside loopback and our namespaces is ever dialled.
    """
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    node = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        _setns(node)
        try:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("0.0.0.0", port))
            listener.listen(128)
        finally:
            _setns(home)
    finally:
        os.close(node)
        os.close(home)
    asyncio.run(_forward(listener, ("127.0.0.1", port)))


def main() -> None:
    parser = argparse.ArgumentParser(description="forward a node namespace's API server port to the host's loopback")
    parser.add_argument("--netns", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(args.netns, args.port)


if __name__ == "__main__":
    main()
