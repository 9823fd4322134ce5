# The same image as `go run ./cmd/image` (README, "Running it"): one static
# binary at /queue on an empty base (scratch), owned by root, run as
# 65532:65532; no shell, no libc, no other file.
#   docker build --build-arg VERSION=v0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) -t queue .
FROM golang:1.27-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/queue ./cmd/queue

FROM scratch
COPY --from=build /out/queue /queue
USER 65532:65532
# serving, TLS serving, admin, Knative's autoscaler Stat, Prometheus
EXPOSE 8012 8112 8022 9090 9091
ENTRYPOINT ["/queue"]
