package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// The tools of sessions: a sandbox a model keeps across calls. They are
// offered when Options.Sessions is set, and served by a Runner that is
// also a SessionRunner.

// SessionRunner is a Runner that also reaches the fleet's sessions, as
// its caller.
type SessionRunner interface {
	Sessions() *sessions.Client
}

// Tool names of sessions.
const (
	ToolCreateSession = "create_session"
	ToolExec          = "exec"
	ToolReadFile      = "read_file"
	ToolWriteFile     = "write_file"
	ToolListFiles     = "list_files"
	ToolCloseSession  = "close_session"
)

// SessionArgs name a session.
type SessionArgs struct {
	Session string `json:"session"`
}

// CreateSessionArgs are create_session's.
type CreateSessionArgs struct {
	Image       string  `json:"image,omitempty"`
	IdleTimeout float64 `json:"idle_timeout,omitempty"` // seconds
}

// ExecArgs are exec's.
type ExecArgs struct {
	Session string  `json:"session"`
	Command string  `json:"command"`
	Timeout float64 `json:"timeout,omitempty"`
}

// FileArgs are read_file's, write_file's and list_files'.
type FileArgs struct {
	Session string `json:"session"`
	Path    string `json:"path"`
	Content string `json:"content,omitempty"`
}

func strict(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Required: required, Properties: props,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
}

var sessionProp = &jsonschema.Schema{Type: "string", Description: "The session's id, as create_session returned it."}

func (o *Options) sessionDefs() []Def {
	l := o.Limits
	maxT := o.MaxTimeout.Seconds()
	minT := 0.0
	timeout := &jsonschema.Schema{Type: "number", ExclusiveMinimum: &minT, Maximum: &maxT,
		Description: fmt.Sprintf("Wall-clock limit in seconds (default %g, at most %g).", l.Timeout.D().Seconds(), maxT)}
	return []Def{
		{Name: ToolCreateSession, Description: fmt.Sprintf("Start a session: a sandbox kept across calls, where files, processes and the Python context of run_code (with its session argument) stay from one call to the next. "+
			"It ends when closed (close_session), after idle_timeout seconds without a call (default 300) or an hour after its start. "+
			"Limits: %s of memory, %g CPU, no network. Returns the session's id.", human(l.Memory), l.CPUs),
			InputSchema: strict(map[string]*jsonschema.Schema{
				"image":        {Type: "string", Description: "The preset the sandbox is made from (default python, which also has a shell)."},
				"idle_timeout": {Type: "number", ExclusiveMinimum: &minT, Description: "Seconds without a call after which the session ends (default 300)."},
			})},
		{Name: ToolExec, Description: fmt.Sprintf("Run a shell command (/bin/sh -c) in a session's working directory, /workspace, and return its exit code, stdout and stderr (the result holds at most %d bytes of them). "+
			"A command may start a server in the background (command &) that later calls reach on 127.0.0.1.", o.MaxOutput),
			OutputSchema: outputSchema,
			InputSchema: strict(map[string]*jsonschema.Schema{"session": sessionProp,
				"command": {Type: "string", Description: "The shell command."}, "timeout": timeout}, "session", "command")},
		{Name: ToolReadFile, Description: fmt.Sprintf("Read a text file of a session (a path relative to /workspace, or under /tmp); at most %d bytes are returned.", o.MaxOutput),
			InputSchema: strict(map[string]*jsonschema.Schema{"session": sessionProp,
				"path": {Type: "string", Description: "The file's path."}}, "session", "path")},
		{Name: ToolWriteFile, Description: "Write a text file in a session (made with its directories; replaced if it exists).",
			InputSchema: strict(map[string]*jsonschema.Schema{"session": sessionProp,
				"path":    {Type: "string", Description: "The file's path, relative to /workspace or under /tmp."},
				"content": {Type: "string", Description: "The file's whole content."}}, "session", "path", "content")},
		{Name: ToolListFiles, Description: "List a directory of a session: names, types and sizes.",
			InputSchema: strict(map[string]*jsonschema.Schema{"session": sessionProp,
				"path": {Type: "string", Description: "The directory (default the working directory)."}}, "session")},
		{Name: ToolCloseSession, Description: "End a session: its processes end and its files are gone.",
			InputSchema: strict(map[string]*jsonschema.Schema{"session": sessionProp}, "session")},
		exposePortDef(),
	}
}

