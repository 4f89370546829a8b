package hparam

import (
	"fmt"
	"math"
)

// Validate checks the spread: a known kind, a finite alpha >= 0, and for
// the multiplicative spread alpha < 1 (alpha >= 1 would give the lowest
// slot a zero or negative value). Field names are "spread.kind" and
// "spread.alpha".
func (s Spread) Validate() error {
	if math.IsNaN(s.Alpha) || math.IsInf(s.Alpha, 0) || s.Alpha < 0 {
		return FieldErrorf("spread.alpha", "must be a finite number >= 0, got %v", s.Alpha)
	}
	switch s.Kind {
	case Multiplicative:
		if s.Alpha >= 1 {
			return FieldErrorf("spread.alpha", "must be < 1 for a multiplicative spread (1-alpha is the lowest multiplier), got %v", s.Alpha)
		}
	case Additive, Geometric:
	default:
		return FieldErrorf("spread.kind", "must be %q, %q or %q, got %q", Multiplicative, Additive, Geometric, s.Kind)
	}
	return nil
}

// Validate checks that the bounds are finite with Lower <= Upper (field
// names "bounds.lower", "bounds.upper").
func (b Bounds) Validate() error {
	if err := checkFinite("bounds.lower", b.Lower); err != nil {
		return err
	}
	if err := checkFinite("bounds.upper", b.Upper); err != nil {
		return err
	}
	if b.Lower > b.Upper {
		return FieldErrorf("bounds.upper", "must be >= bounds.lower (%v), got %v", b.Lower, b.Upper)
	}
	return nil
}

// Clamp returns v limited to [Lower, Upper].
func (b Bounds) Clamp(v float64) float64 {
	if v < b.Lower {
		return b.Lower
	}
	if v > b.Upper {
		return b.Upper
	}
	return v
}

// offset is slot j's signed position (j-(N-1)/2)/d in [-1, 1], with
// d = max((N-1)/2, 0.5). Slots j and N-1-j get exactly opposite offsets.
func offset(j, n int) float64 {
	mid := float64(n-1) / 2
	d := math.Max(mid, 0.5)
	return (float64(j) - mid) / d
}

// Multipliers returns the multiplicative spread's rho_j for slots 0..n-1.
// The upper half is computed as 1 + alpha*offset and the lower half as
// 2 - rho_{n-1-j}, which is exact for rho in [1, 2] (Sterbenz), so every
// pair rho_j + rho_{n-1-j} is exactly 2 and the multipliers have mean
// exactly 1 when summed in pairs.
func (s Spread) Multipliers(n int) []float64 {
	rho := make([]float64, n)
	for j := n - 1; j >= n/2; j-- {
		rho[j] = 1 + float64(s.Alpha*offset(j, n))
		rho[n-1-j] = 2 - rho[j]
	}
	return rho
}

// Value is slot j's value out of n for base b, before clamping. It
// computes one multiplier; use Values for a whole population.
func (s Spread) Value(base float64, j, n int) float64 {
	switch s.Kind {
	case Additive:
		return base + float64(s.Alpha*offset(j, n))
	case Geometric:
		return base * geometric(math.Log1p(s.Alpha), j, n)
	default:
		hi := j // same operations as Multipliers, so the result is identical
		if j < n/2 {
			hi = n - 1 - j
		}
		rho := 1 + float64(s.Alpha*offset(hi, n))
		if hi != j {
			rho = 2 - rho
		}
		return base * rho
	}
}

// geometric is slot j's multiplier (1+alpha)^offset, computed as
// exp(offset*log1p(alpha)) for the upper half and as the reciprocal of the
// mirror slot's for the lower half: half the exps of a population, with
// log1p(alpha) computed once (Pow costs several times more, and the
// controller computes N of these per window).
func geometric(log1pAlpha float64, j, n int) float64 {
	if j < n/2 {
		return 1 / math.Exp(offset(n-1-j, n)*log1pAlpha)
	}
	return math.Exp(offset(j, n) * log1pAlpha)
}

// Values returns the clamped value of every slot 0..n-1 for base b.
func (s Spread) Values(base float64, n int, b Bounds) []float64 {
	out := make([]float64, n)
	s.ValuesTo(out, base, b)
	return out
}

// ValuesTo is Values into dst, for n = len(dst) slots, without allocating.
// Each value is bit-identical to b.Clamp(s.Value(base, j, n)).
func (s Spread) ValuesTo(dst []float64, base float64, b Bounds) {
	s.Coefs(dst)
	add := s.Kind == Additive
	for j, c := range dst {
		dst[j] = b.Clamp(withCoef(add, base, c))
	}
}

// Coefs fills coef with each of n = len(coef) slots' coefficient, which
// depends on the spread and n but not on the base: the multiplier of a
// multiplicative or geometric spread (the value is base*c), the added
// alpha*offset of an additive one (base+c). Computed with Value's
// operations, and mirrored slots share one multiplier computation, so
// base*c or base+c gives Value's results bit for bit; a caller whose
// spread holds over many windows computes them once.
func (s Spread) Coefs(coef []float64) {
	n := len(coef)
	switch s.Kind {
	case Multiplicative:
		for j := n - 1; j >= n/2; j-- {
			rho := 1 + float64(s.Alpha*offset(j, n)) // as Multipliers
			coef[j], coef[n-1-j] = rho, 2-rho
		}
	case Geometric:
		l := math.Log1p(s.Alpha)
		for j := n - 1; j >= n/2; j-- {
			m := math.Exp(offset(j, n) * l) // as geometric
			coef[j] = m
			if k := n - 1 - j; k != j {
				coef[k] = 1 / m
			}
		}
	default:
		for j := range coef {
			coef[j] = s.Alpha * offset(j, n)
		}
	}
}

// withCoef is the value, before clamping, of a slot with coefficient c
// (Coefs) for base, add telling an additive spread: its caller compares
// the kind, a string, once rather than for every slot.
func withCoef(add bool, base, c float64) float64 {
	if add {
		return base + c
	}
	return base * c
}

func (s Spread) String() string { return fmt.Sprintf("%s(alpha=%g)", s.Kind, s.Alpha) }

func checkFinite(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return FieldErrorf(field, "must be a finite number, got %v", v)
	}
	return nil
}
