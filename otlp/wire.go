package otlp

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The wire helpers below write the protobuf wire format by field number,
// with protowire: no generated code and no descriptor in the binary.
// Numbers come from opentelemetry-proto v1 (opentelemetry/proto/...), and
// the tests decode what they write with the generated types of
// go.opentelemetry.io/proto/otlp.

// Field numbers of opentelemetry/proto/common/v1 and resource/v1 that both
// signals use.
const (
	// KeyValue
	FieldKeyValueKey   protowire.Number = 1
	FieldKeyValueValue protowire.Number = 2
	// AnyValue, a oneof
	FieldAnyString protowire.Number = 1
	FieldAnyBool   protowire.Number = 2
	FieldAnyInt    protowire.Number = 3
	FieldAnyDouble protowire.Number = 4
	FieldAnyArray  protowire.Number = 5
	FieldAnyKVList protowire.Number = 6
	FieldAnyBytes  protowire.Number = 7
	// ArrayValue and KeyValueList
	FieldListValues protowire.Number = 1
	// Resource
	FieldResourceAttributes protowire.Number = 1
	// InstrumentationScope
	FieldScopeName       protowire.Number = 1
	FieldScopeVersion    protowire.Number = 2
	FieldScopeAttributes protowire.Number = 3
)

// Open appends the tag of the length-delimited field num and returns the
// offset at which the message's body starts; Close then puts the body's
// length in front of it. Backfilling the length like this encodes a whole
// request into one growing buffer, with neither a buffer per nested
// message nor a pass to size each one first; the cost is a copy of each
// body within the buffer (tracing's BenchmarkAppendExportRequest).
func Open(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return b, len(b)
}

// Close ends the message that Open started at start.
func Close(b []byte, start int) []byte {
	n := uint64(len(b) - start)
	k := protowire.SizeVarint(n)
	b = append(b, make([]byte, k)...)
	copy(b[start+k:], b[start:len(b)-k])
	protowire.AppendVarint(b[start:start], n)
	return b
}

// AppendString appends the string field num, unless s is "" (proto3's
// default, which is not on the wire).
func AppendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// AppendUint appends the varint field num, unless v is 0.
func AppendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// AppendFixed64 appends the fixed64 field num, unless v is 0.
func AppendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

// AppendFixed32 appends the fixed32 field num, unless v is 0.
func AppendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

// AppendDouble appends the double field num, whatever its value: callers
// use it for oneof members and optional fields, where 0 is a value.
func AppendDouble(b []byte, num protowire.Number, v float64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// AppendStringAttribute appends a KeyValue with a string AnyValue as the
// field num. The value is written even when it is "", so that it stays
// distinct from an empty AnyValue.
func AppendStringAttribute(b []byte, num protowire.Number, key, value string) []byte {
	b, kv := Open(b, num)
	b = AppendString(b, FieldKeyValueKey, key)
	b, v := Open(b, FieldKeyValueValue)
	b = protowire.AppendTag(b, FieldAnyString, protowire.BytesType)
	b = protowire.AppendString(b, value)
	return Close(Close(b, v), kv)
}

// AppendIntAttribute appends a KeyValue with an int AnyValue as the field
// num.
func AppendIntAttribute(b []byte, num protowire.Number, key string, value int64) []byte {
	b, kv := Open(b, num)
	b = AppendString(b, FieldKeyValueKey, key)
	b, v := Open(b, FieldKeyValueValue)
	b = protowire.AppendTag(b, FieldAnyInt, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(value))
	return Close(Close(b, v), kv)
}
