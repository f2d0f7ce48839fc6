#!/usr/bin/env bash
# A metrics endpoint that a bad client cannot stop, on a real run: a
# deterministic sync run in one process (one worker, no initial tokens)
# with --metrics_port, while 300 idle connections stay open and four
# clients send 1 MB request heads over and over. Prometheus scrapes of
# /metrics must each succeed within 1 s for as long as the run trains, and
# the run must end with the params_digest of the same run without a metrics
# port (the flood costs the server, never the training).
#
#   tests/observability/metrics_under_load.sh BUILD_DIR
set -euo pipefail

build=${1:?usage: metrics_under_load.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/free_port.sh"
bin="$build/bin/convnet_mnist_single"
. "$here/scratch_run.sh"

steps=3000
flags=(--fake_data --fake_train_size 2048 --fake_test_size 200 --batch_size 16
       --threads 1 --seed 5 --worker_replicas 1 --ps_tasks 2 --num_tokens 0
       --steps "$steps" --log_every 50 --no_progress)
port=$(free_port)
"$bin" "${flags[@]}" --metrics_port "$port" --summary "$work/loaded.json" \
  > "$work/run.log" 2>&1 &
pid=$!

/usr/bin/python3 - "$port" "$pid" "$steps" > "$work/load.log" 2>&1 <<'PY' || { cat "$work/load.log"; fail "scrapes under load"; }
import os, re, socket, sys, threading, time
port, pid, STEPS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def alive():
    # The program is the shell's child: ended but not reaped is a zombie.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False

def ended_soon():
    deadline = time.time() + 10
    while time.time() < deadline:
        if not alive():
            return True
        time.sleep(0.1)
    return False

def scrape(timeout):
    stage = "connect"
    out = b""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.settimeout(timeout)
        stage = "send"
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain;version=0.0.4\r\n\r\n")
        stage = "recv"
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
        s.close()
        return out
    except OSError as e:
        raise type(e)(e.errno, "%s at %s after %d bytes" % (e.strerror, stage, len(out)))

# The endpoint up and training.
deadline = time.time() + 120
while True:
    try:
        if b"syncfac_train_loss" in scrape(5):
            break
    except OSError:
        pass
    if time.time() > deadline or not alive():
        sys.exit("no /metrics with a train loss within 120 s")
    time.sleep(0.2)

idle = []
for _ in range(300):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /met")
    idle.append(s)

stop = False
refused = [0]
def flood():
    head = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"p" * (1 << 20) + b"\r\n\r\n"
    while not stop:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.settimeout(10)
            s.sendall(head)
            if s.recv(64).startswith(b"HTTP/1.1 431"):
                refused[0] += 1
            s.close()
        except OSError:
            pass
threads = [threading.Thread(target=flood) for _ in range(4)]
for t in threads:
    t.start()

times = []
last_step = 0
try:
    while True:
        t0 = time.time()
        try:
            body = scrape(5)
        except OSError as e:
            # Refused, or reset while the endpoint closes: the run ended
            # (its endpoint stops just before the process exits). Taken for
            # the end only after 80 % of the steps and when the process is
            # gone within 10 s; anything else is a failure.
            if (isinstance(e, (ConnectionRefusedError, ConnectionResetError))
                    and last_step >= 0.8 * STEPS and ended_soon()):
                break
            sys.exit("a scrape failed while the run trains (last step seen "
                     "%d): %r" % (last_step, e))
        took = time.time() - t0
        if not body:
            sys.exit("an empty answer while the run trains")
        step = re.search(rb"^syncfac_global_step\{[^}]*\} (\d+)", body, re.M)
        if not body.startswith(b"HTTP/1.1 200") or step is None:
            sys.exit("a scrape was not a Prometheus answer: %r" % body[:120])
        last_step = int(step.group(1))
        if took >= 1.0:
            sys.exit("a scrape took %.3f s (>= 1 s) under load" % took)
        times.append(took)
        time.sleep(0.05)
finally:
    stop = True
    for t in threads:
        t.join()
if len(times) < 5:
    sys.exit("only %d scrapes before the run ended: too short to tell" % len(times))
if refused[0] == 0:
    sys.exit("no 1 MB head was answered 431")
print("%d scrapes under load up to step %d, slowest %.3f s, median %.3f s; "
      "%d 1 MB heads refused with 431"
      % (len(times), last_step, max(times), sorted(times)[len(times) // 2],
         refused[0]))
PY
wait "$pid" || fail "the run under load exited $?"
pid=
cat "$work/load.log"
"$bin" "${flags[@]}" --summary "$work/quiet.json" > "$work/quiet.log" 2>&1 \
  || { cat "$work/quiet.log"; fail "the quiet run failed"; }
digest() { grep -o '"params_digest": "[0-9a-f]*"' "$1" | cut -d'"' -f4; }
loaded=$(digest "$work/loaded.json")
quiet=$(digest "$work/quiet.json")
echo "params_digest under load $loaded, without a metrics port $quiet"
[ -n "$loaded" ] && [ "$loaded" = "$quiet" ] || fail "the digests differ"
echo "PASS: every scrape within 1 s under load; parameters unchanged"
