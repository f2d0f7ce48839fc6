#!/usr/bin/env bash
# Packs the GPU check's programs, built here with CUDA, into a folder that
# runs on a GPU machine lacking the project's build dependencies (CAF,
# Boost, Eigen): the programs, every shared library they load except the
# CUDA libraries and the driver (taken from the GPU machine), and this
# machine's dynamic loader and C library, so that the GPU machine's own
# glibc version does not matter. bench/gpu_check.sh runs such a folder with
# GPU_BUNDLE=DIR instead of building.
#
#   bash scripts/gpu_bundle.sh BUILD_DIR OUT_DIR [program...]
#
# BUILD_DIR is a CUDA build (cmake -DSYNCFAC_ENABLE_CUDA=ON) in which the
# programs were built; without a program list the GPU tests, bench_gpu and
# convnet_mnist_single are packed.

set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR OUT_DIR [program...]" >&2; exit 2; }
build=$1
out=$2
shift 2
programs=("$@")
if [ ${#programs[@]} -eq 0 ]; then
  programs=(test_kernels_cuda_backend test_kernels_cuda_kfac
            test_kernels_cuda_device_selection test_actors_device_gpu
            bench_gpu convnet_mnist_single)
fi

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for p in "${programs[@]}"; do
  found=
  for d in bin tests; do
    [ -x "$build/$d/$p" ] && found="$build/$d/$p" && break
  done
  [ -n "$found" ] || { echo "gpu_bundle: $p not built in $build" >&2; exit 1; }
  cp "$found" "$out/bin/"
done

# Every library the programs load, by the path this machine resolves,
# except CUDA's own (their versions must match the GPU machine's driver).
cuda_lib='^lib(cuda|cudart|cublas|cublasLt|cusolver|cusparse|nvJitLink|nvrtc)\.'
for p in "$out"/bin/*; do
  ldd "$p" | awk '/=> \//{print $3} $1 ~ /^\/.*ld-linux/{print $1}'
done | sort -u | while read -r lib; do
  base=$(basename "$lib")
  if [[ $base =~ $cuda_lib ]]; then
    continue
  fi
  cp -L "$lib" "$out/lib/$base"
done
loader=$(ls "$out"/lib/ld-linux-x86-64.so.* 2>/dev/null | head -1)
[ -n "$loader" ] || { echo "gpu_bundle: no dynamic loader found by ldd" >&2; exit 1; }

# bin/run PROGRAM [ARGS]: the program under the packed loader, with the
# packed libraries first and the GPU machine's CUDA libraries and driver
# after them.
cat >"$out/run" <<'EOF'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
prog=$1
shift
dirs="$here/lib"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
         /usr/lib/x86_64-linux-gnu /usr/lib64 ${LD_LIBRARY_PATH//:/ }; do
  [ -d "$d" ] && dirs="$dirs:$d"
done
for d in /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib \
         /usr/local/lib/python3*/dist-packages/nvidia/*/lib; do
  [ -d "$d" ] && dirs="$dirs:$d"
done
exec "$here/lib/LOADER" --library-path "$dirs" "$here/bin/$prog" "$@"
EOF
sed -i "s|LOADER|$(basename "$loader")|" "$out/run"
chmod +x "$out/run"
du -sh "$out"