// sessionsOf is the caller's sessions client, or a tool result saying
// there is none.
func (s *Server) sessionsOf(req *sdk.CallToolRequest) (*sessions.Client, *sdk.CallToolResult, error) {
	r, err := s.runner(callerOf(req.Extra))
	if err != nil {
		return nil, nil, err
	}
	sr, ok := r.(SessionRunner)
	if !ok || sr.Sessions() == nil {
		return nil, s.failure("this server serves no sessions"), nil
	}
	return sr.Sessions(), nil, nil
}

// sessionNotRun is sessionFailure for a tool with an outputSchema.
func (s *Server) sessionNotRun(err error) *sdk.CallToolResult {
	res := s.sessionFailure(err)
	return withOutput(res, &Output{Status: "not_run", Message: clip(res.Content[0].(*sdk.TextContent).Text, s.opts.MaxOutput/4)})
}

// sessionFailure is a session call's error as a model reads it.
func (s *Server) sessionFailure(err error) *sdk.CallToolResult {
	if e := sessionapi.AsError(err); e != nil {
		return s.failure(e.Code + ": " + e.Message)
	}
	return s.failure("the session call failed: " + err.Error())
}

// textResult is a result of text within MaxOutput: a longer one keeps its
// start and end and says how much it left out.
func (s *Server) textResult(isErr bool, text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: isErr, Content: []sdk.Content{&sdk.TextContent{Text: cut(text, s.opts.MaxOutput)}}}
}

func seconds(f float64) limits.Duration {
	return limits.Duration(time.Duration(f * float64(time.Second)))
}

func (s *Server) createSession(ctx context.Context, req *sdk.CallToolRequest, in CreateSessionArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	info, err := c.Create(ctx, sessions.Spec{Image: in.Image, IdleTimeout: seconds(in.IdleTimeout), Labels: map[string]string{"tool": ToolCreateSession}})
	if err != nil {
		return s.sessionFailure(err), nil
	}
	return s.textResult(false, fmt.Sprintf("session: %s\nimage: %s\nidle timeout: %s\nends at the latest: %s",
		info.ID, info.Image, info.IdleTimeout.D(), info.ExpiresAt.Format(time.RFC3339))), nil
}

func (s *Server) exec(ctx context.Context, req *sdk.CallToolRequest, in ExecArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	stop := s.progress(ctx, req, s.callTimeout(in.Timeout))
	r, err := c.Exec(ctx, in.Session, "", sessionapi.ExecRequest{Shell: in.Command, Timeout: seconds(in.Timeout)})
	stop()
	if err != nil {
		return s.sessionNotRun(err), nil
	}
	res := s.execResult(r)
	res.StructuredContent.(*Output).Session = in.Session
	return res, nil
}

// callTimeout is how long a session's call may run: its timeout, or the
// default; what a progress notification gives as its total.
func (s *Server) callTimeout(timeout float64) time.Duration {
	if timeout > 0 {
		return seconds(timeout).D()
	}
	return s.opts.Limits.Timeout.D()
}

