// Command slurmprobe checks the slurm package against a real Slurm and real
// MPI for the end-to-end tests.
//
//	slurmprobe                             print one JSON line per rank: MPI's view,
//	                                       Slurm's view and slurm.Env.Check's verdict
//	slurmprobe run --run-dir DIR CONFIG    stand in for `hdet run` in a generated
//	                                       sbatch script (see below)
//
// As a stand-in, on the first run (SLURM_RESTART_COUNT 0) every rank writes
// DIR/started.RANK and waits for SIGUSR1 or SIGTERM; then the ranks meet at a
// barrier (hdet's "agree at the next converge"), each writes DIR/signal.RANK,
// and rank 0 requeues the job with slurm.Requeue. On a later run every rank
// writes DIR/resumed.RANK and exits 0.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hdet-dev/hdet/mpi"
	"github.com/hdet-dev/hdet/slurm"
)

type report struct {
	Rank, Size, LocalRank int
	Env                   slurm.Env
	SrunTask              bool
	CheckErr              string
}

func main() {
	// Catch the signals before MPI starts, so that none is lost.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM)
	if err := run(sig, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "slurmprobe:", err)
		os.Exit(1)
	}
}

func run(sig <-chan os.Signal, args []string) error {
	env, err := slurm.FromOS()
	if err != nil {
		return err
	}
	if err := mpi.Init(); err != nil {
		return err
	}
	w := mpi.World()
	if len(args) == 0 {
		r := report{Rank: w.Rank(), Size: w.Size(), LocalRank: w.LocalRank(), Env: env, SrunTask: env.SrunTask()}
		if err := env.Check(w.Rank(), w.Size(), w.LocalRank()); err != nil {
			r.CheckErr = err.Error()
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
		return mpi.Finalize()
	}
	if len(args) != 4 || args[0] != "run" || args[1] != "--run-dir" {
		return fmt.Errorf("want: run --run-dir DIR CONFIG, got %q", args)
	}
	dir := args[2]
	note := func(name string) error {
		line := fmt.Sprintf("restart=%d procid=%d cuda=%s\n", env.RestartCount, env.ProcID, strings.Join(env.CUDAVisibleDevices, ","))
		return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s.%d", name, w.Rank())), []byte(line), 0o644)
	}
	if env.RestartCount > 0 {
		if err := note("resumed"); err != nil {
			return err
		}
		return mpi.Finalize()
	}
	if err := note("started"); err != nil {
		return err
	}
	s := <-sig
	if err := w.Barrier(); err != nil {
		return err
	}
	if err := note("signal"); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "slurmprobe: rank %d got %v\n", w.Rank(), s)
	if w.Rank() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := slurm.Requeue(ctx, env.JobID); err != nil {
			return err
		}
	}
	return mpi.Finalize()
}
