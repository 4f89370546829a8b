package main

// The multi-host test bed for study 7: scripts/testbed.sh's fake hosts
// (network namespaces hdnode1..K on the bridge hdbr0), taken under the
// bed's lock for one run at a time, each host's egress shaped with tc, its
// byte counters read, its link checked by a timed transfer.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errSkipped wraps why a study could not run on this machine (no root, no
// test bed); the runner prints it and leaves the study's doc block alone.
var errSkipped = errors.New("skipped")

// netLink is one link setting: every host's egress limited to Rate bits/s
// with Delay added (0, 0: unshaped).
type netLink struct {
	Name  string
	Rate  float64 // bits per second; 0: unshaped
	Delay time.Duration
}

func (l netLink) shaped() bool { return l.Rate > 0 || l.Delay > 0 }

// tcRate is a rate as tc writes it (100mbit, 1gbit).
func tcRate(bits float64) string {
	switch {
	case bits >= 1e9 && int64(bits)%1e9 == 0:
		return fmt.Sprintf("%dgbit", int64(bits/1e9))
	case bits >= 1e6 && int64(bits)%1e6 == 0:
		return fmt.Sprintf("%dmbit", int64(bits/1e6))
	}
	return fmt.Sprintf("%dbit", int64(bits))
}

// tcUsec is a delay in tc's microseconds.
func tcUsec(d time.Duration) string { return fmt.Sprintf("%dus", d.Microseconds()) }

// tbfArgs limits eth0's egress to the link's rate with a token bucket: a
// burst of 1 ms at the rate, at least 64 KiB (a GSO packet on a veth), and
// a queue of 50 ms before tail drops.
func tbfArgs(l netLink) []string {
	burst := max(64<<10, int(l.Rate/8/1000))
	return []string{"qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", tcRate(l.Rate),
		"burst", strconv.Itoa(burst), "latency", "50ms"}
}

// netemArgs delays eth0's egress and, with a rate, limits it (netem's
// own rate, which counts every packet's length); limit is in packets.
func netemArgs(l netLink) []string {
	args := []string{"qdisc", "replace", "dev", "eth0", "root", "netem", "delay", tcUsec(l.Delay), "limit", "100000"}
	if l.Rate > 0 {
		args = append(args, "rate", tcRate(l.Rate))
	}
	return args
}

// bed is the test bed while this process holds its lock.
type bed struct {
	script, state string
	setup         []string // the environment testbed.sh runs with
	env           []string // os.Environ plus the bed's env.sh: mpirun's
	hosts         []string
	slots         int
	lock          *os.File
	log           func(string, ...any)
}

// bedTools are what the bed and the study's shaping need.
var bedTools = []string{"ip", "nsenter", "unshare", "tc", "mpirun", "bash"}

// bedMissing says why the bed cannot be built here, nil when it can.
func bedMissing(script string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (the test bed's network namespaces and tc)", errSkipped)
	}
	for _, t := range bedTools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%w: %s is not installed (scripts/deps.sh netns)", errSkipped, t)
		}
	}
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("%w: no test bed script: %w", errSkipped, err)
	}
	return nil
}

// envOr is the environment variable name's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// openBed waits for the bed's lock (another test bed user may hold it),
// then builds hosts fake hosts with slots each. It is scripts/testbed.sh's
// bed, the tests' own, unless HDET_TESTBED_PREFIX, _BRIDGE, _SUBNET,
// _STATE and _LOCK name another one beside it (testbed.sh).
func openBed(ctx context.Context, script string, hosts, slots int, logf func(string, ...any)) (*bed, error) {
	state, lockPath := envOr("HDET_TESTBED_STATE", "/tmp/hdet-testbed"), envOr("HDET_TESTBED_LOCK", "/tmp/hdet-testbed.lock")
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for said := false; ; said = true {
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			break
		}
		if !said {
			logf("  waiting for the test bed's lock %s (another run holds it)", lockPath)
		}
		select {
		case <-ctx.Done():
			lock.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	// No TCP mesh check at up (NETNS_CHECK=0): its listeners give up after
	// 10 s, which a loaded machine overruns; every run checks its link.
	b := &bed{script: script, state: state, lock: lock, slots: slots, log: logf,
		setup: append(os.Environ(), "HDET_TESTBED_HOSTS="+strconv.Itoa(hosts), "HDET_TESTBED_SLOTS="+strconv.Itoa(slots),
			"HDET_TESTBED_STATE="+state, "NETNS_CHECK=0")}
	if out, err := b.cmd(ctx, script, "up").CombinedOutput(); err != nil {
		b.close()
		return nil, fmt.Errorf("testbed.sh up: %w\n%s", err, tail(string(out), 2000))
	}
	dump, err := exec.CommandContext(ctx, "bash", "-c", ". "+state+"/env.sh; env -0").Output()
	if err != nil {
		b.close()
		return nil, fmt.Errorf("the bed's env.sh: %w", err)
	}
	for _, kv := range bytes.Split(dump, []byte{0}) {
		if len(kv) > 0 {
			b.env = append(b.env, string(kv))
		}
	}
	for i := 1; i <= hosts; i++ {
		b.hosts = append(b.hosts, fmt.Sprintf("%s%d", envOr("HDET_TESTBED_PREFIX", "hdnode"), i))
	}
	return b, nil
}

func (b *bed) cmd(ctx context.Context, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, name, args...)
	c.Env = b.setup
	return c
}

// close tears the bed down and lets the next user have it.
func (b *bed) close() {
	if out, err := b.cmd(context.Background(), b.script, "down").CombinedOutput(); err != nil {
		b.log("  testbed.sh down: %v\n%s", err, tail(string(out), 1000))
	}
	_ = b.lock.Close() // releases the lock
}

