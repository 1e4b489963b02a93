// Package procfs reads what the tests and the tools measure of a process
// from Linux's /proc: its memory (status) and its CPU time (stat).
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Status returns a "Vm..." line of /proc/<pid>/status (VmRSS, VmHWM), in
// KiB.
func Status(pid int, key string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", key, pid)
}

// CPU returns the user and system CPU time of process pid so far, all its
// threads, from /proc/<pid>/stat (in clock ticks, USER_HZ = 100); 0 when it
// cannot be read.
func CPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses and may hold
	// any byte: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
