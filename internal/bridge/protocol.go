package bridge

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/hdet-dev/hdet/internal/binread"
)

// ProtocolVersion is the version of the worker protocol this package speaks.
// The worker announces its version in HELLO; any other version than this one
// and minProtocol's is refused (ErrVersion) rather than guessed at. Version 4
// added resuming a worker at a step: HELLO's resumable and start_step, and
// SAVE/SAVED.
const ProtocolVersion = 4

// minProtocol is the oldest worker version hdet still speaks to: a version-3
// worker never resumes (its HELLO has no resumable), and WELCOME answers it
// in its own version.
const minProtocol = 3

// Frame layout, both directions (little endian):
//
//	"HDET" | uint32 JSON length | uint32 binary length | JSON | binary
//
// The JSON part is a small message (type plus fields); the binary part carries
// float64 arrays that may hold NaN/Inf (losses), which JSON cannot.
var frameMagic = [4]byte{'H', 'D', 'E', 'T'}

const (
	headerSize = 12
	// maxJSON bounds one message: a PLAN of 10 000 steps for 20
	// hyperparameters is about 4 MB; anything far larger is garbage.
	maxJSON = 64 << 20
	// maxBinary bounds the binary part (losses: 8 bytes per step).
	maxBinary = 64 << 20
)

// Message types.
const (
	msgHello   = "hello"   // worker → hdet: who it is, what it accepts
	msgWelcome = "welcome" // hdet → worker: sync mode, the shared buffer
	msgReady   = "ready"   // worker → hdet: initial parameters are in the buffer
	msgPlan    = "plan"    // hdet → worker: per-step values for one window
	msgDone    = "done"    // worker → hdet: window trained; buffer holds its parameters; binary = losses (then the probe loss)
	msgEval    = "eval"    // hdet → worker: evaluate the (averaged) parameters
	msgResult  = "result"  // worker → hdet: binary = loss, accuracy
	msgStop    = "stop"    // hdet → worker: run finished; load the buffer and return from step()
	msgError   = "error"   // worker → hdet: the worker failed; Message says why
	msgSave    = "save"    // hdet → worker: load the buffer, then write your state to a file (saveRequest)
	msgSaved   = "saved"   // worker → hdet: the file is written (Path, Step), or Refused says why not
)

// Buffer kinds a worker can share its parameters through. Only BufferFD
// is implemented: CUDA tensors are staged through it (copied to host). A
// later BufferCUDAIPC would carry a cudaIpcMemHandle in Handle instead.
const (
	BufferFD      = "fd"       // an anonymous file the worker inherited at exec
	BufferCUDAIPC = "cuda_ipc" // reserved, not implemented
)

// BufferSpec tells the worker where the sync buffer lives.
type BufferSpec struct {
	Kind   string `json:"kind"`
	FD     int    `json:"fd,omitempty"`     // fd: the worker's descriptor to mmap
	Handle []byte `json:"handle,omitempty"` // cuda_ipc: the IPC handle (reserved)
	Floats int    `json:"floats"`           // float32 elements currently mapped
}

// ParamGroup describes one optimizer parameter group of the worker.
type ParamGroup struct {
	Key         string  `json:"key"` // the group's "name" entry, else its index
	Size        int     `json:"size"`
	LR          float64 `json:"lr"`
	WeightDecay float64 `json:"weight_decay"`
}

