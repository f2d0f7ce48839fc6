#!/usr/bin/env bash
# The Dockerfile's runtime stage, built with buildah from this build's
# programs (--target prebuilt: the build stage is the ~25 min compile CI
# has no time for; docs/containers.md has the full build and its figures;
# a build with CUDA has its programs built once more without it, as the
# build stage makes them), and run:
#   - every program of `cmake --install --component programs` is in the
#     image and starts (its shared libraries are there: --help), and so
#     are the main job's flags, the topologies, the LICENSE and the data;
#   - no compiler, CMake or development headers are in it, and it runs as
#     the unprivileged user 10001;
#   - the main job's K-FAC flags (the image's default command's) for 60
#     steps on the image's Fashion-MNIST reach global step 60 and a test
#     accuracy above 0.5 (chance: 0.1);
#   - a two-worker cluster of the image's example topology through
#     syncfac-launch ends with its summary;
#   - the image adds less than SIZE_LIMIT_MB to its base (it printed).
#
# No registry is needed: the base debian:12-slim is made here with
# `debootstrap --variant=minbase bookworm` (apt's caches emptied as the
# registry's image has them) once per build directory and kept in the
# test's own buildah storage (vfs driver, chroot isolation) under
# WORK_DIR, which also keeps the store out of the system's. The stages'
# layers stay there too (--layers): a later run whose install-deps.sh is
# the same reuses the runtime packages' layer.
#
#   tests/image/image_test.sh BUILD_DIR SOURCE_DIR WORK_DIR TAG PROGRAM...
#
# Needs root (rootful buildah, debootstrap; scripts/test.sh runs as root)
# and fails, saying so, without it: a test never skips for a right
# (docs/testing.md, "Skips").
set -euo pipefail

