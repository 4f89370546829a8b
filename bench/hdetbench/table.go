package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/hdet-dev/hdet/internal/stats"
)

// table is one study's result: printed as aligned text on the terminal and
// as a markdown table in docs/benchmarks.md.
type table struct {
	Title    string
	Header   []string
	Rows     [][]string
	Notes    []string // lines under the table: targets met or not, caveats
	Commands []string // the exact command lines that produced it
	More     []*table // further tables of the same study, shown after the notes
}

func (t *table) add(cells ...string) { t.Rows = append(t.Rows, cells) }

func (t *table) note(format string, a ...any) { t.Notes = append(t.Notes, fmt.Sprintf(format, a...)) }

// widths is the widest cell of each column.
func (t *table) widths() []int {
	w := make([]int, len(t.Header))
	for _, row := range append([][]string{t.Header}, t.Rows...) {
		for i, c := range row {
			if i < len(w) {
				w[i] = max(w[i], len(c))
			}
		}
	}
	return w
}

// text writes the table as aligned columns, numbers right-aligned.
func (t *table) text(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n", t.Title)
	ws := t.widths()
	line := func(row []string) {
		cells := make([]string, len(ws))
		for i := range ws {
			c := ""
			if i < len(row) {
				c = row[i]
			}
			if i == 0 {
				cells[i] = fmt.Sprintf("%-*s", ws[i], c)
			} else {
				cells[i] = fmt.Sprintf("%*s", ws[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(strings.Join(cells, "  "), " "))
	}
	line(t.Header)
	for _, r := range t.Rows {
		line(r)
	}
	for _, n := range t.Notes {
		fmt.Fprintln(w, "  "+n)
	}
	for _, m := range t.More {
		m.text(w)
	}
}

// markdown writes the table, its notes, its further tables and its
// commands for the doc.
func (t *table) markdown(w io.Writer) {
	t.markdownLevel(w, "##")
}

func (t *table) markdownLevel(w io.Writer, heading string) {
	fmt.Fprintf(w, "%s %s\n\n", heading, t.Title)
	row := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | "))
	}
	row(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---:"
		if i == 0 {
			sep[i] = "---"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|"))
	for _, r := range t.Rows {
		row(r)
	}
	fmt.Fprintln(w)
	for _, n := range t.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(t.Notes) > 0 {
		fmt.Fprintln(w)
	}
	for _, m := range t.More {
		m.markdownLevel(w, heading+"#")
	}
	if len(t.Commands) > 0 {
		fmt.Fprintf(w, "<details><summary>%d commands, in the order they ran</summary>\n\n```sh\n", len(t.Commands))
		for _, c := range t.Commands {
			fmt.Fprintln(w, c)
		}
		fmt.Fprint(w, "```\n\n</details>\n\n")
	}
}

// median of the finite values; NaN when there is none.
func median(v []float64) float64 {
	return stats.Median(slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }))
}

// quantile is the q-quantile of the finite values by linear interpolation.
func quantile(v []float64, q float64) float64 {
	s := slices.DeleteFunc(slices.Clone(v), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (pos-float64(lo))*(s[hi]-s[lo])
}

// num formats a number with d decimals, "NaN" for a diverged value.
func num(v float64, d int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "NaN"
	}
	return fmt.Sprintf("%.*f", d, v)
}

// lrText prints a learning rate compactly (3e-04, 1.4e-03).
func lrText(v float64) string { return fmt.Sprintf("%.2g", v) }

// pct formats a fraction as a signed percentage.
func pct(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "NaN"
	}
	return fmt.Sprintf("%+.1f%%", 100*v)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// verdict is the word a target line starts with.
func verdict(met bool) string {
	if met {
		return "Target met"
	}
	return "Target NOT met"
}
