package metrics

import (
	"os"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// goMetrics are the Go runtime's figures exported, under the names
// Prometheus' Go collector gives them.
var goMetrics = []struct {
	name, help, key string
	typ             Type
}{
	{"go_goroutines", "Number of goroutines that currently exist.", "/sched/goroutines:goroutines", GaugeType},
	{"go_threads", "Number of OS threads the Go runtime has created.", "/sched/threads/total:threads", GaugeType},
	{"go_sched_gomaxprocs_threads", "GOMAXPROCS: the OS threads that can run Go code at once.", "/sched/gomaxprocs:threads", GaugeType},
	{"go_memstats_heap_alloc_bytes", "Bytes of heap memory occupied by live objects and dead ones not yet swept.", "/memory/classes/heap/objects:bytes", GaugeType},
	{"go_gc_heap_live_bytes", "Bytes of heap memory occupied by live objects, as the last GC marked them: the heap a worker keeps, garbage excluded.", "/gc/heap/live:bytes", GaugeType},
	{"go_memstats_sys_bytes", "Bytes of memory mapped by the Go runtime.", "/memory/classes/total:bytes", GaugeType},
	{"go_gc_cycles_total", "Completed GC cycles.", "/gc/cycles/total:gc-cycles", CounterType},
	{"go_gc_gogc_percent", "The GOGC setting (-1: off).", "/gc/gogc:percent", GaugeType},
	{"go_gc_gomemlimit_bytes", "The GOMEMLIMIT setting.", "/gc/gomemlimit:bytes", GaugeType},
}

// Runtime registers the Go runtime's metrics (go_*) and, where /proc is
// there to read, the process's (process_*).
func (r *Registry) Runtime() {
	r.GaugeFunc("go_info", "Information about the Go environment.", func() float64 { return 1 }, "version", runtime.Version())
	goDescs := make([]Desc, len(goMetrics))
	for i, m := range goMetrics {
		goDescs[i] = Desc{Name: m.name, Help: m.help, Type: m.typ}
	}
	r.Collect(func() []Family {
		s := make([]rtmetrics.Sample, len(goMetrics))
		for i, m := range goMetrics {
			s[i].Name = m.key
		}
		rtmetrics.Read(s)
		var out []Family
		for i := range goMetrics {
			var v float64
			switch s[i].Value.Kind() {
			case rtmetrics.KindUint64:
				v = float64(s[i].Value.Uint64())
			case rtmetrics.KindFloat64:
				v = s[i].Value.Float64()
			default:
				continue // not in this Go's runtime
			}
			out = append(out, goDescs[i].Family(Sample{Value: v}))
		}
		return out
	}, goDescs...)
	r.Collect(processFamilies, processCPU, processVirtual, processResident, processStart, processOpenFDs, processMaxFDs)
}

// The process's figures, under the names of Prometheus' process collector.
var (
	processCPU      = Desc{Name: "process_cpu_seconds_total", Help: "Total user and system CPU time spent in seconds.", Type: CounterType}
	processVirtual  = Desc{Name: "process_virtual_memory_bytes", Help: "Virtual memory size in bytes.", Type: GaugeType}
	processResident = Desc{Name: "process_resident_memory_bytes", Help: "Resident memory size in bytes.", Type: GaugeType}
	processStart    = Desc{Name: "process_start_time_seconds", Help: "Start time of the process since the Unix epoch in seconds.", Type: GaugeType}
	processOpenFDs  = Desc{Name: "process_open_fds", Help: "Number of open file descriptors.", Type: GaugeType}
	processMaxFDs   = Desc{Name: "process_max_fds", Help: "Maximum number of open file descriptors.", Type: GaugeType}
)

// processFamilies reads the process's figures from /proc/self, as
// Prometheus' process collector does; what cannot be read is left out.
func processFamilies() []Family {
	var out []Family
	add := func(d Desc, v float64) { out = append(out, d.Family(Sample{Value: v})) }
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		add(processCPU, cpu.Seconds())
	}
	if stat, err := os.ReadFile("/proc/self/stat"); err == nil {
		// The fields after the command, which is in parentheses and may
		// hold any byte: state is field 3, starttime 22, vsize 23, rss 24.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 21 {
				vsize, _ := strconv.ParseFloat(f[20], 64)
				rss, _ := strconv.ParseFloat(f[21], 64)
				add(processVirtual, vsize)
				add(processResident, rss*float64(os.Getpagesize()))
				if start, ok := startTime(f[19]); ok {
					add(processStart, start)
				}
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		add(processOpenFDs, float64(len(fds)))
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		add(processMaxFDs, float64(lim.Cur))
	}
	return out
}

// startTime converts /proc/self/stat's starttime (clock ticks since boot,
// USER_HZ = 100) to seconds since the epoch, with /proc/stat's btime.
func startTime(ticks string) (float64, bool) {
	t, err := strconv.ParseFloat(ticks, 64)
	if err != nil {
		return 0, false
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(stat), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return boot + t/100, err == nil
		}
	}
	return 0, false
}
