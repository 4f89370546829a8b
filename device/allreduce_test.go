package device

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/hdet-dev/hdet/mpi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePath(t *testing.T) {
	for _, p := range Paths {
		got, err := ParsePath(string(p))
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	_, err := ParsePath("gpu")
	require.ErrorIs(t, err, ErrPath)
	assert.Contains(t, err.Error(), "[auto device staged host]")
}

func TestResolvePath(t *testing.T) {
	cases := []struct {
		req                 Path
		onDevice, cudaAware bool
		want                Path
		err                 error
	}{
		{PathAuto, false, false, PathHost, nil},
		{PathAuto, false, true, PathHost, nil},
		{PathAuto, true, true, PathDevice, nil},
		{PathAuto, true, false, PathStaged, nil},
		{PathHost, false, true, PathHost, nil},
		{PathHost, true, true, "", ErrPathMismatch},
		{PathStaged, true, true, PathStaged, nil},
		{PathStaged, false, false, "", ErrPathMismatch},
		{PathDevice, true, true, PathDevice, nil},
		{PathDevice, true, false, "", ErrNotCUDAAware},
		{PathDevice, false, true, "", ErrPathMismatch},
		{"nccl", true, true, "", ErrPath},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/device=%v/aware=%v", c.req, c.onDevice, c.cudaAware), func(t *testing.T) {
			got, err := ResolvePath(c.req, c.onDevice, c.cudaAware)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got.Path)
			assert.NotEmpty(t, got.Reason)
			assert.Contains(t, got.String(), string(c.want))
		})
	}
}

// hostMemory stands in for a GPU: "device" and "pinned" allocations are Go
// byte slices it keeps alive, and copies are copies. It counts live
// allocations so tests can check that nothing leaks.
type hostMemory struct {
	mu         sync.Mutex
	live       map[unsafe.Pointer][]byte
	hostAllocs int
}

func newHostMemory() *hostMemory { return &hostMemory{live: map[unsafe.Pointer][]byte{}} }

func (m *hostMemory) alloc(bytes int) unsafe.Pointer {
	b := make([]byte, bytes)
	p := unsafe.Pointer(&b[0])
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[p] = b
	return p
}

func (m *hostMemory) free(p unsafe.Pointer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.live[p]; !ok {
		return fmt.Errorf("free of %p, which is not allocated", p)
	}
	delete(m.live, p)
	return nil
}

func (m *hostMemory) Alloc(bytes int) (unsafe.Pointer, error) { return m.alloc(bytes), nil }
func (m *hostMemory) AllocHost(bytes int) (unsafe.Pointer, error) {
	m.hostAllocs++
	return m.alloc(bytes), nil
}
func (m *hostMemory) Free(p unsafe.Pointer) error     { return m.free(p) }
func (m *hostMemory) FreeHost(p unsafe.Pointer) error { return m.free(p) }
func (m *hostMemory) copy(dst, src unsafe.Pointer, bytes int) error {
	copy(unsafe.Slice((*byte)(dst), bytes), unsafe.Slice((*byte)(src), bytes))
	return nil
}
func (m *hostMemory) CopyHtoD(dst, src unsafe.Pointer, bytes int) error {
	return m.copy(dst, src, bytes)
}
func (m *hostMemory) CopyDtoH(dst, src unsafe.Pointer, bytes int) error {
	return m.copy(dst, src, bytes)
}

func (m *hostMemory) liveCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}

// group is an in-process MPI world of goroutine ranks: each rank's Reducer
// contributes its buffer, and the last to arrive writes the sum into every
// rank's buffer, as MPI_Allreduce in place does, and releases the others.
type group struct {
	size int
	mu   sync.Mutex
	cond *sync.Cond
	bufs [][]float32
	gen  int // counts completed collectives
}

func newGroup(size int) *group {
	g := &group{size: size}
	g.cond = sync.NewCond(&g.mu)
	return g
}

type rankReducer struct{ g *group }

func (r rankReducer) AllreduceFloat32(buf []float32, op mpi.Op) error {
	if op != mpi.Sum {
		return fmt.Errorf("stand-in reduces only sums, got %v", op)
	}
	g := r.g
	g.mu.Lock()
	defer g.mu.Unlock()
	gen := g.gen
	g.bufs = append(g.bufs, buf)
	if len(g.bufs) < g.size {
		for g.gen == gen {
			g.cond.Wait()
		}
		return nil
	}
	sum := make([]float32, len(buf))
	for _, b := range g.bufs {
		for i, v := range b {
			sum[i] += v
		}
	}
	for _, b := range g.bufs {
		copy(b, sum)
	}
	g.bufs = nil
	g.gen++
	g.cond.Broadcast()
	return nil
}

func (r rankReducer) AllreducePtr(ptr unsafe.Pointer, n int, dt mpi.Datatype, op mpi.Op) error {
	if dt != mpi.Float32 {
		return fmt.Errorf("stand-in reduces only float32, got %v", dt)
	}
	return r.AllreduceFloat32(unsafe.Slice((*float32)(ptr), n), op)
}

// runRanks runs f on size goroutine ranks sharing one group and returns
// their errors.
func runRanks(size int, f func(rank int, r Reducer) error) []error {
	g := newGroup(size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() { errs[rank] = f(rank, rankReducer{g}) })
	}
	wg.Wait()
	return errs
}

