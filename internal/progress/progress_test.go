package progress

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock advances only when told to.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newWithClock(buf *bytes.Buffer, mode Mode, start int) (*Reporter, *fakeClock) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	r := New(buf, mode, 0, start)
	r.now = c.now
	r.started, r.lastLine = c.t, c.t
	return r, c
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]Mode{"auto": Auto, "plain": Plain, "none": None} {
		m, err := ParseMode(s)
		require.NoError(t, err)
		assert.Equal(t, want, m)
		assert.Equal(t, s, m.String())
	}
	_, err := ParseMode("fancy")
	assert.ErrorIs(t, err, ErrMode)
	assert.Contains(t, err.Error(), `"fancy"`)
}

func TestPlainEveryWindows(t *testing.T) {
	var buf bytes.Buffer
	r, clock := newWithClock(&buf, Plain, 0)
	r.Every, r.Interval = 3, time.Hour
	for k := 1; k <= 7; k++ {
		clock.advance(time.Second)
		r.Update(0, k*100, 1000, 2.0/float64(k), 0.01)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "windows 3 and 6")
	assert.Equal(t, "step 300/1000 (30.0%)  loss 0.6667  lr 0.01  elapsed 0:03  eta 0:07", lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "step 600/1000 (60.0%)"), lines[1])

	r.Done() // window 7 was not printed yet
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3)
	assert.True(t, strings.HasPrefix(lines[2], "step 700/1000"), lines[2])
	assert.NotContains(t, buf.String(), "\r")
}

func TestPlainInterval(t *testing.T) {
	var buf bytes.Buffer
	r, clock := newWithClock(&buf, Plain, 0)
	r.Every, r.Interval = 100, 30*time.Second
	clock.advance(10 * time.Second)
	r.Update(0, 100, 1000, 1, 0.1)
	assert.Empty(t, buf.String())
	clock.advance(25 * time.Second)
	r.Update(0, 200, 1000, 1, 0.1)
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"))
	assert.Contains(t, buf.String(), "step 200/1000")
}

func TestPlainLastStepAlwaysPrinted(t *testing.T) {
	var buf bytes.Buffer
	r, _ := newWithClock(&buf, Plain, 0)
	r.Every, r.Interval = 100, time.Hour
	r.Update(0, 100, 200, 1, 0.1)
	r.Update(0, 200, 200, 0.5, 0.1)
	assert.Equal(t, "step 200/200 (100.0%)  loss 0.5  lr 0.1  elapsed 0:00  eta 0:00\n", buf.String())
	r.Done()
	assert.Equal(t, 1, strings.Count(buf.String(), "\n"), "Done does not repeat a printed line")
}

func TestETAFromResumePoint(t *testing.T) {
	var buf bytes.Buffer
	r, clock := newWithClock(&buf, Plain, 5000)
	r.Every = 1
	clock.advance(100 * time.Second)
	r.Update(0, 6000, 10000, math.NaN(), math.NaN())
	// 1000 steps in 100 s, 4000 to go.
	assert.Equal(t, "step 6000/10000 (60.0%)  loss NaN  elapsed 1:40  eta 6:40\n", buf.String())
}

// The main pass's lines say so, and its ETA counts from its own start.
func TestMainPassRestartsTheETA(t *testing.T) {
	var buf bytes.Buffer
	r, clock := newWithClock(&buf, Plain, 0)
	r.Every = 1
	clock.advance(30 * time.Second)
	r.Update(0, 300, 1000, 1, 0.1)
	r.Update(1, 0, 1000, 1, 0.2)
	clock.advance(10 * time.Second)
	r.Update(1, 100, 1000, 1, 0.2)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, "step 300/1000 (30.0%)  loss 1  lr 0.1  elapsed 0:30  eta 1:10", lines[0])
	assert.Equal(t, "main pass: step 100/1000 (10.0%)  loss 1  lr 0.2  elapsed 0:10  eta 1:30", lines[2])
}

func TestNone(t *testing.T) {
	var buf bytes.Buffer
	r := New(&buf, None, 0, 0)
	r.Update(0, 10, 10, 1, 1)
	r.Done()
	assert.Empty(t, buf.String())
}

func TestAutoWithoutTerminalIsPlain(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	r := New(f, Auto, 0, 0)
	r.Every = 1
	r.Update(0, 50, 100, 1, 0.1)
	r.Update(0, 100, 100, 1, 0.1)
	r.Done()
	b, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(b), "\n"))
	assert.NotContains(t, string(b), "\r")
}

func TestClock(t *testing.T) {
	assert.Equal(t, "0:59", clock(59*time.Second))
	assert.Equal(t, "1:00:01", clock(time.Hour+time.Second))
}
