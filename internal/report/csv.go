package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/hdet-dev/hdet/internal/metrics"
)

// CSVFile is the name of the per-window table Write produces with Options.CSV.
const CSVFile = "windows.csv"

// WriteCSV writes one row per window: pass (0: the search pass, or the
// one pass of a run that never committed; 1: the main pass, whose windows
// and steps count from 0 again), window, step, loss_r<k> per rank,
// loss_mean, healthy_r<k> (1 or 0), <hp>_base and <hp>_r<k> per
// hyperparameter, weight_<hp>_r<k>, fanout_seconds, converge_seconds,
// plan_seconds, eval_loss, eval_accuracy. Missing and non-finite values are
// empty cells, which pandas reads as NaN.
func WriteCSV(w io.Writer, r *Run) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader(r)); err != nil {
		return fmt.Errorf("report: csv: %w", err)
	}
	for _, win := range r.Windows {
		if err := cw.Write(csvRow(r, win)); err != nil {
			return fmt.Errorf("report: csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("report: csv: %w", err)
	}
	return nil
}

func csvHeader(r *Run) []string {
	header := []string{"pass", "window", "step"}
	for k := range r.Ranks {
		header = append(header, fmt.Sprintf("loss_r%d", k))
	}
	header = append(header, "loss_mean")
	for k := range r.Ranks {
		header = append(header, fmt.Sprintf("healthy_r%d", k))
	}
	for _, p := range r.Params {
		header = append(header, p.Name+"_base")
		for k := range r.Ranks {
			header = append(header, fmt.Sprintf("%s_r%d", p.Name, k))
		}
	}
	for _, p := range r.Params {
		for k := range r.Ranks {
			header = append(header, fmt.Sprintf("weight_%s_r%d", p.Name, k))
		}
	}
	return append(header, "fanout_seconds", "converge_seconds", "plan_seconds", "eval_loss", "eval_accuracy")
}

func csvRow(r *Run, win metrics.WindowRecord) []string {
	row := []string{strconv.Itoa(win.Pass), strconv.Itoa(win.Window), strconv.Itoa(win.Step)}
	for k := range r.Ranks {
		row = append(row, cell(at(win.Losses, k)))
	}
	row = append(row, cell(metrics.Float(MeanLoss(win)), true))
	for k := range r.Ranks {
		switch {
		case k >= len(win.Healthy):
			row = append(row, "")
		case win.Healthy[k]:
			row = append(row, "1")
		default:
			row = append(row, "0")
		}
	}
	for _, p := range r.Params {
		b, ok := win.Base[p.Name]
		row = append(row, cell(b, ok))
		for k := range r.Ranks {
			row = append(row, cell(at(win.Values[p.Name], k)))
		}
	}
	for _, p := range r.Params {
		for k := range r.Ranks {
			row = append(row, cell(at(win.Weights[p.Name], k)))
		}
	}
	row = append(row, cell(metrics.Float(win.FanoutSeconds), true), cell(metrics.Float(win.ConvergeSeconds), true),
		cell(metrics.Float(win.PlanSeconds), true))
	if win.Eval != nil {
		return append(row, cell(win.Eval.Loss, true), cell(win.Eval.Accuracy, true))
	}
	return append(row, "", "")
}

func cell(v metrics.Float, ok bool) string {
	f := float64(v)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return ""
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
