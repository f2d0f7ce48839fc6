# Sourced by the observability script tests. Ports come from
# scripts/free_ports.py, below the kernel's ephemeral range, where no
# outgoing connection takes one between the check and the task's bind.
free_ports_script="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/free_ports.py"

# free_port prints a TCP port of loopback that nothing listens on now.
free_port() {
  /usr/bin/python3 "$free_ports_script" 1
}

# free_ports N prints the first of N consecutive ports of loopback that
# nothing listens on now.
free_ports() {
  /usr/bin/python3 "$free_ports_script" "$1" --consecutive
}
