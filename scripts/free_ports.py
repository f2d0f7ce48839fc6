#!/usr/bin/env python3
"""Free TCP ports on loopback for a cluster's tasks: N distinct ones, or
the first of N consecutive ones (--consecutive, for --port_base).

Chosen at random below the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), never
inside it: a port the kernel offers there (bind to port 0) may be handed,
in the moment between this check and the task's own bind, to an outgoing
connection of any process on the machine, the cluster's own tasks
included (a test's worker failed so in CI: "cannot publish this node on
127.0.0.1 port 50493"). Below the range only an explicit bind takes a
port, and two runs started together are unlikely to pick the same one.
A port counts as free when it can be bound, without SO_REUSEADDR, on
0.0.0.0 and on 127.0.0.1 (TensorFlow's gRPC servers listen on every
address, syncfac's nodes on the one in the cluster file) and on :: where
the machine has IPv6; every socket is held until all N are found, and a
process that imports this module is never handed a port twice.
tests/examples/process.hpp's free_port follows the same rule in C++.

  scripts/free_ports.py N                  N distinct ports, one a line
  scripts/free_ports.py N --consecutive    the first of N consecutive ports
"""
import random
import socket
import sys

LOWEST = 10000
TRIES = 2000
MOST = 64

_handed = set()


def ephemeral_low():
    """The lowest port of the kernel's ephemeral range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _hold(port):
    """Sockets bound to port on every address tried, or None when one is taken."""
    held = []
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1"),
                            (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 here
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            s.bind((address, port))
        except OSError as e:
            s.close()
            if family == socket.AF_INET6 and e.errno == 99:  # EADDRNOTAVAIL: no IPv6 address
                continue
            for h in held:
                h.close()
            return None
        if family == socket.AF_INET and address == "0.0.0.0":
            s.close()  # 0.0.0.0 and 127.0.0.1 cannot both be held: checked, then let go
            continue
        held.append(s)
    return held


def _hold_all(ports):
    """Sockets bound to every one of ports, or None (all let go) when one is taken."""
    held = []
    for port in ports:
        sockets = _hold(port)
        if sockets is None:
            for s in held:
                s.close()
            return None
        held.extend(sockets)
    return held


def _search(n, draw, what):
    """Draws lists of ports (draw(low, high)) below the ephemeral range
    until n are held, none of them found or handed before; returns them
    in the order found."""
    if not 1 <= n <= MOST:
        raise ValueError(f"free_ports: {n} {what} asked for, 1 to {MOST} can be")
    high = ephemeral_low() - 1
    if high - LOWEST < 100 + MOST:
        raise RuntimeError(f"free_ports: the ephemeral range starts at {high + 1}: "
                           f"no room below it (from {LOWEST})")
    found, held = [], []
    try:
        for _ in range(TRIES):
            ports = draw(LOWEST, high)
            if any(p in found or p in _handed for p in ports):
                continue
            sockets = _hold_all(ports)
            if sockets is None:
                continue
            found.extend(ports)
            held.extend(sockets)
            if len(found) >= n:
                _handed.update(found)
                return found
    finally:
        for s in held:
            s.close()
    raise RuntimeError(f"free_ports: no {n} {what} in {TRIES} tries ({LOWEST}-{high})")


def free_ports(n):
    """n distinct free ports below the ephemeral range, never handed before."""
    return _search(n, lambda low, high: [random.randint(low, high)], "free ports")


def free_port_run(n):
    """The first of n consecutive free ports below the ephemeral range,
    none handed before."""
    def run(low, high):
        base = random.randint(low, high - n + 1)
        return list(range(base, base + n))
    return _search(n, run, "consecutive free ports")[0]


def main(argv):
    args = argv[1:]
    consecutive = "--consecutive" in args
    args = [a for a in args if a != "--consecutive"]
    if len(args) != 1 or not args[0].isdigit():
        print("free_ports: usage: free_ports.py N [--consecutive] (1 to 64 ports)",
              file=sys.stderr)
        return 2
    try:
        if consecutive:
            print(free_port_run(int(args[0])))
        else:
            print("\n".join(map(str, free_ports(int(args[0])))))
    except (ValueError, RuntimeError) as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
