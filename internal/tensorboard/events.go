// Package tensorboard writes TensorFlow event files of scalars, which
// TensorBoard opens: TFRecord framing (length and data, each with its
// masked CRC-32C) around Event protos (wall time, step, a Summary of one
// simple_value), encoded with protowire rather than generated code, since
// three messages and five fields are all it needs.
package tensorboard

import (
	"encoding/binary"
	"hash/crc32"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileVersion is the first event of every file, as TensorFlow writes it.
const FileVersion = "brain.Event:2"

// Fields of tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto.
const (
	eventWallTime    = 1 // double
	eventStep        = 2 // int64
	eventFileVersion = 3 // string
	eventSummary     = 5 // Summary
	summaryValue     = 1 // repeated Summary.Value
	valueTag         = 1 // string
	valueSimpleValue = 2 // float
)

// Scalar is one point of one curve: tag (TensorBoard groups tags by the
// part before the first "/"), the step and wall time (unix seconds) it was
// taken at, and its value.
type Scalar struct {
	Tag   string
	Step  int64
	Wall  float64
	Value float64
}

// Events is an event file's bytes: the file-version event at wall time
// start, then one event per scalar, in order.
func Events(start float64, scalars []Scalar) []byte {
	b := appendRecord(nil, versionEvent(start))
	var ev []byte
	for _, s := range scalars {
		ev = scalarEvent(ev[:0], s)
		b = appendRecord(b, ev)
	}
	return b
}

func versionEvent(wall float64) []byte {
	b := protowire.AppendTag(nil, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(wall))
	b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
	return protowire.AppendString(b, FileVersion)
}

func scalarEvent(b []byte, s Scalar) []byte {
	var v []byte
	v = protowire.AppendTag(v, valueTag, protowire.BytesType)
	v = protowire.AppendString(v, s.Tag)
	v = protowire.AppendTag(v, valueSimpleValue, protowire.Fixed32Type)
	v = protowire.AppendFixed32(v, math.Float32bits(float32(s.Value)))
	summary := protowire.AppendTag(nil, summaryValue, protowire.BytesType)
	summary = protowire.AppendBytes(summary, v)

	b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(s.Wall))
	b = protowire.AppendTag(b, eventStep, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(s.Step))
	b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
	return protowire.AppendBytes(b, summary)
}

// appendRecord frames data as a TFRecord: its length (uint64, little
// endian), the length's masked CRC, the data, the data's masked CRC.
func appendRecord(b, data []byte) []byte {
	n := binary.LittleEndian.AppendUint64(nil, uint64(len(data)))
	b = append(b, n...)
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(n))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC(data))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is TFRecord's masked CRC-32C (a CRC of data holding CRCs is
// weak, so the stored one is rotated and offset).
func maskedCRC(data []byte) uint32 {
	c := crc32.Checksum(data, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}
