package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hdet-dev/hdet/internal/atomicfile"
)

// Options tunes Write.
type Options struct {
	CSV bool // also write windows.csv
	// TensorBoard is where the TensorBoard event files go,
	// DefaultTensorBoardDir(outDir) when empty.
	TensorBoard string
}

// SummaryFile is the name of the markdown summary Write produces.
const SummaryFile = "summary.md"

// DefaultOutDir is where Write puts the report when outDir is empty:
// a folder inside the run directory.
func DefaultOutDir(runDir string) string { return filepath.Join(runDir, "report") }

// Write reads runDir's metrics.jsonl and writes the report (figures as PNG
// and SVG, summary.md, index.html and, with opts.CSV, windows.csv) into
// outDir, DefaultOutDir(runDir) when empty, and the run's values as
// TensorBoard event files into opts.TensorBoard. It works on a run still going or
// one that crashed. It returns the absolute path of index.html.
func Write(runDir, outDir string, opts Options) (indexPath string, err error) {
	r, err := Load(runDir)
	if err != nil {
		return "", err
	}
	if outDir == "" {
		outDir = DefaultOutDir(r.Dir)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	figs, err := plotRun(r, outDir)
	if err != nil {
		return "", err
	}
	tbDir := opts.TensorBoard
	if tbDir == "" {
		tbDir = DefaultTensorBoardDir(outDir)
	}
	if _, err := writeTensorBoard(r, tbDir); err != nil {
		return "", err
	}
	s := Summarize(r)
	if err := atomicfile.Write(filepath.Join(outDir, SummaryFile), []byte(s.Markdown())); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	files := []string{SummaryFile}
	if opts.CSV {
		if err := atomicfile.WriteFunc(filepath.Join(outDir, CSVFile), func(f io.Writer) error { return WriteCSV(f, r) }); err != nil {
			return "", fmt.Errorf("report: %w", err)
		}
		files = append(files, CSVFile)
	}
	pg := page{
		Title:   "hdet run " + r.Name,
		Lead:    fmt.Sprintf("%s — %d ranks, sync %s, %d steps per window", s.Progress(), r.Ranks, r.Start.SyncMode, r.Start.WindowSteps),
		Tables:  s.tables(),
		Figures: figs,
		Files:   files,
	}
	index, err := writePage(outDir, pg)
	if err != nil {
		return "", err
	}
	return absPath(index)
}

func absPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	return abs, nil
}
