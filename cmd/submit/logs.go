package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// logsCommand is "submit logs": a job's output and events, replayed from
// its start, and followed to its end with -f.
type logsCommand struct {
	m      *Main
	out    output
	follow bool
}

func (c *logsCommand) synopsis() string { return "logs ID [-f] [--json]" }

func (c *logsCommand) about() string {
	return `Replays the output of job ID from its start, as "submit run" prints it (stdout
to stdout, stderr to stderr), and with -f follows it until the job ends; a
job started by anyone, from any terminal or machine. Once the job has ended
it exits as the job (its exit code, 124 timeout, ...; see "submit run").
Without -f, exits 75 when the job is still queued or running. A job's
events are kept 1h; its result, and so its whole output, 24h.

A line on stderr says when the job was redelivered (its worker was lost:
the output starts again from the start) and when the stream lost output
that the result has. Ctrl-C stops watching (exit 130); the job goes on.
--json prints the events as JSON Lines instead, the last one "finished"
with the result.
`
}

func (c *logsCommand) define(fs *pflag.FlagSet) {
	fs.BoolVarP(&c.follow, "follow", "f", false, "follow the job until it ends")
	c.out = output{m: c.m}
	c.out.define(fs, "print the events as JSON Lines on stdout", true)
}

func (c *logsCommand) run(ctx context.Context, fs *pflag.FlagSet) error {
	if fs.NArg() != 1 {
		return usageError("logs", "logs takes one job ID, got %q", fs.Args())
	}
	id := fs.Arg(0)
	client, closeConn, err := c.m.connect(ctx)
	if err != nil {
		return err
	}
	defer closeConn()
	err = c.out.watch(ctx, client, id, c.follow)
	switch {
	case errors.Is(err, errNoResultYet) && client.Tenant() != "":
		return fail(exitPending, "job %s has no result yet: queued or running, or no such job (a tenant cannot read the queue; submit logs -f %s)", id, id)
	case errors.Is(err, errNoResultYet):
		return fail(exitPending, "job %s is queued or running; no result yet (submit logs -f %s)", id, id)
	}
	return err
}

// fallBack ends watch on the result alone: when it is stored (follow),
// or as it is now.
func (o *output) fallBack(ctx context.Context, client *jobs.Client, id string, p *printer, follow bool) error {
	var res *jobs.Result
	var err error
	if follow {
		res, err = client.Wait(ctx, id)
	} else if res, err = client.Get(ctx, id); errors.Is(err, jobs.ErrNotFound) {
		return errNoResultYet
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return fail(exitInterrupted, "detached; job %s goes on: submit wait %s", id, id)
	case err != nil:
		return fail(exitUnavailable, "wait for %s: %w", id, err)
	case o.json:
		o.printJSON(&jobs.Event{Type: jobs.EventFinished, ID: id, Attempt: res.Attempt, Result: res})
	}
	return o.end(p, res)
}

// end ends a watch with its result: what the printer still owes, then
// o.then, then the exit code of the result's status.
func (o *output) end(p *printer, res *jobs.Result) error {
	code := exitWith(res.ExitCode())
	if !o.json {
		code = p.finished(res)
	}
	if o.then != nil {
		if err := o.then(res); err != nil {
			return err
		}
	}
	return code
}

// errNoResultYet: the events ended before the finished one (ReplayOnly).
var errNoResultYet = errors.New("no result yet")

// watch prints a job's events as Follow yields them, to its end (follow)
// or to what is stored now, and ends as the job does. Interrupted, the job
// goes on. When the events cannot be read (a fleet whose permissions
// predate them), it takes the result instead, and prints what it has not
// shown of it.
func (o *output) watch(ctx context.Context, client *jobs.Client, id string, follow bool) error {
	var opts []jobs.FollowOption
	if !follow {
		opts = append(opts, jobs.ReplayOnly())
	}
	p := o.newPrinter(id)
	for ev, err := range client.Follow(ctx, id, opts...) {
		switch {
		case errors.Is(err, jobs.ErrNotFound):
			return fail(exitNotFound, "no job %s: no result and nothing queued (results are kept 24h)", id)
		case err != nil && ctx.Err() != nil:
			p.flush()
			return fail(exitInterrupted, "detached; job %s goes on: submit logs -f %s", id, id)
		case err != nil:
			p.notef("live output unavailable (%v); the output comes with the result", err)
			return o.fallBack(ctx, client, id, p, follow)
		}
		if o.json {
			o.printJSON(ev)
		} else {
			p.event(ev)
		}
		if ev.Type == jobs.EventFinished && ev.Result != nil {
			return o.end(p, ev.Result)
		}
	}
	p.flush()
	return errNoResultYet
}

