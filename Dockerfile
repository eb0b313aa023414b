# limiter: limiterd, limiterctl, limiter-bench and limiter-gateway on Debian 12.
#   docker build -t limiter .            (a registry's debian:bookworm-slim)
#   deploy/build-image.sh                (podman, a base image made with debootstrap)
# The image runs as uid 65532 with a read-only root filesystem: the only place written is
# /var/lib/limiterd, the RocksDB database of durable policies' keys (data_dir), a volume.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
# dev.sh's packages less what only tests and benchmarks' reports use; GTest and Google
# Benchmark stay because the top-level CMakeLists requires them to configure.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      g++ cmake ninja-build pkg-config ccache \
      libasio-dev libflatbuffers-dev flatbuffers-compiler libxxhash-dev libyaml-cpp-dev \
      libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libboost-dev libhiredis-dev libssl-dev \
      libgtest-dev libgmock-dev libbenchmark-dev librocksdb-dev libabsl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# LIMITER_WITH_ROCKSDB=ON: without RocksDB the configure fails here, rather than making an
# image whose limiterd refuses every durable policy. The compiler cache lives in a cache mount
# (BuildKit's and buildah's RUN --mount=type=cache), kept by the builder between builds and
# never in the image: a new commit recompiles only the files it changed.
RUN --mount=type=cache,target=/root/.cache/ccache \
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIMITER_WITH_ROCKSDB=ON \
 && cmake --build build -j 2 --target limiterd limiterctl limiter-bench limiter-gateway \
 && mkdir /out \
 && install -s -m 755 build/server/limiterd build/client/ctl/limiterctl \
      build/bench/limiter-bench build/examples/limiter-gateway /out/

FROM ${BASE}
# The shared libraries the four binaries link (ldd), nothing else: RocksDB itself is linked
# statically (Debian's RocksDB::rocksdb is librocksdb.a), its compression libraries are not
# (snappy, lz4, zstd, bz2); absl's time zones read tzdata's /usr/share/zoneinfo at run time.
# /var/lib/limiterd, the data dir, belongs to uid 65532. Being a VOLUME, every container gets
# a volume of its own there, made from this directory (so writable by 65532), even when run
# without -v: the root filesystem is read-only. Kubernetes ignores VOLUME; the chart mounts one.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libssl3 libyaml-cpp0.7 libxxhash0 libcpp-httplib0.11 libhiredis0.14 \
      libabsl20220623 libsnappy1v5 liblz4-1 libzstd1 libbz2-1.0 tzdata \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && echo 'limiter:x:65532:65532:limiter:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'limiter:x:65532:' >> /etc/group \
 && install -d -o 65532 -g 65532 -m 700 /var/lib/limiterd
COPY --from=build /out/ /usr/local/bin/
# A library missing from the list above fails the build here, not the container at start.
RUN missing=$(ldd /usr/local/bin/* | grep 'not found' || true); \
    [ -z "$missing" ] || { echo "runtime stage lacks shared libraries:$missing" >&2; exit 1; }
COPY deploy/limiterd-self.sh /usr/local/bin/limiterd-self
COPY examples/policies.yaml deploy/limiterd.yaml /etc/limiter/
COPY bench/cluster_policies.yaml /etc/limiter/cluster_policies.yaml
USER 65532
VOLUME /var/lib/limiterd
EXPOSE 7450 7451
# No curl or wget in the image: bash's /dev/tcp asks the admin port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/7451 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q '^ok' <&3"]
ENTRYPOINT ["/usr/local/bin/limiterd"]
CMD ["--config", "/etc/limiter/limiterd.yaml"]
