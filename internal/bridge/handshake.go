package bridge

// The worker's start-up exchange: connection, HELLO, WELCOME, READY.

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// handshake takes the worker from its connection to READY.
func (w *Worker) handshake(ctx context.Context) error {
	o := &w.opts
	conn, err := w.accept(ctx)
	if err != nil {
		return w.fail("connecting", err)
	}
	w.conn = conn
	go read(conn, w.frames, w.done)

	m, _, err := w.await(ctx, msgHello, o.StartTimeout)
	if err != nil {
		return w.fail("sending HELLO", err)
	}
	if err := w.checkHello(m); err != nil {
		return w.fail("sending HELLO", err)
	}
	if err := w.shm.mapFloats(w.hello.ParamCount + w.hello.StateCount); err != nil {
		return w.fail("starting", err)
	}
	welcome := &message{
		Type: msgWelcome, Protocol: w.hello.Protocol, Rank: o.Rank, WorldSize: o.WorldSize, SyncMode: w.mode,
		Buffer: &BufferSpec{Kind: BufferFD, FD: bufferFD, Floats: len(w.shm.data)},
	}
	if err := w.send(welcome, nil); err != nil {
		return w.fail("starting", err)
	}
	if _, _, err := w.await(ctx, msgReady, o.StartTimeout); err != nil {
		return w.fail("copying its initial parameters", err)
	}
	w.idle, w.next = true, w.hello.StartStep
	w.peakBaseLR = w.hello.ScriptPeakLR
	return nil
}

func (w *Worker) accept(ctx context.Context) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := w.ln.Accept()
		ch <- result{c, err}
	}()
	timer := time.NewTimer(w.opts.StartTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-w.exited:
		return nil, fmt.Errorf("%w before connecting (%s): %s", ErrExited, describeExit(w.exitState), w.whyNoConnection())
	case <-timer.C:
		_ = w.ln.Close()
		return nil, fmt.Errorf("%w: %s did not connect within %v; a script under hdet connects at its first optimizer step: does it reach one, and did it call hdet.attach(optimizer, total_steps)?", ErrTimeout, w.opts.interpreter(), w.opts.StartTimeout)
	case <-ctx.Done():
		_ = w.ln.Close()
		return nil, ctx.Err()
	}
}

func (w *Worker) checkHello(m *message) error {
	if m.Hello == nil || m.Hello.Protocol < minProtocol || m.Hello.Protocol > ProtocolVersion {
		v := 0
		if m.Hello != nil {
			v = m.Hello.Protocol
		}
		return fmt.Errorf("%w: worker speaks %d, this hdet speaks %d; install the hdet Python package from the same release", ErrVersion, v, ProtocolVersion)
	}
	h := *m.Hello
	switch {
	case h.ParamCount <= 0 || h.StateCount < 0:
		return fmt.Errorf("%w: HELLO with %d parameters and %d floats of optimizer state", ErrProtocol, h.ParamCount, h.StateCount)
	case h.SyncMode != SyncGradients && h.SyncMode != SyncLocal:
		return fmt.Errorf("%w: HELLO with sync mode %q", ErrProtocol, h.SyncMode)
	case h.StateCount > 0 && h.SyncMode != SyncLocal:
		return fmt.Errorf("%w: HELLO with optimizer state in %s mode", ErrProtocol, h.SyncMode)
	case h.Dtype != "float32":
		return fmt.Errorf("%w: HELLO with buffer dtype %q (want float32)", ErrProtocol, h.Dtype)
	case !slices.Contains(h.Buffers, BufferFD):
		return fmt.Errorf("%w: worker cannot use a %s buffer (offers %v)", ErrProtocol, BufferFD, h.Buffers)
	case len(h.Hyperparameters) == 0:
		return fmt.Errorf("%w: HELLO without hyperparameters", ErrProtocol)
	case !(h.ScriptPeakLR >= 0) || math.IsInf(h.ScriptPeakLR, 0):
		return fmt.Errorf("%w: HELLO with the script's peak learning rate %v", ErrProtocol, h.ScriptPeakLR)
	}
	sum := 0
	for _, g := range h.ParamGroups {
		sum += g.Size
	}
	if sum != h.ParamCount {
		return fmt.Errorf("%w: HELLO param groups hold %d parameters, param_count says %d", ErrProtocol, sum, h.ParamCount)
	}
	if err := w.checkReplicaWorld(h); err != nil {
		return err
	}
	if err := w.checkDevice(h.Device); err != nil {
		return err
	}
	if err := checkMode(w.opts.SyncMode, h.SyncMode, w.opts.WorldSize); err != nil {
		return err
	}
	if err := w.opts.checkResumed(h); err != nil {
		return err
	}
	w.hello, w.mode = h, h.SyncMode
	return nil
}

