# The wdc image: one static binary for every wdc process (control plane,
# agent, CLI). Build: docker build -t wdc .   (docker-compose.yml builds it.)

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/wdc ./cmd/wdc

# Agents run task commands: /bin/sh and coreutils come with the base image.
FROM debian:bookworm-slim
RUN groupadd --gid 10001 wdc && \
    useradd --uid 10001 --gid wdc --home-dir /var/lib/wdc --create-home --shell /usr/sbin/nologin wdc
COPY --from=build /out/wdc /usr/local/bin/wdc
USER wdc:wdc
WORKDIR /var/lib/wdc
ENV WDC_DATA_DIR=/var/lib/wdc
# Healthy while the Temporal frontend answers this process's address and
# namespace (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["wdc", "workers", "list", "-o", "json"]
ENTRYPOINT ["wdc"]
CMD ["--help"]