build_dir=${1:?usage: image_test.sh BUILD_DIR SOURCE_DIR WORK_DIR TAG PROGRAM...}
source_dir=${2:?source dir}
work=${3:?work dir}
tag=${4:?image tag}
shift 4
programs=("$@")
[ ${#programs[@]} -gt 0 ] || { echo "FAIL: no programs named"; exit 1; }
size_limit_mb=${SYNCFAC_IMAGE_SIZE_LIMIT_MB:-120}
mirror=${SYNCFAC_DEBIAN_MIRROR:-http://deb.debian.org/debian}

fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] \
  || fail "needs root for rootful buildah and debootstrap (scripts/test.sh runs as root)"
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null \
    || fail "$tool is missing (scripts/install-deps.sh test installs it)"
done

store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
bah() { buildah "${store[@]}" "$@"; }
ctx=$work/context
containers=()
cleanup() {
  for c in "${containers[@]}"; do bah rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$ctx" "$work/base"
}
trap cleanup EXIT
mkdir -p "$work"

# --- the base, debian:12-slim, made once --------------------------------
base=docker.io/library/debian:12-slim
if ! bah inspect --type image "$base" >/dev/null 2>&1; then
  echo "making $base with debootstrap --variant=minbase bookworm ($mirror)"
  rm -rf "$work/base"
  timeout 900 debootstrap --variant=minbase bookworm "$work/base" "$mirror" \
    > "$work/debootstrap.log" 2>&1 \
    || fail "debootstrap of bookworm failed (its log: $work/debootstrap.log): $(tail -n 5 "$work/debootstrap.log")"
  rm -f "$work"/base/var/cache/apt/archives/*.deb
  rm -rf "$work"/base/var/lib/apt/lists/*
  c=$(bah from scratch)
  containers+=("$c")
  tar -C "$work/base" -cf "$work/base.tar" .
  bah add "$c" "$work/base.tar" / >/dev/null
  rm -f "$work/base.tar"
  bah config --cmd /bin/bash "$c"
  bah commit -q --rm "$c" "$base" >/dev/null
  containers=()
fi

# --- the runtime stage from this build's programs -----------------------
rm -rf "$ctx"
mkdir -p "$ctx/scripts"
cp "$source_dir/scripts/install-deps.sh" "$ctx/scripts/"
# The image's programs are the CPU ones its build stage makes (Debian has
# no CUDA 13 to build or run the GPU backend with). A build of this tree
# with CUDA links NVIDIA's libraries, which the runtime stage does not
# have: then the programs are built once more without CUDA, as the
# Dockerfile builds them, under WORK_DIR (kept, so a later run only
# rebuilds what changed).
programs_build=$build_dir
if ldd "$build_dir/bin/${programs[0]}" 2>/dev/null | grep libcudart > /dev/null; then
  programs_build=$work/cpu-programs
  echo "this build has CUDA: building the programs without it, as the image's build stage does ($programs_build)"
  start=$(date +%s)
  { cmake -S "$source_dir" -B "$programs_build" -DCMAKE_BUILD_TYPE=Release \
      -DSYNCFAC_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF \
    && cmake --build "$programs_build" -j"$(nproc)" --target syncfac_programs; } \
    > "$work/cpu-programs.log" 2>&1 \
    || fail "building the programs without CUDA failed (its log: $work/cpu-programs.log): $(tail -n 20 "$work/cpu-programs.log")"
  echo "built the CPU programs in $(( $(date +%s) - start )) s"
fi
cmake --install "$programs_build" --component programs --prefix "$ctx/prebuilt" --strip \
  > "$work/install.log" || fail "cmake --install --component programs failed: $(cat "$work/install.log")"
for p in "${programs[@]}"; do
  [ -x "$ctx/prebuilt/bin/$p" ] \
    || fail "cmake --install did not install $p (is it built? scripts/test.sh builds everything)"
done
echo "building $tag (--target prebuilt)"
start=$(date +%s)
bah bud --layers --isolation chroot --target prebuilt -f "$source_dir/Dockerfile" \
  -t "$tag" "$ctx" > "$work/bud.log" 2>&1 \
  || fail "buildah bud failed (its log: $work/bud.log): $(tail -n 20 "$work/bud.log")"
echo "built $tag in $(( $(date +%s) - start )) s"

c=$(bah from "$tag")
containers+=("$c")
mnt=$(bah mount "$c")
# in_image COMMAND: runs a shell command in the image as its user; its
# exit status, and its output read back from the container's file system
# (buildah run's own forwarding of a short-lived process's output was
# seen to lose it under load).
in_image() {
  local status=0
  rm -f "$mnt/tmp/in_image.out"
  bah run --isolation chroot "$c" -- sh -c "($1) > /tmp/in_image.out 2>&1" \
    > /dev/null 2>&1 || status=$?
  cat "$mnt/tmp/in_image.out" 2>/dev/null || true
  return $status
}

# --- the programs and their libraries -----------------------------------
for p in "${programs[@]}"; do
  out=$(in_image "$p --help" 2>&1) \
    || fail "$p --help in the image failed: $out"
  [ -n "$out" ] || fail "$p --help in the image printed nothing"
  echo "image: $p --help: $(echo "$out" | head -n 1)"
done
for f in /usr/local/share/syncfac/main_job/kfac.flags \
         /usr/local/share/syncfac/topologies/momentum_2w_1ps.json \
         /usr/local/share/doc/syncfac/LICENSE \
         /usr/share/datasets/fashion-mnist; do
  in_image "test -e $f" >/dev/null || fail "the image has no $f"
done
out=$(in_image 'id -u')
[ "$out" = 10001 ] || fail "the image runs as user '$out', not 10001"
for tool in c++ g++ cmake make; do
  if in_image "command -v $tool" >/dev/null; then
    fail "the runtime image holds the build tool $tool"
  fi
done
for dir in /usr/include/caf /usr/include/eigen3 /usr/local/include/syncfac \
           /usr/local/lib/libsyncfac.a /usr/local/lib/cmake; do
  if in_image "test -e $dir" >/dev/null; then
    fail "the runtime image holds $dir (development files)"
  fi
done

# --- the main job, short -------------------------------------------------
cmd=$(bah inspect --type image --format '{{.OCIv1.Config.Cmd}}' "$tag")
case "$cmd" in
  *convnet_mnist_single*main_job/kfac.flags*) ;;
  *) fail "the image's command is not the main job's: $cmd" ;;
esac
out=$(in_image 'cd /tmp && convnet_mnist_single $(cat /usr/local/share/syncfac/main_job/kfac.flags) --steps 60 --eval_every 0 --threads 1 --no_progress --summary /tmp/main_job.json > /tmp/main_job.log 2>&1; echo "exit $?"; cat /tmp/main_job.log /tmp/main_job.json') \
  || fail "the main job could not be started in the image: $out"
echo "$out" | tail -n 40
echo "$out" | grep -q '^exit 0$' || fail "the main job in the image did not exit 0"
echo "$out" | grep -q '"global_step": 60' || fail "the main job's summary does not end at global step 60"
accuracy=$(echo "$out" | grep -o '"test_accuracy": [0-9.e+-]*' | head -n 1 | sed 's/.*: //')
[ -n "$accuracy" ] || fail "the main job's summary has no test_accuracy"
awk -v a="$accuracy" 'BEGIN { exit !(a > 0.5) }' \
  || fail "the main job reached test accuracy $accuracy after 60 steps (chance: 0.1; 0.76 measured)"
echo "image: the main job's K-FAC flags, 60 steps: test accuracy $accuracy"

# --- a cluster through the launcher -------------------------------------
out=$(in_image 'cd /tmp && syncfac-launch --cluster /usr/local/share/syncfac/topologies/momentum_2w_1ps.json -- --fake_data --steps 10 --threads 1 --no_progress --summary /tmp/cluster.json > /tmp/cluster.log 2>&1; echo "exit $?"; tail -n 20 /tmp/cluster.log; cat /tmp/cluster.json') \
  || fail "the launcher could not be started in the image: $out"
echo "$out" | grep -q '^exit 0$' || fail "the cluster in the image did not exit 0: $out"
echo "$out" | grep -q '"global_step": 10' || fail "the cluster's summary does not end at global step 10: $out"
echo "image: a launcher cluster (2 workers, 1 PS) ended at global step 10"

# --- the size ------------------------------------------------------------
image_mb=$(bah images --format '{{.Size}}' --filter "reference=$tag" | head -n 1)
base_mb=$(bah images --format '{{.Size}}' --filter "reference=$base" | head -n 1)
rm -f "$mnt/tmp/in_image.out" "$mnt"/tmp/*.json "$mnt"/tmp/*.log
image_bytes=$(du -sxb "$mnt" | cut -f1)
bah umount "$c" >/dev/null
b=$(bah from "$base")
containers+=("$b")
mnt=$(bah mount "$b")
base_bytes=$(du -sxb "$mnt" | cut -f1)
bah umount "$b" >/dev/null
added_mb=$(( (image_bytes - base_bytes) / 1000000 ))
echo "image: $tag is $image_mb ($image_bytes bytes of files), its base $base_mb ($base_bytes bytes): $added_mb MB added"
[ "$added_mb" -lt "$size_limit_mb" ] \
  || fail "$tag adds $added_mb MB to its base, more than $size_limit_mb MB"
# Earlier runs' images, untagged by this one (the layers this image
# stands on are kept).
bah rmi --prune >/dev/null 2>&1 || true
echo "image: every check passed"
