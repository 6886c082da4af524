# syntax=docker/dockerfile:1

# One build, three images that differ only in their entrypoint:
#
#   docker build -t effectively/worker:dev .                          # default (last stage)
#   docker build --target starter -t effectively/starter:dev .
#   docker build --target providersim -t effectively/providersim:dev .
#
# docker-compose.yml builds each target; BuildKit shares the build stage.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOWORK=off

# Dependencies first so the layer survives source-only changes.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/ ./worker ./starter ./sim/providersim

# Alpine rather than distroless so healthchecks have busybox wget.
FROM alpine:3.20 AS runtime
RUN apk add --no-cache ca-certificates tzdata \
    && addgroup -S -g 10001 effectively \
    && adduser -S -D -H -u 10001 -G effectively -s /sbin/nologin effectively
COPY --from=build /out/worker /out/starter /out/providersim /usr/local/bin/
USER 10001:10001

FROM runtime AS providersim
EXPOSE 12111 12112
ENTRYPOINT ["/usr/local/bin/providersim"]

FROM runtime AS starter
ENTRYPOINT ["/usr/local/bin/starter"]

FROM runtime AS worker
# The health listener on every interface, for the health check and a
# scraper from outside the container, and no other: the codec server and
# the webhook endpoint keep the loopback check unless the deployment names
# them in EFFECTIVELY_PUBLIC_LISTENERS. The worker logs a warning naming
# each listener beyond loopback.
ENV EFFECTIVELY_HEALTH_ADDR=:8081 EFFECTIVELY_PUBLIC_LISTENERS=health
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=6 \
    CMD wget -q -O /dev/null http://127.0.0.1:8081/readyz || exit 1
ENTRYPOINT ["/usr/local/bin/worker"]
