package cref

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hdet-dev/hdet/hparam"
	"github.com/hdet-dev/hdet/hparam/schedule"
)

// torchPhase is one of OneCycleLR's _schedule_phases (PyTorch 1.13).
type torchPhase struct{ end, lr0, lr1, m0, m1 float64 }

// torchPhases mirrors OneCycleLR.__init__, as schedule.NewOneCycle does.
func torchPhases(c schedule.OneCycleConfig) []torchPhase {
	total := float64(c.TotalSteps)
	initial := c.MaxLR / c.DivFactor
	minLR := initial / c.FinalDivFactor
	end1 := float64(c.PctStart*total) - 1
	if c.ThreePhase {
		return []torchPhase{
			{end1, initial, c.MaxLR, c.MaxMomentum, c.BaseMomentum},
			{float64(2*c.PctStart*total) - 2, c.MaxLR, initial, c.BaseMomentum, c.MaxMomentum},
			{total - 1, initial, minLR, c.MaxMomentum, c.MaxMomentum},
		}
	}
	return []torchPhase{
		{end1, initial, c.MaxLR, c.MaxMomentum, c.BaseMomentum},
		{total - 1, c.MaxLR, minLR, c.BaseMomentum, c.MaxMomentum},
	}
}

// torchStep mirrors OneCycleLR.get_lr with anneal_strategy "cos" and the
// given cosine: the argument it passes to math.cos, the learning rate and
// the momentum at step.
func torchStep(ph []torchPhase, step int, cos func(float64) float64) (arg, lr, mom float64) {
	s := float64(step)
	start := 0.0
	p := ph[len(ph)-1]
	for _, q := range ph[:len(ph)-1] {
		if s <= q.end {
			p = q
			break
		}
		start = q.end
	}
	arg = float64(math.Pi * ((s - start) / (p.end - start)))
	c := cos(arg) + 1
	anneal := func(a, b float64) float64 { return b + float64(float64((a-b)/2.0)*c) }
	return arg, anneal(p.lr0, p.lr1), anneal(p.m0, p.m1)
}

// ocCase is a OneCycle schedule with the defaults but for these.
type ocCase struct {
	pctStart   float64
	threePhase bool
	total      int
}

// schedules returns every combination of pct_start 0.3 (the default),
// 0.1, 0.25 and 0.45, three_phase false and true, and the totals.
func schedules(totals ...int) []ocCase {
	var s []ocCase
	for _, total := range totals {
		for _, pct := range []float64{0.3, 0.1, 0.25, 0.45} {
			s = append(s, ocCase{pct, false, total}, ocCase{pct, true, total})
		}
	}
	return s
}

// oneCycleSweep compares, at every step of the schedules, schedule.Cos with
// the C library's cos on the argument of the cosine anneal, and OneCycle's
// learning rate and momentum with PyTorch's, that is the same formula with
// the C library's cos. The same formula with schedule.Cos must give
// OneCycle's values exactly (else the mirror above has drifted from
// hparam/schedule/onecycle.go). It returns the arguments' comparison and
// the number of steps whose learning rate or momentum differs from
// PyTorch's.
func oneCycleSweep(t *testing.T, todo []ocCase) (cosDiffs, int) {
	var (
		mu     sync.Mutex
		all    cosDiffs
		parity int
		wg     sync.WaitGroup
		next   = make(chan ocCase)
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for s := range next {
				d, n := scheduleSweep(t, s)
				mu.Lock()
				all.add(d)
				parity += n
				mu.Unlock()
			}
		})
	}
	for _, s := range todo {
		next <- s
	}
	close(next)
	wg.Wait()
	return all, parity
}

func scheduleSweep(t *testing.T, sc ocCase) (cosDiffs, int) {
	var d cosDiffs
	parity := 0
	c := schedule.DefaultOneCycleConfig(0.1, sc.total)
	c.PctStart, c.ThreePhase = sc.pctStart, sc.threePhase
	oc, err := schedule.NewOneCycle(c)
	if errors.Is(err, hparam.ErrInvalid) && float64(sc.pctStart*float64(sc.total))-1 == 0 {
		return d, 0 // PyTorch divides by zero here
	}
	if err != nil {
		t.Errorf("%+v: %v", sc, err)
		return d, 0
	}
	ph := torchPhases(c)
	for s := range sc.total {
		arg, lr, mom := torchStep(ph, s, Cos)
		_, lrGo, momGo := torchStep(ph, s, schedule.Cos)
		got, gotMom, err := oc.AtBoth(s)
		if err != nil || got != lrGo || gotMom != momGo {
			t.Errorf("%+v, step %d: hparam says (%v, %v, %v), its formula (%v, %v)", sc, s, got, gotMom, err, lrGo, momGo)
			return d, parity
		}
		if got != lr || gotMom != mom {
			parity++
		}
		if !d.check(t, arg) {
			break
		}
	}
	return d, parity
}

