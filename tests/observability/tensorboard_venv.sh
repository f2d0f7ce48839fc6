# Sourced by the observability script tests: the tests' venv
# (scripts/test-venv.sh, made by scripts/test.sh) with TensorBoard's own
# reader. Sets $tb_python; fails, naming the script that makes it, when the
# venv is missing.
#
#   . tensorboard_venv.sh BUILD_DIR
tb_python="${1:?usage: . tensorboard_venv.sh BUILD_DIR}/test-venv/bin/python"
if ! "$tb_python" -c "import tensorboard" 2>/dev/null; then
  echo "FAILED: no TensorBoard in the tests' venv ($tb_python): scripts/test-venv.sh $1 makes it (scripts/test.sh does)"
  exit 1
fi
