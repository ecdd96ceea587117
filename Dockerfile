# syntax=docker/dockerfile:1
#
# fenceproxy container image.
#
#   make image                       # fenceproxy:$(cat VERSION), e.g. fenceproxy:v0.3.0
#   make image IMAGE=registry.example.com/fenceproxy
#   docker build --build-arg VERSION=$(cat VERSION) -t fenceproxy:$(cat VERSION) .
#
# VERSION (the repository's VERSION file, through make) is what `fenceproxy
# version` prints and the tag of the image: one string for both. Without the
# build ARG the binary says "dev".
#
# The build stage runs `make build`, the target CI builds the binary with
# (CGO_ENABLED=0, -trimpath, -ldflags '-s -w -X main.version=...'), so the
# image holds exactly the binary CI builds. The final stage is distroless
# static: no shell, no package manager, no libc; the binary is static.
#
# The image runs as 65532:65532 (distroless "nonroot"). The embedded bolt
# store (the default without FENCE_REDIS_URL) writes FENCE_BOLT_PATH,
# `fenceproxy.db` in the working directory: with a read-only root filesystem
# (as in deploy/) mount a writable volume and point FENCE_BOLT_PATH into it,
# e.g. FENCE_BOLT_PATH=/var/lib/fenceproxy/fenceproxy.db. Several replicas
# must share Redis (FENCE_REDIS_URL), not bolt. See docs/kubernetes.md.

# Build on the builder's own platform and cross-compile to the target one
# (make passes GOOS/GOARCH from the environment to `go build`).
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Dependencies first, so editing the source does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH make build VERSION="$VERSION"

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/fenceproxy /fenceproxy
# Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
# Writable only when the root filesystem is; see the note on bolt above.
WORKDIR /home/nonroot
# 8080: data plane (FENCE_LISTEN_ADDR); 9090: /healthz, /readyz, /metrics (FENCE_ADMIN_ADDR).
EXPOSE 8080 9090
ENTRYPOINT ["/fenceproxy"]
CMD ["serve"]
