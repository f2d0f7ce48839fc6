# syncfac's programs in an image (docs/containers.md). A build stage
# compiles them on debian:12-slim with Debian's build packages
# (scripts/install-deps.sh build); the runtime stage has only the
# programs, their data files, their shared libraries and the main job's
# data set (install-deps.sh runtime): no compiler, no headers.
#
#   buildah bud -t syncfac:0.1.0 .     (or podman build / docker build)
#   podman run --rm syncfac:0.1.0      (the main job's K-FAC run)
#
# The tag is the project's version; examples/kubernetes/ names that image.
# `--target prebuilt` skips the build stage and takes the programs from
# the context's prebuilt/ directory instead, as
# `cmake --install BUILD --component programs --prefix CONTEXT/prebuilt
# --strip` puts them there: the image test (tests/image) builds the runtime stage
# that way. The programs are built for x86-64-v3 (AVX2, FMA;
# CMakeLists.txt's SYNCFAC_ARCH), as in build/.

FROM debian:12-slim AS compiled
COPY scripts/install-deps.sh /src/scripts/install-deps.sh
RUN /src/scripts/install-deps.sh build \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
    && cmake --build /build -j"$(nproc)" --target syncfac_programs \
    && cmake --install /build --component programs --prefix /opt/syncfac --strip

# What the runtime stage holds besides the programs, whichever way they
# come.
FROM debian:12-slim AS runtime-base
COPY scripts/install-deps.sh /tmp/install-deps.sh
# apt's downloads and lists cleaned here: the registry's debian:12-slim
# does it by its own apt configuration, a debootstrapped one does not.
RUN /tmp/install-deps.sh runtime \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
    && groupadd --gid 10001 syncfac \
    && useradd --uid 10001 --gid 10001 --create-home syncfac
# Not root; Kubernetes pods give the checkpoint volume to this group
# (securityContext.fsGroup in examples/kubernetes/).
USER 10001:10001
WORKDIR /home/syncfac
CMD ["sh", "-c", "exec convnet_mnist_single $(cat /usr/local/share/syncfac/main_job/kfac.flags)"]

# The runtime stage with programs built elsewhere (--target prebuilt).
FROM runtime-base AS prebuilt
COPY prebuilt/ /usr/local/

# The runtime stage (the default target): the build stage's programs.
FROM runtime-base AS runtime
COPY --from=compiled /opt/syncfac/ /usr/local/
