package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// runCode runs one job. Whatever the program or the fleet did is a result;
// only a caller the transport could not place is an error.
func (s *Server) runCode(ctx context.Context, req *sdk.CallToolRequest, in RunCodeArgs) (*sdk.CallToolResult, error) {
	if in.Session != "" {
		return s.runCell(ctx, req, in)
	}
	if in.Language == "" {
		return s.notRun("language is required: it names how the code runs (a session's run_code may leave it out)"), nil
	}
	if in.Language == "typescript" {
		return s.notRun("typescript runs as a session's cell only (give session); a fresh sandbox runs JavaScript as node"), nil
	}
	job := &jobs.Job{Image: in.Language, Code: in.Code, Files: in.Files, Stdin: in.Stdin, Outputs: in.Outputs}
	if in.Timeout > 0 {
		job.Limits.Timeout = limits.Duration(time.Duration(in.Timeout * float64(time.Second)))
	}
	job.Labels = map[string]string{"tool": ToolRunCode}
	r, err := s.runner(callerOf(req.Extra))
	if err != nil {
		return nil, err
	}
	wait := max(job.Limits.Timeout.D(), s.opts.Limits.Timeout.D()) + s.opts.Wait
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stop := s.progress(wctx, req, wait)
	res, err := r.Run(wctx, job)
	stop()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil, ctx.Err() // the client canceled the call, or left
	case wctx.Err() != nil:
		return s.notRun(fmt.Sprintf("no result within %s: the fleet is busy; the job was canceled, try again later", wait.Round(time.Second))), nil
	default:
		s.opts.Logger.Info("run_code failed", "job_id", job.ID, "err", err)
		return s.notRun(callError(err)), nil
	}
	s.opts.Logger.Info("run_code", "job_id", res.ID, "status", res.Status)
	return s.render(ctx, r, res), nil
}

// callError is what a model is told of a job the fleet did not take.
func callError(err error) string {
	switch {
	case errors.Is(err, jobs.ErrQueueFull):
		return "the fleet's queue is full; try again later"
	case errors.Is(err, jobs.ErrInvalidJob):
		return "the job is invalid: " + err.Error()
	}
	return "the fleet could not run the job: " + err.Error()
}

func (s *Server) failure(msg string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: clip(msg, s.opts.MaxOutput)}}}
}

// notRun is a failure of a tool with an outputSchema: code that did not
// run, said in its text and its structuredContent.
func (s *Server) notRun(msg string) *sdk.CallToolResult {
	return withOutput(s.failure(msg), &Output{Status: "not_run", Message: clip(msg, s.opts.MaxOutput/4)})
}

// isError reports the statuses a model must read as the program's
// failure.
func isError(st jobs.Status) bool { return st != jobs.StatusSucceeded }

// maxListed bounds the artifacts named in a result's text.
const maxListed = 20

// render makes the tool result of a job: a text block within MaxOutput,
// then images within MaxImageBytes, then links to the other artifacts.
func (s *Server) render(ctx context.Context, r Runner, res *jobs.Result) *sdk.CallToolResult {
	var head strings.Builder
	fmt.Fprintf(&head, "status: %s", res.Status)
	if res.Exit != nil {
		fmt.Fprintf(&head, " (exit code %d)", *res.Exit)
	}
	if res.DurationMS != nil {
		fmt.Fprintf(&head, " in %s", (time.Duration(*res.DurationMS) * time.Millisecond).Round(time.Millisecond))
	}
	fmt.Fprintf(&head, ", job %s\n", res.ID)
	if res.Error != "" {
		fmt.Fprintf(&head, "error: %s\n", clip(res.Error, 1000))
	}
	if m := statusNote(res.Status); m != "" {
		head.WriteString(m + "\n")
	}

	out := &sdk.CallToolResult{IsError: isError(res.Status)}
	o := &Output{Status: string(res.Status), ExitCode: res.Exit, Job: res.ID, DurationMS: res.DurationMS, Message: clip(res.Error, 1000)}
	var foot strings.Builder
	budget := s.opts.MaxImageBytes
	imgs, note := displays(res.Display, res.DisplayDropped, &budget)
	out.Content = append(out.Content, imgs...)
	o.Figures = figures(imgs, 1)
	foot.WriteString(note)
	var listed int
	for _, a := range res.Artifacts {
		if ctx.Err() != nil {
			break
		}
		at := len(out.Content) + 1 // the text comes first
		o.Files = append(o.Files, File{Name: a.Name, Size: a.Size, URI: ArtifactURI(res.ID, a.Name), Content: &at})
		if img := s.image(ctx, r, res, a, &budget); img != nil {
			out.Content = append(out.Content, img)
			listed++
			if listed <= maxListed {
				fmt.Fprintf(&foot, "artifact %s (%d bytes): image below\n", a.Name, a.Size)
			}
			continue
		}
		size := a.Size
		out.Content = append(out.Content, &sdk.ResourceLink{
			URI: ArtifactURI(res.ID, a.Name), Name: a.Name, Size: &size, MIMEType: mimeOf(a.Name),
			Description: fmt.Sprintf("a file job %s returned: resources/read gives it (up to the server's bound), GET /v1/jobs/%s/artifacts/%s on the gateway or submit artifacts %s any size", res.ID, res.ID, a.Name, res.ID),
		})
		listed++
		if listed <= maxListed {
			fmt.Fprintf(&foot, "artifact %s (%d bytes): linked\n", a.Name, a.Size)
		}
	}
	if listed > maxListed {
		fmt.Fprintf(&foot, "and %d more artifacts\n", listed-maxListed)
	}
	for i, sk := range res.ArtifactsSkipped {
		if i == maxListed {
			fmt.Fprintf(&foot, "and %d more files not returned\n", len(res.ArtifactsSkipped)-maxListed)
			break
		}
		fmt.Fprintf(&foot, "not returned: %s (%d bytes): %s\n", sk.Name, sk.Size, sk.Reason)
	}
	if res.ArtifactsError != "" {
		fmt.Fprintf(&foot, "artifacts: %s\n", clip(res.ArtifactsError, 500))
	}

	h, f := clip(head.String(), s.opts.MaxOutput/4), clip(foot.String(), s.opts.MaxOutput/4)
	body, stdout, stderr := s.streams(res, s.opts.MaxOutput-len(h)-len(f))
	o.Stdout, o.Stderr = stdout, stderr
	out.Content = append([]sdk.Content{&sdk.TextContent{Text: h + body + f}}, out.Content...)
	return withOutput(out, o)
}