// Hello is what a worker announces when it connects.
type Hello struct {
	Protocol        int          `json:"protocol"`
	PID             int          `json:"pid"`
	Hyperparameters []string     `json:"hyperparameters"`
	ParamGroups     []ParamGroup `json:"param_groups"`
	ParamCount      int          `json:"param_count"`
	// StateCount is the optimizer-state floats that follow the parameters
	// in the buffer (`local` mode; 0 in `gradients` mode).
	StateCount int      `json:"state_count"`
	Dtype      string   `json:"dtype"`   // of the sync buffer: always "float32"
	Device     string   `json:"device"`  // where the parameters live: "cpu", "cuda:0", ...
	Buffers    []string `json:"buffers"` // buffer kinds the worker supports
	// TotalSteps is the optimizer steps the script takes (hdet.attach's
	// total_steps): the run's length.
	TotalSteps int    `json:"total_steps"`
	Optimizer  string `json:"optimizer"` // the attached optimizer's class: every rank's must be the same
	// Window is the script's window T (attach's window), 0 when it left it to hdet.
	Window int `json:"hdet_window,omitempty"`
	// Explore lists what the script asks to explore: each entry has a "name"
	// and optional settings (plugin, alpha, spread, base, lower, upper;
	// settings.go turns them into the explorer's config block).
	Explore []map[string]any `json:"explore,omitempty"`
	// Options holds the script's alpha, spread and auto
	// (keys alpha, spread, auto); any other key is refused.
	Options map[string]any `json:"options,omitempty"`
	// Evaluate is true when the script registered an evaluation function.
	Evaluate bool `json:"evaluate"`
	// Probe is true when the script gave hdet.probe(fn).
	Probe bool `json:"probe"`
	// SyncMode is what the script does: gradients when it set up
	// torch.distributed before constructing the scheduler, else local.
	SyncMode string `json:"sync_mode"`
	// DistWorldSize is the size of the script's torch.distributed world at
	// its first optimizer step, 0 when it set none up.
	DistWorldSize int `json:"dist_world_size"`
	// Sharded: the parameters are FSDP2's (DTensors sharded over the
	// script's world, its replica): the buffer holds this rank's local
	// shards, which differ by position, so the converge averages the whole
	// buffer over the position's communicator instead of one slice of it.
	Sharded bool `json:"sharded"`
	// Unsupported says why the script's parameters cannot be handed over
	// (sharded in a way hdet does not average); hdet refuses the run with it.
	Unsupported string `json:"unsupported,omitempty"`
	// Resumable: the script gave hdet its state (attach's state=), so SAVE
	// can write it and a relaunch can resume it at a step.
	Resumable bool `json:"resumable"`
	// StartStep is the optimizer step the worker continues from: the
	// HDET_RESUME_STEP it resumed to, 0 for a fresh start.
	StartStep int `json:"start_step"`
	// ScriptPeakLR is the highest rate the script set itself before this
	// launch (its state file's; 0 for a fresh start): a resumed search pass
	// commits the peak of the whole pass, not of the windows since the
	// resume.
	ScriptPeakLR float64 `json:"script_peak_lr,omitempty"`
}

// message is the JSON part of every frame; fields not used by a type are
// omitted.
type message struct {
	Type string `json:"type"`

	Hello *Hello `json:"hello,omitempty"`

	// welcome
	Protocol  int         `json:"protocol,omitempty"`
	Rank      int         `json:"rank,omitempty"`
	WorldSize int         `json:"world_size,omitempty"`
	SyncMode  string      `json:"sync_mode,omitempty"`
	Buffer    *BufferSpec `json:"buffer,omitempty"`

	// plan, done
	Window int                  `json:"window,omitempty"`
	Start  int                  `json:"start,omitempty"`
	Steps  int                  `json:"steps,omitempty"`
	Values map[string][]float64 `json:"values,omitempty"`
	// plan: the pass (plan.PassSearch or PassMain), for the script's logs.
	Pass int `json:"pass,omitempty"`
	// plan: the window is in a search pass that the run expects to end
	// with a commit and a restart (plan.Plan.Search): the script's
	// replicas share their batches (the client keeps the script's seeds)
	// until a plan without it.
	Search bool `json:"search,omitempty"`
	// plan: average the iterates of the last ProbeTail steps and send the
	// probe loss after the step losses in DONE.
	ProbeTail int `json:"probe_tail,omitempty"`

	// plan, eval, stop: copy the buffer back into the model (and the
	// optimizer state) first. This version always asks: the engine may
	// change the buffer between any two calls.
	Load          bool `json:"load,omitempty"`
	LoadOptimizer bool `json:"load_optimizer,omitempty"`

	// done: the values applied at each step (a learning rate's is the
	// multiplier of the script's own rate), and the script's own rate of the
	// first param group at each step.
	Applied map[string][]float64 `json:"applied,omitempty"`
	BaseLR  []float64            `json:"base_lr,omitempty"`
	// done: where the script's side of the hand-over went, in seconds by
	// phase (copy_out: this window's parameters into the buffer; send,
	// wait, load: the previous DONE's write, from it to this PLAN, and the
	// copy back), for the window record. Always sent: a few floats.
	Timing map[string]float64 `json:"timing,omitempty"`
	// plan, done: the sender's clock (unix seconds) as it wrote the frame,
	// so the reader times the socket (both ends run on one host).
	SentAt float64 `json:"sent_at,omitempty"`

	// result
	Supported bool `json:"supported,omitempty"`

	// error
	Message string `json:"message,omitempty"`

	// saved: the file written and the step it holds; Refused: why the
	// disk refused it (the worker runs on, the checkpoint fails), and Errno
	// the OSError's errno where it has one.
	Path    string `json:"path,omitempty"`
	Step    int    `json:"step,omitempty"`
	Refused string `json:"refused,omitempty"`
	Errno   int    `json:"errno,omitempty"`
}

