# syntax=docker/dockerfile:1
#
# The IdKeeper image: one static binary on a distroless, non-root runtime (docs/deploy.md).
#
#   docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) -t idkeeper .
#   docker run --rm idkeeper version
#
# ENTRYPOINT is the binary, so a command line is a subcommand: `docker run … idkeeper server --store …`,
# `… init --store …`, `… gateway …`, `… clock-agent …`, `… probe URL` (the health check: the image has no shell).

ARG GO_VERSION=1.26

# ---- build: a static binary, for the platform asked for (cross-compiled, no emulation) ----
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
# Stamped into the binary (cmd/idkeeper/version.go: main.version, main.commit); empty: the toolchain's
# module version ("(devel)" here) and "unknown".
ARG VERSION=""
ARG COMMIT=""
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} \
	go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
		-o /out/idkeeper ./cmd/idkeeper \
	&& mkdir -p /out/var/lib/idkeeper

# ---- runtime: distroless static, user nonroot (65532), no shell, no package manager ----
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
ARG VERSION=""
ARG COMMIT=""
LABEL org.opencontainers.image.title="idkeeper" \
	org.opencontainers.image.description="Snowflake node-ID lease registry: registry server, gateway, clock agent" \
	org.opencontainers.image.source="https://github.com/idkeeper/idkeeper" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/idkeeper /usr/local/bin/idkeeper
# The working directory holds the default ./data (bolt file, state file, generated receipt secret): mount a
# volume here. A new named volume takes the directory's owner, so the nonroot user can write it.
COPY --from=build --chown=65532:65532 /out/var/lib/idkeeper /var/lib/idkeeper
WORKDIR /var/lib/idkeeper
USER 65532:65532
# 8080: registry API (+ /admin/, /metrics, /livez, /readyz); 8081: gateway; 4123: clock agent (TCKCLK 2, TCP).
EXPOSE 8080 8081 4123
ENTRYPOINT ["/usr/local/bin/idkeeper"]
CMD ["server"]
