package cli

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/hdet-dev/hdet/internal/metrics"
	"github.com/hdet-dev/hdet/internal/report"
)

const reportHelp = `usage: hdet report RUN_DIR [--out DIR] [--csv]
       hdet report --compare RUN_A RUN_B ... [--out DIR]

Writes plots (PNG and SVG), summary.md and index.html for a run from its
metrics.jsonl, and the run's values as TensorBoard event files (open them
with tensorboard --logdir RUN_DIR); the run may still be going
or have crashed. --compare puts
several runs' loss curves on one plot with a table of final metrics.
Prints the path of index.html.

flags:
`

func runReport(s Streams, args []string) error {
	flags := newFlagSet(s, "report")
	out := flags.String("out", "", "output `DIR` (default RUN_DIR/report, or ./"+report.DefaultCompareDir+" with --compare)")
	withCSV := flags.Bool("csv", false, "also write "+report.CSVFile+", one row per window")
	tensorBoard := flags.String("tensorboard", "", "TensorBoard event files' `DIR` (default OUT/tensorboard; tensorboard --logdir DIR opens them)")
	compare := flags.Bool("compare", false, "compare the runs given as arguments")
	flags.Usage = func() { fmt.Fprint(s.Err, reportHelp); flags.PrintDefaults() }
	dirs, err := parseInterspersed(flags, args)
	if err != nil {
		return err
	}

	var index string
	if *compare {
		if len(dirs) < 2 {
			return Usagef("--compare needs at least two run directories, got %d", len(dirs))
		}
		if *withCSV || *tensorBoard != "" {
			return Usagef("--csv and --tensorboard apply to a single run, not to --compare")
		}
		index, err = report.Compare(dirs, *out)
	} else {
		if len(dirs) != 1 {
			return Usagef("report takes one RUN_DIR (or --compare RUN_A RUN_B ...), got %d", len(dirs))
		}
		index, err = report.Write(dirs[0], *out, report.Options{CSV: *withCSV, TensorBoard: *tensorBoard})
	}
	if err != nil {
		// A path that is not a run is the user's input, not a failure of hdet.
		if errors.Is(err, metrics.ErrCorrupt) || errors.Is(err, metrics.ErrNoStart) || errors.Is(err, fs.ErrNotExist) {
			return &UsageError{Err: err}
		}
		return err
	}
	fmt.Fprintln(s.Out, index)
	return nil
}