// checkReplicaWorld checks the script's torch world against the replica
// groups: with G > 1 it must be the replica (G ranks); sharded parameters
// need one, since hdet averages shards across replicas, not inside one.
func (w *Worker) checkReplicaWorld(h Hello) error {
	g := w.opts.ReplicaSize
	switch {
	case h.Unsupported != "":
		return fmt.Errorf("%w: %s", ErrSetting, h.Unsupported)
	case g > 1 && h.DistWorldSize != g:
		return fmt.Errorf("%w: train.replica_size is %d, so each replica's %d ranks must train as one data-parallel model: the script must call torch.distributed.init_process_group() (hdet makes its replica its world: WORLD_SIZE=%d) and wrap the model in DDP or FSDP2's fully_shard before its first optimizer step; its world had %d ranks", ErrConflict, g, g, g, h.DistWorldSize)
	case h.Sharded && g <= 1:
		return fmt.Errorf("%w: the script's parameters are sharded over its torch world of %d ranks (FSDP2 fully_shard), which is the whole run: hdet averages shards across replicas of the same sharding, so set train.replica_size to the ranks that shard one model (each replica is then its own torch world)", ErrConflict, h.DistWorldSize)
	}
	return nil
}

// checkDevice refuses parameters on another rank's GPU: the script sees its
// torch world's GPUs on the node, as under torchrun, and must pick its own
// (cuda:LOCAL_RANK); on cuda:0 every rank of the node would share one GPU.
func (w *Worker) checkDevice(dev string) error {
	want := w.opts.GPUIndex
	idx, ok := strings.CutPrefix(dev, "cuda:")
	if w.opts.GPU == "" || want < 0 || !ok || idx == strconv.Itoa(want) {
		return nil
	}
	pick := fmt.Sprintf("it sees its torch world's GPUs on this node, as under torchrun: put the model on torch.device(\"cuda\", int(os.environ[\"LOCAL_RANK\"])) (LOCAL_RANK=%d)", w.opts.torchLocalRank())
	if want != w.opts.torchLocalRank() {
		pick = "it sees its own GPU only (shared GPUs, a MIG instance or one GPU a Slurm task): put the model on torch.device(\"cuda\", 0)"
	}
	return fmt.Errorf("%w: the script's parameters are on %s, but this rank's GPU is cuda:%d; %s", ErrSetting, dev, want, pick)
}

// checkMode compares the configured sync mode with what the script does.
func checkMode(configured, script string, ranks int) error {
	switch {
	case configured == "" || configured == script:
		return nil
	case configured == SyncLocal:
		return fmt.Errorf("%w: train.sync is local, but the script set up torch.distributed, whose DDP all-reduces gradients every step; remove train.sync (hdet then follows the script) or set it to gradients", ErrConflict)
	case ranks > 1:
		return fmt.Errorf("%w: train.sync is gradients, but the script did not set up torch.distributed before constructing the scheduler, so nothing averages its gradients; remove train.sync (hdet then runs local mode) or call init_process_group first", ErrConflict)
	}
	return nil
}
