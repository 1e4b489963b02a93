package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/batch"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// BatchEvent is one line of a batch's answer (application/x-ndjson). Each
// line has exactly one of: a result (with its line), a bad line (line and
// error), the summary (always the last line of a batch that ran to its
// end), or an error that ended the batch early (then the summary).
type BatchEvent struct {
	Line    int            `json:"line,omitempty"`
	Result  *jobs.Result   `json:"result,omitempty"`
	Reused  bool           `json:"reused,omitempty"`
	Error   *ErrorBody     `json:"error,omitempty"`
	Summary *batch.Summary `json:"summary,omitempty"`
}

// maxBadLinesShown bounds the bad lines found while validating that are
// kept to be listed (in a strict batch's 400, or at the start of the
// stream); the summary counts them all.
const maxBadLinesShown = 1000

// submitBatch: POST /v1/batches?name=&queue=&window=&strict=. The body is
// JSONL, one job a line, as `submit batch` reads; it runs through
// pkg/batch (stable IDs, reuse of stored results, a bounded window) and
// each result is streamed back as a line as it arrives.
func (g *Gateway) submitBatch(w http.ResponseWriter, r *http.Request, tok *Token) error {
	q := r.URL.Query()
	cfg := batch.Config{Name: q.Get("name"), Queue: q.Get("queue")}
	if cfg.Queue != "" && !jobs.ValidQueue(cfg.Queue) {
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "queue %q must match [A-Za-z0-9_-]{1,64}", cfg.Queue)
	}
	if v := q.Get("window"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > g.cfg.MaxBatchWindow {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "window %q: want 1 to %d", v, g.cfg.MaxBatchWindow)
		}
		cfg.Window = n
	}
	if v := q.Get("strict"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return apiErr(http.StatusBadRequest, CodeInvalidRequest, "strict %q: want true or false", v)
		}
		cfg.Strict = b
	}
	if cfg.Name != "" && batch.CleanName(cfg.Name) != cfg.Name {
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "name %q must match [A-Za-z0-9_-]{1,64}", cfg.Name)
	}
	// Spool the body first: pkg/batch reads its input twice (validate,
	// then publish), and a file keeps a large batch out of memory. A
	// client slow to send it holds an upload slot, not a batch's.
	f, h, err := g.spoolBatch(r, tok)
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	release, err := g.take(g.batches, tok)
	if err != nil {
		return err
	}
	defer release()
	if cfg.Name == "" {
		// The same body sent again is the same batch: it resumes, and
		// reuses every result already stored.
		cfg.Name = "batch-" + hex.EncodeToString(h.Sum(nil))[:16]
	}

	out := &lineWriter{w: w, rc: http.NewResponseController(w), timeout: g.cfg.WriteTimeout}
	var (
		mu      sync.Mutex
		started bool
		early   []BadLine // bad lines found before the answer started
		badSeen int
	)
	badLine := func(b batch.BadLine) BadLine {
		e := g.classify(b.Err)
		return BadLine{Line: b.Line, Error: ErrorBody{Code: e.Code, Message: e.Message}}
	}
	v := g.views.of(tok)
	cfg.Amend = func(j *jobs.Job) error { return g.admit(j, tok, v) }
	cfg.OnBadLine = func(b batch.BadLine) {
		mu.Lock()
		defer mu.Unlock()
		bl := badLine(b)
		if started {
			_ = out.write(BatchEvent{Line: bl.Line, Error: &bl.Error})
			return
		}
		if badSeen++; len(early) >= maxBadLinesShown {
			return
		}
		early = append(early, bl)
	}
	cfg.OnStart = func(int) error {
		mu.Lock()
		defer mu.Unlock()
		started = true
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Sandfleet-Batch", cfg.Name)
		w.WriteHeader(http.StatusOK)
		for _, bl := range early {
			_ = out.write(BatchEvent{Line: bl.Line, Error: &bl.Error})
		}
		return out.flush()
	}
	cfg.OnResult = func(o batch.Outcome) error {
		return out.write(BatchEvent{Line: o.Line, Result: o.Result, Reused: o.Reused})
	}
	runner, err := batch.New(v.Client(), cfg)
	if err != nil {
		return apiErr(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
	}
	sum, err := runner.Run(r.Context(), f)
	mu.Lock()
	defer mu.Unlock()
	if !started {
		if errors.Is(err, batch.ErrBadInput) {
			e := apiErr(http.StatusBadRequest, CodeInvalidBatch, "%d bad lines; nothing was queued (strict)", badSeen)
			e.BadLines = early
			return e
		}
		return err
	}
	if r.Context().Err() != nil {
		return r.Context().Err() // the client left; the jobs in flight go on
	}
	if err != nil {
		e := g.classify(err)
		_ = out.write(BatchEvent{Error: &ErrorBody{Code: e.Code, Message: e.Message}})
	}
	if err := out.write(BatchEvent{Summary: sum}); err != nil {
		return err
	}
	g.log.Info("batch done", "batch", cfg.Name, "done", sum.Done, "bad_lines", sum.Bad, "token", tokenName(tok))
	return nil
}

// lineWriter writes JSON lines to a streamed answer, each flushed at once
// and under a deadline of its own: a client that stops reading is cut off
// after timeout, and its batch stops feeding it.
type lineWriter struct {
	mu      sync.Mutex
	w       io.Writer
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (lw *lineWriter) write(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err != nil {
		return lw.err
	}
	_ = lw.rc.SetWriteDeadline(time.Now().Add(lw.timeout))
	if _, err := lw.w.Write(append(data, '\n')); err != nil {
		lw.err = err
		return err
	}
	lw.err = lw.rc.Flush()
	return lw.err
}

func (lw *lineWriter) flush() error {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.err == nil {
		_ = lw.rc.SetWriteDeadline(time.Now().Add(lw.timeout))
		lw.err = lw.rc.Flush()
	}
	return lw.err
}

// spoolBatch writes a batch's body to a temporary file, which it returns
// open at its start, with the body's digest. It holds an upload slot while
// the body arrives (4 × MaxBatches at once, 4 × MaxBatchesPerToken of a token): bodies are bounded in size and
// time (MaxBatchBytes, ReadTimeout), and so is what spools at once.
func (g *Gateway) spoolBatch(r *http.Request, tok *Token) (*os.File, hash.Hash, error) {
	release, err := g.take(g.uploads, tok)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	f, err := os.CreateTemp(g.cfg.TempDir, "sandfleet-batch-*.jsonl")
	if err != nil {
		return nil, nil, err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), r.Body)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, err
	}
	return f, h, nil
}
