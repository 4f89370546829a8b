package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func hdetSchedule(args ...string) (code int, out, errOut string) {
	var o, e bytes.Buffer
	s := Streams{Out: &o, Err: &e}
	code = exitCode(s, "schedule", runSchedule(s, args))
	return code, o.String(), e.String()
}

type lrMomentum struct {
	LR       []float64 `json:"lr"`
	Momentum []float64 `json:"momentum"`
}

func TestScheduleOneCycleMatchesPyTorch(t *testing.T) {
	b, err := os.ReadFile("../../hparam/schedule/testdata/onecycle_torch.json")
	require.NoError(t, err)
	var ref struct {
		Cases []lrMomentum `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b, &ref))
	want := ref.Cases[0] // max_lr 0.1, total_steps 100, the other arguments at their defaults

	code, out, errOut := hdetSchedule("onecycle", "--max-lr", "0.1", "--total-steps", "100", "--format", "json")
	require.Equal(t, ExitOK, code, errOut)
	var got lrMomentum
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.LR, 100)
	require.Len(t, got.Momentum, 100)
	for i := range 100 {
		assert.InEpsilon(t, want.LR[i], got.LR[i], 1e-12, "lr step %d", i)
		assert.InEpsilon(t, want.Momentum[i], got.Momentum[i], 1e-12, "momentum step %d", i)
	}

	// The underscore spellings are aliases; CSV carries the same numbers.
	code, alias, _ := hdetSchedule("onecycle", "--max_lr=0.1", "--total_steps=100")
	require.Equal(t, ExitOK, code)
	assert.Equal(t, out, alias)
	code, csv, _ := hdetSchedule("onecycle", "--max-lr", "0.1", "--total-steps", "100", "--format", "csv")
	require.Equal(t, ExitOK, code)
	lines := strings.Split(strings.TrimSpace(csv), "\n")
	require.Len(t, lines, 101)
	assert.Equal(t, "step,lr,momentum", lines[0])
	for i, line := range lines[1:] {
		f := strings.Split(line, ",")
		require.Len(t, f, 3)
		assert.Equal(t, strconv.Itoa(i), f[0])
		lr, err := strconv.ParseFloat(f[1], 64)
		require.NoError(t, err)
		assert.Equal(t, got.LR[i], lr, "full precision")
	}
}

func TestScheduleOneCycleOptions(t *testing.T) {
	code, out, errOut := hdetSchedule("onecycle", "--max-lr", "1", "--epochs", "2", "--steps-per-epoch", "5",
		"--three-phase", "--anneal-strategy", "linear", "--cycle-momentum=false", "--momentum", "0.5",
		"--div-factor", "10", "--final-div-factor", "100", "--pct-start", "0.25")
	require.Equal(t, ExitOK, code, errOut)
	var got lrMomentum
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got.LR, 10)
	assert.InDelta(t, 0.1, got.LR[0], 1e-15)
	assert.InDelta(t, 0.1/100, got.LR[9], 1e-15)
	for _, m := range got.Momentum {
		assert.Equal(t, 0.5, m)
	}
}

func TestScheduleOtherKinds(t *testing.T) {
	code, out, errOut := hdetSchedule("cosine", "--peak", "1", "--total-steps", "5", "--warmup-steps", "1", "--final", "0.5")
	require.Equal(t, ExitOK, code, errOut)
	var got lrMomentum
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Nil(t, got.Momentum)
	require.Len(t, got.LR, 5)
	assert.Equal(t, []float64{0, 1}, got.LR[:2])
	assert.Equal(t, 0.5, got.LR[4])

	code, out, _ = hdetSchedule("step", "--initial", "1", "--step-size", "2", "--gamma", "0.5", "--total-steps", "5", "--format", "csv")
	require.Equal(t, ExitOK, code)
	assert.Equal(t, "step,lr\n0,1\n1,1\n2,0.5\n3,0.5\n4,0.25\n", out)

	code, out, _ = hdetSchedule("constant", "--value", "0.3", "--total-steps", "2")
	require.Equal(t, ExitOK, code)
	assert.Equal(t, "{\"lr\":[0.3,0.3]}\n", out)

	code, out, _ = hdetSchedule("linear", "--peak", "2", "--total-steps", "3")
	require.Equal(t, ExitOK, code)
	assert.Equal(t, "{\"lr\":[2,1,0]}\n", out)
}

func TestScheduleBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"onecycle", "--max-lr", "0.1", "--total-steps", "0"}, "--total-steps"},
		{[]string{"onecycle", "--max-lr", "0.1"}, "--total-steps"},
		{[]string{"onecycle", "--total-steps", "10"}, "--max-lr: is required"},
		{[]string{"onecycle", "--max-lr", "abc", "--total-steps", "10"}, "-max-lr"},
		{[]string{"onecycle", "--max-lr", "0.1", "--total-steps", "10", "--pct-start", "1.5"}, "--pct-start: must be a number in [0, 1]"},
		{[]string{"onecycle", "--max-lr", "0.1", "--total-steps", "10", "--anneal-strategy", "exp"}, "--anneal-strategy"},
		{[]string{"onecycle", "--max-lr", "0.1", "--epochs", "3"}, "--steps-per-epoch"},
		{[]string{"onecycle", "--max-lr", "0.1", "--total-steps", "10", "--format", "xml"}, "--format"},
		{[]string{"onecycle", "--max-lr", "0.1", "--total-steps", "10", "--value", "1"}, "-value"},
		{[]string{"onecycle", "--max-lr", "0.1", "--total-steps", "10", "extra"}, "unexpected"},
		{[]string{"cosine", "--peak", "1", "--total-steps", "10", "--warmup-steps", "10"}, "--warmup-steps"},
		{[]string{"step", "--initial", "1", "--total-steps", "10"}, "--step-size"},
		{[]string{"exp"}, "unknown schedule kind"},
		{nil, "onecycle, constant"},
	} {
		code, out, errOut := hdetSchedule(tc.args...)
		assert.Equal(t, ExitUsage, code, "%q", tc.args)
		assert.Empty(t, out)
		assert.Contains(t, errOut, tc.want, "%q", tc.args)
	}
	code, _, errOut := hdetSchedule("onecycle", "-h")
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, errOut, "--max-lr")
	assert.NotContains(t, errOut, "same as", "aliases stay out of the help")
}

func TestScheduleThroughMain(t *testing.T) {
	// Main prints to the process's stdout; only the exit codes are checked here.
	assert.Equal(t, Outcome{Code: ExitUsage}, Main([]string{"schedule", "onecycle", "--max-lr", "0.1", "--total-steps", "0"}))
}
