#!/bin/sh
# Regenerates plugins/contract/proto/*.pb.go from plugins/contract/proto/explorer.proto with
# pinned generators. protoc comes from Debian (apt-get install -y
# protobuf-compiler); the Go plugins are installed into bin/tools so the
# result does not depend on what else is on PATH.
set -eu
cd "$(dirname "$0")/.."
PROTOC_GEN_GO=v1.36.12
PROTOC_GEN_GO_GRPC=v1.6.2
command -v protoc >/dev/null || { echo "gen-proto: protoc not found; apt-get install -y protobuf-compiler" >&2; exit 1; }
tools="$(pwd)/bin/tools"
mkdir -p "$tools"
GOBIN="$tools" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO"
GOBIN="$tools" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC"
PATH="$tools:$PATH" protoc \
	--proto_path=plugins/contract/proto \
	--go_out=plugins/contract/proto --go_opt=paths=source_relative \
	--go-grpc_out=plugins/contract/proto --go-grpc_opt=paths=source_relative \
	plugins/contract/proto/explorer.proto