// schedule.Cos on the arguments OneCycle's cosine anneal produces at every
// step of a sample of schedules up to 10^6 steps long. HDET_COS_SWEEP=N
// adds every length from 2 to N, and 10^6 steps for every configuration.
func TestCosOnOneCycleArguments(t *testing.T) {
	todo := schedules(2, 3, 7, 10, 50, 100, 333, 1000, 2500, 9973, 10_000)
	if !raceEnabled { // the detector makes it ten times slower
		todo = append(todo, schedules(65_536, 100_000)...)
		todo = append(todo, ocCase{0.3, false, 1_000_000}, ocCase{0.3, true, 1_000_000})
	}
	if v := os.Getenv("HDET_COS_SWEEP"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("HDET_COS_SWEEP=%q: want a schedule length of at least 2", v)
		}
		todo = schedules(999_983, 1_000_000)
		for total := n; total >= 2; total-- { // the longest first
			todo = append(todo, schedules(total)...)
		}
	}
	d, parity := oneCycleSweep(t, todo)
	d.report(t, "OneCycle's arguments")
	t.Logf("%d of those steps have a learning rate or momentum other than PyTorch's with this C library's cos", parity)
}

// torchConfig is a configuration of hparam/schedule/testdata/onecycle_torch.json;
// the fields it leaves out keep OneCycleLR's defaults.
type torchConfig struct {
	MaxLR          float64 `json:"max_lr"`
	TotalSteps     int     `json:"total_steps"`
	PctStart       float64 `json:"pct_start"`
	AnnealStrategy string  `json:"anneal_strategy"`
	DivFactor      float64 `json:"div_factor"`
	FinalDivFactor float64 `json:"final_div_factor"`
	ThreePhase     bool    `json:"three_phase"`
	CycleMomentum  bool    `json:"cycle_momentum"`
	BaseMomentum   float64 `json:"base_momentum"`
	MaxMomentum    float64 `json:"max_momentum"`
}

// PyTorch's reference schedules are the formula with the C library's cos
// at every step of every cosine case, where the C library is glibc 2.36 as
// when they were made. OneCycle's differ from them only where that cos is
// misrounded.
func TestTorchReferenceUsedTheCLibrarysCos(t *testing.T) {
	b, err := os.ReadFile("../../hparam/schedule/testdata/onecycle_torch.json")
	require.NoError(t, err)
	var ref struct {
		Cases []struct {
			Config       json.RawMessage `json:"config"`
			LR, Momentum []float64
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b, &ref))
	var d cosDiffs
	for i, tc := range ref.Cases {
		def := schedule.DefaultOneCycleConfig(0, 0)
		k := torchConfig{PctStart: def.PctStart, AnnealStrategy: def.AnnealStrategy, DivFactor: def.DivFactor,
			FinalDivFactor: def.FinalDivFactor, CycleMomentum: true, BaseMomentum: def.BaseMomentum, MaxMomentum: def.MaxMomentum}
		require.NoError(t, json.Unmarshal(tc.Config, &k))
		if k.AnnealStrategy != "cos" {
			continue
		}
		c := schedule.DefaultOneCycleConfig(k.MaxLR, k.TotalSteps)
		c.PctStart, c.DivFactor, c.FinalDivFactor, c.ThreePhase = k.PctStart, k.DivFactor, k.FinalDivFactor, k.ThreePhase
		c.CycleMomentum, c.BaseMomentum, c.MaxMomentum = k.CycleMomentum, k.BaseMomentum, k.MaxMomentum
		oc, err := schedule.NewOneCycle(c)
		require.NoError(t, err)
		ph := torchPhases(c)
		for s := range k.TotalSteps {
			arg, lr, mom := torchStep(ph, s, Cos)
			if !c.CycleMomentum {
				mom = c.OptimizerMomentum
			}
			require.Equal(t, [2]float64{tc.LR[s], tc.Momentum[s]}, [2]float64{lr, mom},
				"case %d step %d (the data came from glibc 2.36's cos; another C library may round otherwise)", i, s)
			got, gotMom, err := oc.AtBoth(s)
			require.NoError(t, err)
			misrounded := len(d.diff)
			require.True(t, d.check(t, arg))
			if got != lr || gotMom != mom {
				require.Greater(t, len(d.diff), misrounded, "case %d step %d: schedule.Cos agrees with C", i, s)
				t.Logf("case %d step %d: lr %v, PyTorch's %v", i, s, got, lr)
			}
		}
	}
	d.report(t, "the reference's cosine cases")
}
