package batch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Labels a batch never groups by: the line number, and the task a sample
// belongs to, which pass@1 averages over instead; nor by the fleet's own
// (sandfleet.*).
const (
	LabelLine = "batch_line"
	LabelTask = "task_id"
)

// maxGroupValues bounds the values of one label key that are grouped:
// past it the key names something per job, not a group, and is dropped.
const maxGroupValues = 100

// Group is the pass counts of the jobs sharing one label value.
type Group struct {
	Label  string `json:"label"`
	Value  string `json:"value"`
	Total  int    `json:"total"`
	Passed int    `json:"passed"`
	// PassAt1 is the mean over the group's tasks (label task_id; without
	// it each job is a task) of the share of its samples that succeeded:
	// pass@1 estimated from n samples per task.
	PassAt1 float64 `json:"pass_at_1"`
}

// groupKey names a label value.
type groupKey struct{ label, value string }

type tally struct{ n, c int }

// groups counts results by label value, and within each by task.
type groups struct {
	tasks   map[groupKey]map[string]*tally
	dropped map[string]bool
	values  map[string]int // distinct values seen per label key
}

func (g *groups) add(res *jobs.Result, id string) {
	if g.tasks == nil {
		g.tasks, g.dropped, g.values = map[groupKey]map[string]*tally{}, map[string]bool{}, map[string]int{}
	}
	task := res.Labels[LabelTask]
	if task == "" {
		task = id
	}
	for k, v := range res.Labels {
		// The fleet's own labels (the batch's name, a token's) are the
		// same on every job of a batch: not a group.
		if k == LabelLine || k == LabelTask || g.dropped[k] || strings.HasPrefix(k, "sandfleet.") {
			continue
		}
		key := groupKey{k, v}
		ts, ok := g.tasks[key]
		if !ok {
			g.values[k]++
			if g.values[k] > maxGroupValues {
				g.dropped[k] = true
				for gk := range g.tasks {
					if gk.label == k {
						delete(g.tasks, gk)
					}
				}
				continue
			}
			ts = map[string]*tally{}
			g.tasks[key] = ts
		}
		t := ts[task]
		if t == nil {
			t = &tally{}
			ts[task] = t
		}
		t.n++
		if res.Status == jobs.StatusSucceeded {
			t.c++
		}
	}
}

func (g *groups) summary() []Group {
	out := []Group{}
	for key, ts := range g.tasks {
		gr := Group{Label: key.label, Value: key.value}
		sum := 0.0
		for _, t := range ts {
			gr.Total += t.n
			gr.Passed += t.c
			sum += float64(t.c) / float64(t.n)
		}
		if len(ts) > 0 {
			gr.PassAt1 = float64(int(sum/float64(len(ts))*10000+0.5)) / 10000
		}
		out = append(out, gr)
	}
	slices.SortFunc(out, func(a, b Group) int {
		if c := strings.Compare(a.Label, b.Label); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return out
}

// FormatGroup is one group as the text summary shows it.
func FormatGroup(g Group) string {
	return fmt.Sprintf("%s=%s %d/%d passed, pass@1 %.3f", g.Label, g.Value, g.Passed, g.Total, g.PassAt1)
}

// Manifest says what a batch ran on, for the record next to its results.
type Manifest struct {
	Batch string `json:"batch"`
	// Presets maps each preset the batch's jobs named to the image IDs
	// their results ran in (more than one: the image was rebuilt during
	// the batch, or workers differ).
	Presets map[string][]string `json:"presets"`
	// Templates maps each template the batch's jobs ran on to the
	// versions of its registration they ran (more than one: it was
	// registered again during the batch).
	Templates map[string][]uint64 `json:"templates,omitempty"`
	// Workers are the live workers when the batch ended: ID and version.
	Workers []ManifestWorker `json:"workers"`
	// Limits are the distinct limits the jobs asked for (as written; a
	// zero field took the worker's default), each with its job count.
	Limits []ManifestLimits `json:"limits"`
	// Summary holds the counts: per status and per group.
	Summary *Summary `json:"summary"`
}

// ManifestWorker is one worker of a Manifest.
type ManifestWorker struct {
	ID      string `json:"id"`
	Version string `json:"version"`
}

// ManifestLimits is one set of limits of a Manifest.
type ManifestLimits struct {
	Limits json.RawMessage `json:"limits"`
	Jobs   int             `json:"jobs"`
}

// record is what the manifest keeps of the batch's jobs.
type record struct {
	digests   map[string]map[string]bool // preset → image IDs
	templates map[string]map[uint64]bool // template → versions
	limits    map[string]int             // limits JSON → jobs
}

func (m *record) job(j *jobs.Job) {
	if m.limits == nil {
		m.limits, m.digests = map[string]int{}, map[string]map[string]bool{}
	}
	b, _ := json.Marshal(j.Limits)
	m.limits[string(b)]++
	if m.digests[j.Image] == nil {
		m.digests[j.Image] = map[string]bool{}
	}
}

func (m *record) result(image string, res *jobs.Result) {
	if m.digests == nil {
		m.digests = map[string]map[string]bool{}
	}
	if m.digests[image] == nil {
		m.digests[image] = map[string]bool{}
	}
	if res.ImageDigest != "" {
		m.digests[image][res.ImageDigest] = true
	}
	if t := res.Template; t != nil {
		if m.templates == nil {
			m.templates = map[string]map[uint64]bool{}
		}
		if m.templates[t.Name] == nil {
			m.templates[t.Name] = map[uint64]bool{}
		}
		m.templates[t.Name][t.Version] = true
	}
}

// Manifest returns the batch's manifest so far, without its workers (the
// caller asks the fleet).
func (r *Runner) Manifest(s *Summary) *Manifest {
	m := &Manifest{Batch: r.cfg.Name, Presets: map[string][]string{}, Workers: []ManifestWorker{}, Summary: s}
	r.t.manifest(func(rec *record) {
		for p, ds := range rec.digests {
			m.Presets[p] = slices.Sorted(maps.Keys(ds))
		}
		for name, vs := range rec.templates {
			if m.Templates == nil {
				m.Templates = map[string][]uint64{}
			}
			m.Templates[name] = slices.Sorted(maps.Keys(vs))
		}
		for _, l := range slices.Sorted(maps.Keys(rec.limits)) {
			m.Limits = append(m.Limits, ManifestLimits{Limits: json.RawMessage(l), Jobs: rec.limits[l]})
		}
	})
	return m
}
