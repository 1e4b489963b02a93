package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// batchSize is the jobs of one batch.
const batchSize = 5

// batchLoop sends a batch every batchEvery, one at a time.
func (l *load) batchLoop(ctx context.Context) {
	tick := time.NewTicker(l.o.batchEvery)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := l.batch(context.WithoutCancel(ctx), n); err != nil {
			l.fail("batch %d: %v", n, err)
		}
	}
}

// batchLine is one line of POST /v1/batches' answer.
type batchLine struct {
	Line    int             `json:"line"`
	Result  *jobs.Result    `json:"result"`
	Error   string          `json:"error"`
	Summary json.RawMessage `json:"summary"`
}

// batch sends batchSize quick jobs as a batch over the HTTP API and reads
// its answer to the summary: one result per line, then the summary. The
// jobs are booked like the others, to be read back at the end.
func (l *load) batch(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	k := kindNamed("batch")
	var body strings.Builder
	for i := range batchSize {
		line, _ := json.Marshal(map[string]any{"image": "python", "code": fmt.Sprintf("%s  # %d", k.code, i)})
		body.Write(append(line, '\n'))
	}
	name := fmt.Sprintf("soak-%d-batch-%d", l.w.cmd.Process.Pid, n)
	req, err := http.NewRequestWithContext(ctx, "POST", l.w.httpBase+"/v1/batches?name="+name, strings.NewReader(body.String()))
	if err != nil {
		return err
	}
	sent := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /v1/batches: %s", res.Status)
	}
	results, summary := 0, false
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		var bl batchLine
		if err := json.Unmarshal(sc.Bytes(), &bl); err != nil {
			return fmt.Errorf("a line of the answer: %v", err)
		}
		switch {
		case bl.Error != "":
			return fmt.Errorf("line %d: %s", bl.Line, bl.Error)
		case bl.Result != nil:
			results++
			l.sentOne(bl.Result.ID, k, sent)
		case bl.Summary != nil:
			summary = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if results != batchSize || !summary {
		return fmt.Errorf("%d results and summary %v, want %d and a summary", results, summary, batchSize)
	}
	return nil
}