// figures are the references of imgs, the first at content[first].
func figures(imgs []sdk.Content, first int) []Figure {
	var fs []Figure
	for i, c := range imgs {
		if img, ok := c.(*sdk.ImageContent); ok {
			fs = append(fs, Figure{MIMEType: img.MIMEType, Bytes: len(img.Data), Content: first + i})
		}
	}
	return fs
}

func statusNote(st jobs.Status) string {
	switch st {
	case jobs.StatusTimeout:
		return "the program ran past its timeout and was killed"
	case jobs.StatusOOM:
		return "the program ran out of memory and was killed"
	case jobs.StatusOutputLimit:
		return "the program wrote more output than the sandbox keeps and was killed"
	case jobs.StatusCompileErr:
		return "the code did not compile; stderr has the compiler's messages"
	}
	return ""
}

// streams renders stdout and stderr in at most n bytes: when both do not
// fit, the shorter keeps up to half and the longer the rest, each cut in
// the middle (the start says what ran, the end how it ended). It also
// returns each stream as cut.
func (s *Server) streams(res *jobs.Result, n int) (all, stdout, stderr string) {
	type stream struct {
		name      string
		data      string
		sandboxed bool // the sandbox cut it already
	}
	ss := []stream{
		{"stdout", text(res.StdoutBytes()), res.StdoutTruncated},
		{"stderr", text(res.StderrBytes()), res.StderrTruncated},
	}
	var b strings.Builder
	var labels [2]string
	over := 0
	for i, st := range ss {
		switch {
		case st.data == "":
			labels[i] = "--- " + st.name + ": empty ---\n"
		default:
			labels[i] = fmt.Sprintf("--- %s (%d bytes) ---\n", st.name, len(st.data))
		}
		if st.sandboxed {
			labels[i] = strings.TrimSuffix(labels[i], " ---\n") + ": the sandbox kept only the start ---\n"
		}
		over += len(labels[i])
	}
	room := max(0, n-over-2) // the newlines that end a stream without one
	a, c := len(ss[0].data), len(ss[1].data)
	if a+c > room {
		half := room / 2
		switch {
		case a <= half:
			c = room - a
		case c <= half:
			a = room - c
		default:
			a, c = half, room-half
		}
	}
	var bodies [2]string
	for i, st := range ss {
		b.WriteString(labels[i])
		if st.data == "" {
			continue
		}
		body := cut(st.data, []int{a, c}[i])
		bodies[i] = body
		b.WriteString(body)
		if !strings.HasSuffix(body, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String(), bodies[0], bodies[1]
}

// text is a stream as text a model can read.
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// cut returns s in at most n bytes: whole, or its start and end around a
// note of how much is left out.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	note := func(k int) string {
		return fmt.Sprintf("\n[... %d bytes left out: the output is over the result's bound ...]\n", k)
	}
	room := n - len(note(len(s)))
	if room <= 0 {
		return clip(note(len(s)), n)
	}
	head := runeStart(s, room/2)
	tail := len(s) - (room - head)
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + note(tail-head) + s[tail:]
}

// runeStart is the largest i <= n where s[:i] ends on a whole rune.
func runeStart(s string, n int) int {
	if n >= len(s) {
		return len(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// clip cuts s to n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:runeStart(s, n)]
}

// imageTypes are the image formats sent as image content.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// image returns a as image content when it is an image that fits what is
// left of budget, nil otherwise (it is then linked).
func (s *Server) image(ctx context.Context, r Runner, res *jobs.Result, a jobs.Artifact, budget *int64) *sdk.ImageContent {
	if !imageTypes[mimeOf(a.Name)] || a.Size > *budget || a.Size <= 0 {
		return nil
	}
	var buf bytes.Buffer
	lw := &limitWriter{w: &buf, n: a.Size}
	if err := r.WriteArtifact(ctx, res, a, lw); err != nil || int64(buf.Len()) != a.Size {
		s.opts.Logger.Info("artifact not read for an image", "job_id", res.ID, "artifact", a.Name, "err", err)
		return nil
	}
	// The name is the job's choice; the bytes must agree with it.
	mt := http.DetectContentType(buf.Bytes())
	if !imageTypes[mt] {
		return nil
	}
	*budget -= a.Size
	return &sdk.ImageContent{Data: buf.Bytes(), MIMEType: mt}
}

// limitWriter fails past n bytes: an artifact larger than it said.
type limitWriter struct {
	w io.Writer
	n int64
}

var errTooLarge = errors.New("artifact larger than listed")

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errTooLarge
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

func mimeOf(name string) string {
	t := mime.TypeByExtension(strings.ToLower(path.Ext(name)))
	if t == "" {
		return "application/octet-stream"
	}
	mt, _, _ := mime.ParseMediaType(t)
	return mt
}