func fill(n int, f func(i int) float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

func TestDeviceBufferRoundTrip(t *testing.T) {
	mem := newHostMemory()
	b, err := NewDeviceBuffer(mem, 1000)
	require.NoError(t, err)
	assert.Nil(t, b.Host())
	assert.NotNil(t, b.Device())

	in := fill(1000, func(i int) float32 { return float32(i) * 0.5 })
	require.NoError(t, b.Upload(in))
	out := make([]float32, 1000)
	require.NoError(t, b.Download(out))
	assert.Equal(t, in, out)

	require.ErrorIs(t, b.Upload(in[:999]), ErrLength)
	require.ErrorIs(t, b.Download(make([]float32, 1001)), ErrLength)

	require.NoError(t, b.Free())
	assert.Zero(t, mem.liveCount())
	require.NoError(t, b.Free(), "a second Free is harmless")

	_, err = NewDeviceBuffer(mem, 0)
	require.Error(t, err)
}

// The staged path on 4 ranks: each rank's device buffer holds rank r's
// values; after the allreduce every rank holds the sum, the data made the
// trip device → pinned host → "MPI" → device, and the pinned buffer is
// allocated once for repeated calls and freed by Close.
func TestStagedAllreduceSums(t *testing.T) {
	const ranks, n = 4, 4099
	mems := make([]*hostMemory, ranks)
	outs := make([][]float32, ranks)
	errs := runRanks(ranks, func(rank int, r Reducer) error {
		mem := newHostMemory()
		mems[rank] = mem
		a, err := NewAllreducer(PathStaged, r, mem)
		if err != nil {
			return err
		}
		b, err := NewDeviceBuffer(mem, n)
		if err != nil {
			return err
		}
		for range 3 { // the converge step reuses its allreducer every window
			if err := b.Upload(fill(n, func(i int) float32 { return float32(rank*n + i) })); err != nil {
				return err
			}
			if err := a.Allreduce(b, mpi.Sum); err != nil {
				return err
			}
		}
		outs[rank] = make([]float32, n)
		if err := b.Download(outs[rank]); err != nil {
			return err
		}
		if err := a.Close(); err != nil {
			return err
		}
		return b.Free()
	})
	for rank, err := range errs {
		require.NoError(t, err, "rank %d", rank)
	}
	want := fill(n, func(i int) float32 {
		var s float32
		for r := range ranks {
			s += float32(r*n + i)
		}
		return s
	})
	for rank := range ranks {
		assert.Equal(t, want, outs[rank], "rank %d", rank)
		assert.Equal(t, 1, mems[rank].hostAllocs, "rank %d: pinned buffer reused across calls", rank)
		assert.Zero(t, mems[rank].liveCount(), "rank %d: everything freed", rank)
	}
}

func TestStagedAllreduceGrows(t *testing.T) {
	errs := runRanks(2, func(rank int, r Reducer) error {
		mem := newHostMemory()
		a, err := NewAllreducer(PathStaged, r, mem)
		if err != nil {
			return err
		}
		defer a.Close()
		for _, n := range []int{10, 1000} {
			b, err := NewDeviceBuffer(mem, n)
			if err != nil {
				return err
			}
			if err := b.Upload(fill(n, func(int) float32 { return float32(rank + 1) })); err != nil {
				return err
			}
			if err := a.Allreduce(b, mpi.Sum); err != nil {
				return err
			}
			out := make([]float32, n)
			if err := b.Download(out); err != nil {
				return err
			}
			for i, v := range out {
				if v != 3 {
					return fmt.Errorf("n=%d: out[%d] = %v, want 3", n, i, v)
				}
			}
			if err := b.Free(); err != nil {
				return err
			}
		}
		if mem.hostAllocs != 2 {
			return fmt.Errorf("%d pinned allocations, want 2 (one per growth)", mem.hostAllocs)
		}
		return nil
	})
	for rank, err := range errs {
		require.NoError(t, err, "rank %d", rank)
	}
}

func TestDirectAndHostAllreduce(t *testing.T) {
	const n = 257
	errs := runRanks(3, func(rank int, r Reducer) error {
		mem := newHostMemory()
		direct, err := NewAllreducer(PathDevice, r, nil)
		if err != nil {
			return err
		}
		b, err := NewDeviceBuffer(mem, n)
		if err != nil {
			return err
		}
		if err := b.Upload(fill(n, func(i int) float32 { return float32(rank) })); err != nil {
			return err
		}
		if err := direct.Allreduce(b, mpi.Sum); err != nil {
			return err
		}
		out := make([]float32, n)
		if err := b.Download(out); err != nil {
			return err
		}
		host, err := NewAllreducer(PathHost, r, nil)
		if err != nil {
			return err
		}
		h := HostBuffer(fill(n, func(i int) float32 { return float32(i) }))
		if err := host.Allreduce(h, mpi.Sum); err != nil {
			return err
		}
		for i := range n {
			if out[i] != 3 || h[i] != float32(3*i) {
				return fmt.Errorf("element %d: device %v (want 3), host %v (want %d)", i, out[i], h[i], 3*i)
			}
		}
		return b.Free()
	})
	for rank, err := range errs {
		require.NoError(t, err, "rank %d", rank)
	}
}

func TestAllreducerRejectsWrongBuffer(t *testing.T) {
	mem := newHostMemory()
	dev, err := NewDeviceBuffer(mem, 4)
	require.NoError(t, err)
	host := HostBuffer{1, 2, 3, 4}
	r := rankReducer{newGroup(1)}

	for _, c := range []struct {
		p Path
		b Buffer
	}{{PathHost, dev}, {PathDevice, host}, {PathStaged, host}} {
		a, err := NewAllreducer(c.p, r, mem)
		require.NoError(t, err)
		assert.Equal(t, c.p, a.Path())
		require.ErrorIs(t, a.Allreduce(c.b, mpi.Sum), ErrPathMismatch, string(c.p))
	}
	_, err = NewAllreducer(PathAuto, r, mem)
	require.ErrorIs(t, err, ErrPath, "auto must be resolved first")
	_, err = NewAllreducer(PathStaged, r, nil)
	require.Error(t, err)
}
