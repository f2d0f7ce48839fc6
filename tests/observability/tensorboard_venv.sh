# Sourced by the observability script tests: a virtual environment under
# the build directory with TensorBoard from PyPI (the only thing syncfac
# takes from PyPI, and only for its tests). Debian's python3 and
# python3-venv come from scripts/install-deps.sh. Sets $tb_python; skips
# (exit 77, saying why) when python3 or PyPI cannot be had.
#
#   . tensorboard_venv.sh BUILD_DIR
tb_venv="${1:?usage: . tensorboard_venv.sh BUILD_DIR}/tensorboard-venv"
skip() { echo "skipped: $*"; exit 77; }
[ -x /usr/bin/python3 ] || skip "Debian's python3 is missing (scripts/install-deps.sh installs it)"
tb_python="$tb_venv/bin/python"
if ! "$tb_python" -c "import tensorboard" 2>/dev/null; then
  # One installer at a time: parallel CTest runs share the venv.
  exec 9>"$tb_venv.lock"
  flock -w 600 9 || skip "timed out waiting for another test installing $tb_venv"
  if ! "$tb_python" -c "import tensorboard" 2>/dev/null; then
    rm -rf "$tb_venv"
    timeout 120 /usr/bin/python3 -m venv "$tb_venv" \
      || skip "cannot create a virtual environment (python3-venv missing?)"
    if ! timeout 480 "$tb_venv/bin/pip" install --quiet --disable-pip-version-check \
         --timeout 30 --retries 1 tensorboard; then
      rm -rf "$tb_venv"
      skip "cannot install the tensorboard package from PyPI (no network?)"
    fi
  fi
  exec 9>&-
fi
