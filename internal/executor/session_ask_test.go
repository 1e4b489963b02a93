package executor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// ask is a session operation's request as these tests write it: Op and
// the fields of the sessionapi request it names (ExecRequest,
// CodeRequest, ProcessRequest, SignalRequest, StdinRequest, FileRequest),
// by their JSON names, which the agent reads.
type ask struct {
	Op string `json:"-"`

	Cmd        []string          `json:"cmd,omitempty"`
	Shell      string            `json:"shell,omitempty"`
	Cwd        string            `json:"cwd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Stdin      string            `json:"stdin,omitempty"`
	Timeout    limits.Duration   `json:"timeout,omitempty"`
	Background bool              `json:"background,omitempty"`
	Exclusive  bool              `json:"exclusive,omitempty"`

	Code     string `json:"code,omitempty"`
	Context  string `json:"context,omitempty"`
	Language string `json:"language,omitempty"`
	Name     string `json:"name,omitempty"` // a ContextRequest's

	PID    int             `json:"pid,omitempty"`
	Since  int64           `json:"since,omitempty"`
	Wait   limits.Duration `json:"wait,omitempty"`
	Signal int             `json:"signal,omitempty"`
	EOF    bool            `json:"eof,omitempty"`

	Path      string `json:"path,omitempty"`
	To        string `json:"to,omitempty"`
	Data      []byte `json:"data,omitempty"`
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	Append    bool   `json:"append,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
}

// answer is a session operation's reply as these tests read it: the
// agent's Error, or the fields of the sessionapi result its op names, by
// their JSON names.
type answer struct {
	ID    uint64            `json:"-"`
	Error *sessionapi.Error `json:"-"`

	Exit            *int   `json:"exit_code"`
	Signal          int    `json:"signal"`
	TimedOut        bool   `json:"timed_out"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutEncoding  string `json:"stdout_encoding"` // "base64": Stdout is decoded in call
	StderrEncoding  string `json:"stderr_encoding"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	DurationMS      int64  `json:"duration_ms"`
	Exclusive       bool   `json:"exclusive"`
	Ended           int    `json:"ended"`
	PID             int    `json:"pid"`

	Processes []sessionapi.Process `json:"-"`
	Contexts  []sessionapi.Context `json:"-"` // a listing's, or the one OpContext started
	Running   bool                 `json:"running"`
	Output    string               `json:"output"`
	Next      int64                `json:"next"`
	Dropped   int64                `json:"dropped"`

	Language       string                `json:"language"`
	Text           string                `json:"text"`
	CodeError      *sessionapi.CodeError `json:"error"`
	Reset          bool                  `json:"reset"`
	Display        []sessionapi.Display  `json:"display"`
	DisplayDropped int                   `json:"display_dropped"`

	Data    []byte             `json:"data"`
	EOF     bool               `json:"eof"`
	Entry   *sessionapi.Entry  `json:"entry"`
	Entries []sessionapi.Entry `json:"entries"`
}

// ms is n milliseconds, as a request's timeout.
func ms(n int64) limits.Duration { return limits.Duration(time.Duration(n) * time.Millisecond) }

// call asks s's agent a; an error is the call's, not the agent's (which
// the answer carries).
func call(ctx context.Context, s *Session, a ask) (*answer, error) {
	body, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	rep, err := s.Do(ctx, &envelope.Request{Op: a.Op, Body: body})
	if err != nil {
		return nil, err
	}
	r := &answer{ID: rep.ID, Error: rep.Error}
	switch {
	case rep.Error != nil || len(rep.Result) == 0:
	case a.Op == sessionapi.OpContexts:
		err = json.Unmarshal(rep.Result, &r.Contexts)
	case a.Op == sessionapi.OpContext:
		r.Contexts = make([]sessionapi.Context, 1)
		err = json.Unmarshal(rep.Result, &r.Contexts[0])
	case rep.Result[0] == '[':
		err = json.Unmarshal(rep.Result, &r.Processes)
	default:
		if err = json.Unmarshal(rep.Result, r); err == nil {
			err = r.decodeStreams()
		}
	}
	return r, err
}

// decodeStreams turns a stream the agent sent as base64 (it was not
// UTF-8) back into its bytes.
func (r *answer) decodeStreams() error {
	for _, f := range []struct{ s, enc *string }{{&r.Stdout, &r.StdoutEncoding}, {&r.Stderr, &r.StderrEncoding}} {
		if *f.enc != "base64" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(*f.s)
		if err != nil {
			return err
		}
		*f.s, *f.enc = string(b), ""
	}
	return nil
}

func do(t *testing.T, s *Session, a ask) *answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := call(ctx, s, a)
	if err != nil {
		t.Fatalf("%s: %v", a.Op, err)
	}
	return r
}

func okReply(t *testing.T, r *answer) *answer {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("reply %d: %v", r.ID, r.Error)
	}
	return r
}

// doRaw asks s's agent one of the executor's own operations.
func doRaw(t *testing.T, s *Session, req envelope.Request) *envelope.Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := s.Do(ctx, &req)
	if err != nil {
		t.Fatalf("%s: %v", req.Op, err)
	}
	return r
}

func okRaw(t *testing.T, r *envelope.Reply) *envelope.Reply {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("reply %d: %v", r.ID, r.Error)
	}
	return r
}