// printer shows a job's events as run shows its result: the output, on
// stdout and stderr, as it arrives, and a line on stderr where a watcher
// needs one. Once the result is in, it prints what the stream did not
// carry (events that were off, or expired; output past the stream's share)
// unless the stream lost some in between.
type printer struct {
	o  *output
	id string
	w  [2]io.Writer
	// visible: written to a terminal (not --raw), where a character cut
	// between two events is held until its end arrives.
	visible [2]bool
	carry   [2][]byte

	attempt int      // of the run being printed
	next    [2]int64 // offset of the next byte of each stream in it
	holes   bool     // the stream lost some of its output
}

func (o *output) newPrinter(id string) *printer {
	p := &printer{o: o, id: id, w: [2]io.Writer{o.m.Stdout, o.m.Stderr}}
	for i, w := range p.w {
		p.visible[i] = !o.raw && o.m.IsTerminal(w)
	}
	return p
}

func streamIndex(s jobs.Stream) int {
	if s == jobs.Stderr {
		return 1
	}
	return 0
}

func (p *printer) event(ev *jobs.Event) {
	switch ev.Type {
	case jobs.EventRedelivered:
		p.restart(ev.Attempt)
		p.notef("attempt %d: redelivered (its worker was lost or stopped); its output starts again from the start", ev.Attempt)
	case jobs.EventStarted:
		again := ev.Attempt == p.attempt && (p.next[0] > 0 || p.next[1] > 0)
		p.restart(ev.Attempt)
		if again {
			p.notef("attempt %d: started again (its sandbox failed); its output starts again from the start", ev.Attempt)
		}
	case jobs.EventOutput:
		if ev.Attempt != p.attempt {
			p.restart(ev.Attempt)
		}
		i := streamIndex(ev.Stream)
		data := ev.DataBytes()
		switch {
		case ev.Offset > p.next[i]:
			p.holes = true
		case ev.Offset < p.next[i]: // shown already
			data = data[min(p.next[i]-ev.Offset, int64(len(data))):]
		}
		p.write(i, data)
		p.next[i] = max(p.next[i], ev.Offset+int64(len(ev.DataBytes())))
	case jobs.EventGap:
		if ev.Attempt != p.attempt {
			p.restart(ev.Attempt)
		}
		p.holes = true
		p.next[streamIndex(ev.Stream)] = ev.Offset + ev.Bytes
		p.notef("%d bytes of %s not shown: the stream fell behind (submit get %s has them)", ev.Bytes, ev.Stream, p.id)
	}
}

// finished prints what the stream did not carry of the result's output,
// then what happened, and ends with the job's exit code.
func (p *printer) finished(res *jobs.Result) error {
	p.flush()
	if res.Attempt != p.attempt {
		p.next, p.holes = [2]int64{}, false // no event of that run was shown
	}
	if !p.holes {
		for i, b := range [2][]byte{res.StdoutBytes(), res.StderrBytes()} {
			if p.next[i] < int64(len(b)) {
				p.o.text(p.w[i], string(b[p.next[i]:]))
			}
		}
	}
	return p.o.ended(res)
}

// restart begins the output of another run.
func (p *printer) restart(attempt int) {
	p.flush()
	p.attempt, p.next, p.holes = attempt, [2]int64{}, false
}

// write shows b on stream i; on a terminal, a character cut at its end
// waits for the rest.
func (p *printer) write(i int, b []byte) {
	if !p.visible[i] {
		p.w[i].Write(b)
		return
	}
	b = append(p.carry[i], b...)
	keep := incompleteTail(b)
	p.carry[i] = append([]byte(nil), b[len(b)-keep:]...)
	p.o.text(p.w[i], string(b[:len(b)-keep]))
}

// flush shows what is held of a cut character, as it is.
func (p *printer) flush() {
	for i, c := range p.carry {
		if len(c) > 0 {
			p.o.text(p.w[i], string(c))
			p.carry[i] = nil
		}
	}
}

func (p *printer) notef(format string, args ...any) {
	p.flush()
	fmt.Fprintf(p.o.m.Stderr, "submit: job %s: %s\n", p.id, fmt.Sprintf(format, args...))
}

// incompleteTail returns how many bytes at the end of b are the start of
// a UTF-8 character whose end is not in b.
func incompleteTail(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return 0
			}
			return len(b) - i
		}
	}
	return 0
}
