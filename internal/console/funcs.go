package console

import (
	"fmt"
	"html/template"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// funcs are the templates' helpers. None returns template.HTML: every
// value reaches the page through html/template's escaping.
var funcs = template.FuncMap{
	"ago":      ago,
	"age":      age,
	"when":     when,
	"ms":       ms,
	"bytes":    humanBytes,
	"deref":    deref,
	"jobURL":   jobURL,
	"wsURL":    func(name string) string { return "/workspaces/" + url.PathEscape(name) },
	"batchURL": func(name string) string { return "/batches/" + url.PathEscape(name) },
	"labels":   sortedLabels,
	"pct":      func(n, d int) string { return pct(n, d) },
	"statusClass": func(s string) string {
		switch s {
		case string(jobs.StatusSucceeded):
			return "ok"
		case "queued", "running", "canceling":
			return "live"
		case string(jobs.StatusCanceled), string(jobs.StatusRejected):
			return "meh"
		}
		return "bad"
	},
}

func ago(t any) string {
	tt, ok := timeOf(t)
	if !ok {
		return "—"
	}
	d := time.Since(tt)
	if d < 0 {
		d = 0
	}
	return shortDur(d) + " ago"
}

func age(t any) string {
	tt, ok := timeOf(t)
	if !ok {
		return "—"
	}
	return shortDur(time.Since(tt))
}

func when(t any) string {
	tt, ok := timeOf(t)
	if !ok {
		return "—"
	}
	return tt.UTC().Format("2006-01-02 15:04:05.000Z")
}

func timeOf(t any) (time.Time, bool) {
	switch v := t.(type) {
	case time.Time:
		return v, !v.IsZero()
	case *time.Time:
		if v == nil || v.IsZero() {
			return time.Time{}, false
		}
		return *v, true
	}
	return time.Time{}, false
}

func shortDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func ms(p *int64) string {
	if p == nil {
		return "—"
	}
	return shortDur(time.Duration(*p) * time.Millisecond)
}

func humanBytes(n any) string {
	var v float64
	switch x := n.(type) {
	case int:
		v = float64(x)
	case int64:
		v = float64(x)
	case uint64:
		v = float64(x)
	case *int64:
		if x == nil {
			return "—"
		}
		v = float64(*x)
	default:
		return "—"
	}
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if v < 1024 || u == "GiB" {
			if u == "B" {
				return fmt.Sprintf("%.0f B", v)
			}
			return fmt.Sprintf("%.1f %s", v, u)
		}
		v /= 1024
	}
	return ""
}

func deref(p *int) string {
	if p == nil {
		return "—"
	}
	return fmt.Sprint(*p)
}

func jobURL(id string) string { return "/jobs/" + url.PathEscape(id) }

func pct(n, d int) string {
	if d == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
}

type label struct{ Key, Value string }

// sortedLabels are a job's labels to show, without the batch's (shown as
// a link of its own).
func sortedLabels(m map[string]string) []label {
	var out []label
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k == jobs.BatchLabel {
			continue
		}
		out = append(out, label{k, m[k]})
	}
	return out
}

// artifactURL is the gateway's download route of a job's artifact, each
// part of its name escaped.
func artifactURL(id, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/v1/jobs/" + url.PathEscape(id) + "/artifacts/" + strings.Join(parts, "/")
}