// saveRequest is SAVE: its pass is the pass's name ("search" or "main"),
// where PLAN's is its number, so it has a JSON of its own.
type saveRequest struct {
	Type string `json:"type"`
	Path string `json:"path"`
	Step int    `json:"step"`
	Pass string `json:"pass"`
}

// writeFrame writes one frame: m is a *message or a saveRequest.
func writeFrame(w io.Writer, m any, payload []byte) error {
	js, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %T: %w", m, err)
	}
	buf := make([]byte, headerSize, headerSize+len(js)+len(payload))
	copy(buf, frameMagic[:])
	binary.LittleEndian.PutUint32(buf[4:], uint32(len(js)))
	binary.LittleEndian.PutUint32(buf[8:], uint32(len(payload)))
	buf = append(append(buf, js...), payload...)
	_, err = w.Write(buf)
	return err
}

// readFrame reads one frame. Anything malformed is an ErrProtocol; a clean
// end of stream before a frame starts is io.EOF.
func readFrame(r io.Reader) (*message, []byte, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, nil, fmt.Errorf("%w: stream ended inside a frame header", ErrProtocol)
		}
		return nil, nil, err
	}
	if [4]byte(h[:4]) != frameMagic {
		return nil, nil, fmt.Errorf("%w: frame does not start with %q (got %q)", ErrProtocol, frameMagic[:], h[:4])
	}
	nj := binary.LittleEndian.Uint32(h[4:])
	nb := binary.LittleEndian.Uint32(h[8:])
	if nj == 0 || nj > maxJSON || nb > maxBinary {
		return nil, nil, fmt.Errorf("%w: frame sizes out of range (json %d, binary %d bytes)", ErrProtocol, nj, nb)
	}
	body := make([]byte, int(nj)+int(nb))
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, nil, fmt.Errorf("%w: stream ended inside a %d-byte frame: %v", ErrProtocol, len(body), err)
	}
	m := new(message)
	if err := json.Unmarshal(body[:nj], m); err != nil {
		return nil, nil, fmt.Errorf("%w: undecodable JSON: %v", ErrProtocol, err)
	}
	if m.Type == "" {
		return nil, nil, fmt.Errorf("%w: message without a type", ErrProtocol)
	}
	return m, body[nj:], nil
}

// float64s decodes a binary part of exactly n little-endian float64s.
func float64s(b []byte, n int) ([]float64, error) {
	r := binread.New(b, ErrProtocol)
	out := r.Float64s("float64s", n)
	if r.End() != nil {
		return nil, fmt.Errorf("%w: expected %d float64 (%d bytes), got %d bytes", ErrProtocol, n, 8*n, len(b))
	}
	return out, nil
}
