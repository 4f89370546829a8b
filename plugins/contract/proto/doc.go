// Package proto holds the gRPC explorer protocol (explorer.proto) and the Go
// code generated from it. Regenerate with scripts/gen-proto.sh (make proto).
package proto

//go:generate sh ../../../scripts/gen-proto.sh
