# Sourced by the observability script tests that run a program in the
# background: makes the scratch directory $work (kept, and its path
# printed, when KEEP_WORK is set), ends the background program $pid and
# removes $work on exit, and defines fail, which prints its message and
# the last ${fail_lines:-20} lines of $work/run.log and exits 1.
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
[ -n "${KEEP_WORK:-}" ] && trap - EXIT && echo "work: $work"
fail() { echo "FAIL: $*"; [ -f "$work/run.log" ] && tail -"${fail_lines:-20}" "$work/run.log"; exit 1; }