// execResult is exec's result: the exit, then both streams within
// MaxOutput.
func (s *Server) execResult(r *sessionapi.ExecResult) *sdk.CallToolResult {
	var head strings.Builder
	o := &Output{Status: "ok", ExitCode: r.ExitCode, DurationMS: &r.DurationMS}
	switch {
	case r.TimedOut:
		fmt.Fprintf(&head, "timed out after %d ms (killed)", r.DurationMS)
		o.Status = "timeout"
	case r.ExitCode != nil:
		fmt.Fprintf(&head, "exit code: %d", *r.ExitCode)
	}
	failed := r.TimedOut || r.ExitCode == nil || *r.ExitCode != 0
	if failed && !r.TimedOut {
		o.Status = "error"
	}
	out, so, se := s.twoStreams(head.String(), decode(r.Stdout, r.StdoutEncoding), decode(r.Stderr, r.StderrEncoding), r.StdoutTruncated || r.StderrTruncated)
	o.Stdout, o.Stderr = so, se
	return withOutput(s.textResult(failed, out), o)
}

// cellLanguages are the context languages of run_code's languages: a
// preset's name says which interpreter runs the cell.
var cellLanguages = map[string]string{"": "python", "python": "python", "python-data": "python",
	"node": "javascript", "typescript": "typescript", "shell": "bash"}

// runCell runs run_code's code as a cell of the session's context of
// its language (python when none is named).
func (s *Server) runCell(ctx context.Context, req *sdk.CallToolRequest, in RunCodeArgs) (*sdk.CallToolResult, error) {
	lang, ok := cellLanguages[in.Language]
	if !ok {
		return s.notRun("a session's run_code runs cells of python, node (JavaScript), typescript or shell (bash); use exec for a command"), nil
	}
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	stop := s.progress(ctx, req, s.callTimeout(in.Timeout))
	r, err := c.RunCode(ctx, in.Session, "", sessionapi.CodeRequest{Code: in.Code, Language: lang, Timeout: seconds(in.Timeout)})
	stop()
	if err != nil {
		return s.sessionNotRun(err), nil
	}
	res := s.cellResult(r)
	res.StructuredContent.(*Output).Session = in.Session
	return res, nil
}

// cellResult is a cell's result: what it raised and the value of its
// trailing expression, each cut to a quarter of MaxOutput (a value's repr
// may be any size), its streams within the rest, then its figures as
// images within MaxImageBytes.
func (s *Server) cellResult(r *sessions.CodeResult) *sdk.CallToolResult {
	var head strings.Builder
	o := &Output{Status: "ok", DurationMS: &r.DurationMS}
	if r.Reset {
		head.WriteString("(a fresh Python context: nothing of earlier cells is defined)\n")
	}
	quarter := s.opts.MaxOutput / 4
	if r.Error != nil {
		o.Status = "error"
		o.Error = &OutputError{Name: clip(r.Error.Name, 200), Value: cut(strings.ToValidUTF8(r.Error.Value, "\uFFFD"), quarter)}
		fmt.Fprintf(&head, "error: %s\n", cut(o.Error.Name+": "+strings.ToValidUTF8(r.Error.Value, "\uFFFD"), quarter))
	}
	if r.TimedOut {
		o.Status = "timeout"
		head.WriteString("interrupted at its timeout; the context is kept\n")
	}
	if r.Text != "" {
		o.Value = cut(strings.ToValidUTF8(r.Text, "\uFFFD"), quarter)
		fmt.Fprintf(&head, "value: %s\n", o.Value)
	}
	errText := ""
	if r.Error != nil {
		errText = r.Error.Traceback
	}
	budget := s.opts.MaxImageBytes
	imgs, note := displays(r.Display, r.DisplayDropped, &budget)
	if note != "" {
		head.WriteString(clip(note, quarter))
	}
	out, so, se := s.twoStreams(strings.TrimSuffix(head.String(), "\n"), decode(r.Stdout, r.StdoutEncoding),
		decode(r.Stderr, r.StderrEncoding)+errText, false)
	o.Stdout, o.Stderr = so, se
	if o.Error != nil {
		o.Error.Traceback = cut(strings.ToValidUTF8(errText, "\uFFFD"), quarter)
	}
	res := s.textResult(r.Error != nil, out)
	res.Content = append(res.Content, imgs...)
	o.Figures = figures(imgs, 1)
	return withOutput(res, o)
}

