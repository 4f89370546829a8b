package builtin

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/internal/binread"
)

// builtinStateVersion 6 keeps the evidence window by window (with the
// learning rate each was read at), 5 added the no-harm rule's evidence, 4 the commit
// (the search and main passes), 3 the offset's average; versions 2 to 5 still resume,
// uncommitted where before 4, a version-2 average and a pre-5 evidence
// starting empty, a version-5 evidence as one window at no known level.
//
//	version byte
//	uvarint windows observed
//	byte form (0 offset, 1 paper)
//	byte committed (version 4; 0 or 1, 0 in the paper form)
//	the form's state: Offset's or Auto's MarshalBinary (offset form,
//	version 5 on: then Evidence's (from 6 window by window) and the
//	rejected offset, a float64)
const builtinStateVersion = 6

// SaveState is the version, the number of windows observed, the form,
// whether the explorer committed and its meta-update's state; the
// configuration comes again through Init.
func (b *builtin) SaveState(context.Context) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return nil, err
	}
	out := []byte{builtinStateVersion}
	out = binary.AppendUvarint(out, uint64(b.next))
	out = append(out, b.form.code(), boolByte(b.committed))
	st, err := b.form.marshal()
	if err != nil {
		return nil, err
	}
	return append(out, st...), nil
}

func (b *builtin) LoadState(_ context.Context, state []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.initialised(); err != nil {
		return err
	}
	if len(state) < 1 || state[0] < 2 || state[0] > builtinStateVersion {
		v := -1
		if len(state) > 0 {
			v = int(state[0])
		}
		return fmt.Errorf("%w: explorer state: version %d, this explorer reads versions 2 to %d (from the learned offset on; a checkpoint of the decaying update before it cannot resume)",
			hparam.ErrDecode, v, builtinStateVersion)
	}
	version := state[0]
	r := binread.New(state[1:], fmt.Errorf("%w: explorer state", hparam.ErrDecode))
	next := r.Int("window count", b.run.windows)
	form := r.Byte("window count") // the window count was the state's last byte
	if err := r.Err(); err != nil {
		return err
	}
	if form != b.form.code() {
		return fmt.Errorf("%w: explorer state: saved with another auto.form than %q", hparam.ErrDecode, b.run.cfg.Form)
	}
	committed := false
	if version >= 4 {
		c := r.Byte("commit flag")
		if c > 1 || (c == 1 && form == 1) {
			r.Fail("commit flag")
		}
		committed = c == 1
	}
	rest := r.Rest()
	if err := r.Err(); err != nil {
		return err
	}
	if err := b.form.unmarshal(version, rest); err != nil {
		return err
	}
	b.next, b.committed = next, committed
	return nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}
