package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// FuzzDecode: the checkpoint decoder never panics, and what it accepts
// encodes back to the same bytes. Inputs are given a valid trailing
// checksum so the fuzzer reaches the field decoding behind it.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(&State{Config: []byte("a: 1"), Step: 20, Window: 2, Ranks: 4, ParamCount: 2, Buffer: []float32{1, 2, 3}, Controller: []byte{9}})[len(magic) : len(magic)+30])
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, body []byte) {
		data := append([]byte(magic), body...)
		sum := sha256.Sum256(data)
		data = append(data, sum[:]...)
		s, err := Decode(data)
		if err != nil {
			return
		}
		if got := Encode(s); !bytes.Equal(got, data) {
			t.Fatalf("decode/encode is not the identity")
		}
	})
}