// twoStreams writes a head and two streams within MaxOutput, cutting each
// stream in the middle when they are too long together.
// It also returns each stream as cut.
func (s *Server) twoStreams(head, stdout, stderr string, cutBySandbox bool) (text, so, se string) {
	// What is written around the streams: the sandbox's note and the two
	// labels.
	const around = 128
	room := max(s.opts.MaxOutput-len(head)-around, 256)
	so, se = stdout, stderr
	if len(so)+len(se) > room {
		share := room / 2
		if len(so) < share {
			se = cut(se, room-len(so))
		} else if len(se) < share {
			so = cut(so, room-len(se))
		} else {
			so, se = cut(so, share), cut(se, share)
		}
	}
	var b strings.Builder
	b.WriteString(head)
	if cutBySandbox {
		b.WriteString("\n(the sandbox kept only the start of the output)")
	}
	if so != "" {
		b.WriteString("\nstdout:\n" + so)
	}
	if se != "" {
		b.WriteString("\nstderr:\n" + se)
	}
	return b.String(), so, se
}

func decode(text, encoding string) string {
	if encoding != "" {
		return "(binary output, base64) " + text
	}
	return text
}

func (s *Server) readFile(ctx context.Context, req *sdk.CallToolRequest, in FileArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	var buf bytes.Buffer
	w := &capWriter{w: &buf, n: s.opts.MaxOutput}
	n, err := c.ReadFile(ctx, in.Session, in.Path, w)
	if err != nil && !errors.Is(err, errLimit) {
		return s.sessionFailure(err), nil
	}
	text := strings.ToValidUTF8(buf.String(), "\uFFFD")
	if errors.Is(err, errLimit) || n > int64(s.opts.MaxOutput) {
		text += fmt.Sprintf("\n(only the first %d bytes are shown)", s.opts.MaxOutput)
	}
	return s.textResult(false, text), nil
}

func (s *Server) writeFile(ctx context.Context, req *sdk.CallToolRequest, in FileArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	e, err := c.WriteFile(ctx, in.Session, "", in.Path, 0, strings.NewReader(in.Content))
	if err != nil {
		return s.sessionFailure(err), nil
	}
	return s.textResult(false, fmt.Sprintf("wrote %s (%d bytes)", e.Path, e.Size)), nil
}

func (s *Server) listFiles(ctx context.Context, req *sdk.CallToolRequest, in FileArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	dir := in.Path
	if dir == "" {
		dir = "."
	}
	r, err := c.File(ctx, in.Session, sessionapi.OpList, sessionapi.FileRequest{Path: dir})
	if err != nil {
		return s.sessionFailure(err), nil
	}
	var b strings.Builder
	for _, e := range r.Entries {
		fmt.Fprintf(&b, "%s\t%s\t%d\n", e.Type, e.Name, e.Size)
	}
	if len(r.Entries) == 0 {
		b.WriteString("(empty)")
	}
	return s.textResult(false, b.String()), nil
}

func (s *Server) closeSession(ctx context.Context, req *sdk.CallToolRequest, in SessionArgs) (*sdk.CallToolResult, error) {
	c, fail, err := s.sessionsOf(req)
	if c == nil {
		return fail, err
	}
	if _, err := c.Delete(ctx, in.Session); err != nil && !errors.Is(err, sessionapi.ErrGone) {
		return s.sessionFailure(err), nil
	}
	return s.textResult(false, "closed"), nil
}

// errLimit: a read stopped at the bound of what a result shows.
var errLimit = errors.New("the rest is not shown")

// capWriter keeps the first n bytes, then fails with errLimit.
type capWriter struct {
	w *bytes.Buffer
	n int
}

func (c *capWriter) Write(p []byte) (int, error) {
	if len(p) > c.n {
		c.w.Write(p[:c.n])
		c.n = 0
		return 0, errLimit
	}
	c.n -= len(p)
	return c.w.Write(p)
}
