package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The Docker engine's CPU, read from /proc, for (l).

// engineMeter adds up the CPU of the Docker engine's processes: dockerd
// and containerd (their reaped children included), and every shim, which
// lives as long as its container (runc's CPU is the shim's children's),
// sampled every 20 ms: a shim's last few milliseconds before it exits are
// missed, so the figure is a lower bound.
type engineMeter struct {
	daemons []int
	ours    func(containerID string) bool
	mine    map[int]bool          // per shim pid: does it serve one of ours
	shims   map[int]time.Duration // the last CPU seen per shim
	spent   atomic.Int64          // shims' CPU so far, ns
	stopC   chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex // one scan at a time: the ticker's, or a caller's last one
}

// startEngineMeter counts the shims of the containers ours says are ours:
// other work on this machine uses the same engine.
func startEngineMeter(ours func(containerID string) bool) *engineMeter {
	m := &engineMeter{ours: ours, mine: map[int]bool{}, shims: map[int]time.Duration{}, stopC: make(chan struct{})}
	for _, pid := range pids() {
		switch comm(pid) {
		case "dockerd", "containerd":
			m.daemons = append(m.daemons, pid)
		}
	}
	m.scan()
	m.wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.stopC:
				return
			case <-tick.C:
				m.scan()
			}
		}
	})
	return m
}

func (m *engineMeter) scan() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pid := range pids() {
		if !strings.HasPrefix(comm(pid), "containerd-shim") {
			continue
		}
		mine, known := m.mine[pid]
		if !known {
			mine = m.ours(shimID(pid))
			m.mine[pid] = mine
		}
		if !mine {
			continue
		}
		c := procCPUAll(pid)
		last, seen := m.shims[pid]
		if !seen {
			last = 0
		}
		if c > last {
			m.spent.Add(int64(c - last))
			m.shims[pid] = c
		}
	}
}

// shimCPU is what the shims of our containers spent so far.
func (m *engineMeter) shimCPU() time.Duration { return time.Duration(m.spent.Load()) }

// daemonCPU is what dockerd and containerd spent so far, for everyone.
func (m *engineMeter) daemonCPU() time.Duration {
	var t time.Duration
	for _, pid := range m.daemons {
		t += procCPUAll(pid)
	}
	return t
}

func (m *engineMeter) stop() {
	close(m.stopC)
	m.wg.Wait()
}

func pids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// shimID is the container a shim serves: its -id argument.
func shimID(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "-id" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// procCPUAll is a process's user and system CPU with its reaped
// children's.
func procCPUAll(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(rest)
	if len(f) < 15 {
		return 0
	}
	var sum int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		var v int64
		fmt.Sscanf(f[i], "%d", &v)
		sum += v
	}
	return time.Duration(sum) * 10 * time.Millisecond
}
