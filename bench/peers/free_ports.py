#!/usr/bin/env python3
"""Prints N distinct TCP ports free on loopback now, one a line, for a cluster's tasks.

Chosen at random below the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), so that no outgoing connection of
this machine is handed one of them in the moment between this check and the
task's own bind, and two benches started together are unlikely to pick the
same. A port counts as free when it can be bound, without SO_REUSEADDR, on
0.0.0.0 and on 127.0.0.1 (TensorFlow's gRPC servers listen on every address,
syncfac's nodes on the one in the cluster file) and on :: where the machine
has IPv6; every socket is held until all N are found, so none is named twice.
Whoever binds the port can still lose a race to another program: the bench
scripts start the cluster again on new ports when a task says so.

  bench/peers/free_ports.py N
"""
import random
import socket
import sys

LOWEST = 10000
TRIES = 2000


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def hold(port):
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


def main(argv):
    if len(argv) != 2 or not argv[1].isdigit() or not 1 <= int(argv[1]) <= 64:
        print("free_ports: usage: free_ports.py N (1 to 64 ports)", file=sys.stderr)
        return 2
    n, high = int(argv[1]), ephemeral_low() - 1
    if high - LOWEST < 100:
        print(f"free_ports: the ephemeral range starts at {high + 1}: no room below it",
              file=sys.stderr)
        return 1
    found, held = [], []
    for _ in range(TRIES):
        port = random.randint(LOWEST, high)
        if port in found:
            continue
        sockets = hold(port)
        if sockets is None:
            continue
        found.append(port)
        held.extend(sockets)
        if len(found) == n:
            break
    for s in held:
        s.close()
    if len(found) < n:
        print(f"free_ports: found {len(found)} free ports of {n} in {TRIES} tries "
              f"({LOWEST}-{high})", file=sys.stderr)
        return 1
    print("\n".join(map(str, found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
