package bridge

// Resuming a worker at a step: SAVE writes the script's state at a window
// end, a relaunch starts the script with HDET_RESUME_STATE and checks that
// it resumed there (docs/pytorch.md#resume).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hdet-dev/hdet/internal/atomicfile"
	"github.com/hdet-dev/hdet/internal/plan"
	"github.com/hdet-dev/hdet/internal/workload"
)

// PassName is a pass's name in HDET_PASS, SAVE and the state files' names.
func PassName(pass int) string {
	if pass == plan.PassMain {
		return "main"
	}
	return "search"
}

// StateDir is where rank's worker state files go in the run directory.
func StateDir(runDir string, rank int) string {
	return filepath.Join(runDir, "worker", "rank-"+strconv.Itoa(rank))
}

// StateFile is the name of the state file of a worker saved at step of
// pass: one per hdet checkpoint, which it goes with.
func StateFile(pass, step int) string {
	return fmt.Sprintf("%s-step-%d.pt", PassName(pass), step)
}

// resumeDoc is where the user reads how a script gives hdet its state.
const resumeDoc = "docs/pytorch.md#resume"

// checkResumed compares a HELLO with the start hdet asked for: a worker
// started to resume must say it is resumable and continues from
// ResumeStep; one started fresh must start at step 0.
func (o *Options) checkResumed(h Hello) error {
	where := fmt.Sprintf("step %d of the %s pass", o.ResumeStep, PassName(o.Pass))
	switch {
	case o.ResumeState == "" && h.StartStep != 0:
		return fmt.Errorf("%w: the script says it continues from step %d (hdet.attach's start_step), but hdet starts it from step 0 of the %s pass: there is no checkpoint of this run at that step to resume from; start the script from step 0 (or relaunch into the run directory that holds its checkpoint)",
			ErrConflict, h.StartStep, PassName(o.Pass))
	case o.ResumeState == "":
		return nil
	case !h.Resumable:
		return fmt.Errorf("%w: hdet resumes this run at %s from the state the script saved there (%s), but the script did not pass state= to hdet.attach this time, so it cannot resume: add state={...} as before (%s), or use another run.dir to start afresh",
			ErrSetting, where, o.ResumeState, resumeDoc)
	case h.StartStep != o.ResumeStep:
		return fmt.Errorf("%w: hdet resumes this run at %s, but the script says it continues from step %d (hdet.attach's start_step, or the step of the checkpoint it loaded itself): load the checkpoint of step %d, or let hdet restore the state (%s)",
			ErrConflict, where, h.StartStep, o.ResumeStep, resumeDoc)
	}
	return nil
}

// Resumable reports whether the worker's script gave hdet its state, so
// that SaveState can write it.
func (w *Worker) Resumable() bool { return w.hello.Resumable }

// SaveState asks the worker, waiting between windows, to write its state
// (the script's state objects, the optimizer, the client's own) to path,
// after taking the buffer's parameters as the next PLAN would: the state at
// the window end at step of pass, which a relaunch resumes
// (Options.ResumeState). The worker writes path atomically; SaveState
// creates its directory. A disk that refuses the file (here or in the
// worker) is workload.ErrStateRefused and leaves the worker running; any
// other failure is the worker's, and sticky.
func (w *Worker) SaveState(ctx context.Context, path string, step, pass int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.usable(); err != nil {
		return err
	}
	op := fmt.Sprintf("saving its state at step %d of the %s pass", step, PassName(pass))
	switch {
	case !w.hello.Resumable:
		return w.wrap(op, fmt.Errorf("%w: the script is not resumable (no state= in hdet.attach)", ErrOptions))
	case !w.idle || step != w.next || pass != w.pass:
		return w.wrap(op, fmt.Errorf("%w: the worker is at step %d of the %s pass", ErrOptions, w.next, PassName(w.pass)))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return w.wrap(op, fmt.Errorf("%w: %v", workload.ErrStateRefused, err))
	}
	req := saveRequest{Type: msgSave, Path: path, Step: step, Pass: PassName(pass)}
	if err := w.sendFrame(msgSave, req, nil); err != nil {
		return w.fail(op, err)
	}
	m, _, err := w.await(ctx, msgSaved, w.opts.Timeout)
	if err == nil && (m.Path != path || m.Step != step) {
		err = fmt.Errorf("%w: SAVED %s at step %d, asked for %s at step %d", ErrProtocol, m.Path, m.Step, path, step)
	}
	if err != nil {
		return w.fail(op, err)
	}
	if m.Refused != "" {
		// A full disk is named as hdet's own refused writes are: the file
		// system and its free space (atomicfile.NoSpace).
		why := errors.New(m.Refused)
		if e := syscall.Errno(m.Errno); e == syscall.ENOSPC || e == syscall.EDQUOT {
			why = atomicfile.NoSpace(e, filepath.Dir(path))
		}
		return w.wrap(op, fmt.Errorf("%w: %w", workload.ErrStateRefused, why))
	}
	return nil
}
