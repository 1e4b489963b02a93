package procfs

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	pid := os.Getpid()
	if rss, err := Status(pid, "VmRSS"); err != nil || rss <= 0 {
		t.Errorf("Status VmRSS = %d, %v", rss, err)
	}
	if _, err := Status(pid, "VmNothing"); err == nil {
		t.Error("Status of a missing key: no error")
	}
	// Burn a little CPU so that at least one tick is counted.
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; {
	}
	if cpu := CPU(pid); cpu <= 0 {
		t.Errorf("CPU = %s", cpu)
	}
	if cpu := CPU(-1); cpu != 0 {
		t.Errorf("CPU of no process = %s", cpu)
	}
}
