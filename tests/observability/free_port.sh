# Sourced by the observability script tests: free_port prints a TCP port
# of 127.0.0.1 that nothing listens on now (the system's choice).
free_port() {
  /usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