// onHost runs a command in host's network namespace and returns its output.
func (b *bed) onHost(ctx context.Context, host string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", host}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s: %w: %s", host, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// shape puts the link's qdisc on every host's eth0 (the egress of the host:
// what it sends into the bridge) and returns what tc shows of it. A delay
// needs sch_netem; a kernel without it gets the rate alone (tbf), and
// delayApplied says so.
func (b *bed) shape(ctx context.Context, l netLink) (qdisc string, delayApplied bool, err error) {
	delayApplied = l.Delay == 0
	for _, h := range b.hosts {
		switch {
		case !l.shaped():
		case l.Delay > 0:
			_, err = b.onHost(ctx, h, append([]string{"tc"}, netemArgs(l)...)...)
			if err == nil {
				delayApplied = true
				break
			}
			if !strings.Contains(err.Error(), "unknown") || l.Rate == 0 {
				return "", false, err
			}
			fallthrough // no sch_netem in this kernel: the rate alone
		default:
			if _, err := b.onHost(ctx, h, append([]string{"tc"}, tbfArgs(l)...)...); err != nil {
				return "", false, err
			}
		}
	}
	out, err := b.onHost(ctx, b.hosts[0], "tc", "qdisc", "show", "dev", "eth0")
	return strings.TrimSpace(out), delayApplied, err
}

// counter reads one of eth0's statistics (tx_bytes) on every host.
func (b *bed) counter(ctx context.Context, name string) ([]int64, error) {
	var out []int64
	for _, h := range b.hosts {
		s, err := b.onHost(ctx, h, "cat", "/sys/class/net/eth0/statistics/"+name)
		if err != nil {
			return nil, err
		}
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", h, name, err)
		}
		out = append(out, v)
	}
	return out, nil
}

var qdiscSent = regexp.MustCompile(`Sent (\d+) bytes`)

// qdiscBytes is what went through each host's eth0 root qdisc ("Sent N
// bytes" of tc -s); 0 for a host without one (noqueue counts nothing).
func (b *bed) qdiscBytes(ctx context.Context) ([]int64, error) {
	var out []int64
	for _, h := range b.hosts {
		s, err := b.onHost(ctx, h, "tc", "-s", "qdisc", "show", "dev", "eth0")
		if err != nil {
			return nil, err
		}
		var v int64
		if m := qdiscSent.FindStringSubmatch(s); m != nil {
			v, _ = strconv.ParseInt(m[1], 10, 64)
		}
		out = append(out, v)
	}
	return out, nil
}

// hostfile writes an Open MPI hostfile of the bed's hosts into dir.
func (b *bed) hostfile(dir string) (string, error) {
	var sb strings.Builder
	for _, h := range b.hosts {
		fmt.Fprintf(&sb, "%s slots=%d\n", h, b.slots)
	}
	p := filepath.Join(dir, "hostfile")
	return p, os.WriteFile(p, []byte(sb.String()), 0o644)
}

// inHost runs fn on an OS thread that entered host's network namespace:
// the sockets fn creates belong to the host and keep working from any
// goroutine. The thread is locked and never unlocked, so Go ends it with
// the goroutine instead of reusing it.
func inHost(host string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(filepath.Join("/run/netns", host))
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering %s: %w", host, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// linkCheck is a timed transfer between two hosts of the bed.
type linkCheck struct {
	Bytes int
	Mbits float64       // goodput of the transfer, megabits per second
	RTT   time.Duration // median TCP connect time (SYN, SYN-ACK: one round trip)
}

// checkLink sends size bytes from host from to host to (at toAddr, a name
// or an address) over TCP and times it (until the receiver's one-byte
// answer after the last byte), and takes the median of 9 TCP connects as
// the round trip.
func checkLink(from, to, toAddr string, size int) (linkCheck, error) {
	var ln net.Listener
	if err := inHost(to, func() (err error) { ln, err = net.Listen("tcp", ":0"); return }); err != nil {
		return linkCheck{}, err
	}
	defer ln.Close()
	go serveSink(ln)
	addr := net.JoinHostPort(toAddr, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	c := linkCheck{Bytes: size}
	var rtts []float64
	var conn net.Conn
	err := inHost(from, func() error {
		for range 9 {
			t0 := time.Now()
			k, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return err
			}
			rtts = append(rtts, float64(time.Since(t0)))
			k.Close()
		}
		var err error
		conn, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	})
	if err != nil {
		return c, fmt.Errorf("link check %s -> %s: %w", from, to, err)
	}
	defer conn.Close()
	c.RTT = time.Duration(median(rtts))
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	t0 := time.Now()
	buf := make([]byte, 1<<16)
	for sent := 0; sent < size; sent += len(buf) {
		if _, err := conn.Write(buf[:min(len(buf), size-sent)]); err != nil {
			return c, fmt.Errorf("link check %s -> %s: %w", from, to, err)
		}
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadFull(conn, buf[:1]); err != nil {
		return c, fmt.Errorf("link check %s -> %s: no answer: %w", from, to, err)
	}
	c.Mbits = float64(size) * 8 / time.Since(t0).Seconds() / 1e6
	return c, nil
}

// serveSink reads every connection to its end and answers one byte.
func serveSink(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			if _, err := io.Copy(io.Discard, c); err == nil {
				_, _ = c.Write([]byte{1})
			}
		}()
	}
}

// deltas is after - before, element by element.
func deltas(after, before []int64) []int64 {
	out := slices.Clone(after)
	for i := range out {
		out[i] -= before[i]
	}
	return out
}
