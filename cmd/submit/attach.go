package main

import (
	"context"
	"errors"

	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// attach is "submit session attach ID": a shell in the session on the
// caller's terminal, over NATS (pkg/sessions OpenPTY). The local terminal
// is put in raw mode, so that every key (^C, ^Z, arrows) reaches the
// remote shell, and restored however attach ends; a resize of it is
// passed on. Without a terminal (stdin piped), what is read is typed,
// and its end is a ^D. It exits as the shell does.
func (c *sessionCommand) attach(ctx context.Context, client *sessions.Client, id string) error {
	fd := -1
	if f, ok := c.m.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd = int(f.Fd())
	}
	cols, rows := 80, 24
	if fd >= 0 {
		if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
			cols, rows = w, h
		}
	}
	p, err := client.OpenPTY(ctx, id, sessions.PTYRequest{Cols: cols, Rows: rows})
	if err != nil {
		return sessionFailed(err)
	}
	defer p.Close()
	if fd >= 0 {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fail(exitUsage, "put the terminal in raw mode: %w", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-winch:
					if w, h, err := term.GetSize(fd); err == nil && w > 0 && h > 0 {
						_ = p.Resize(w, h)
					}
				}
			}
		}()
	}
	// The reader of stdin may outlive attach (a read of a terminal cannot
	// be cut short); what it reads then goes nowhere.
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := c.m.Stdin.Read(buf)
			if n > 0 {
				if _, werr := p.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if fd < 0 {
					_, _ = p.Write([]byte{4}) // ^D: the end of what was piped
				}
				return
			}
		}
	}()
	for {
		data, err := p.Read(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(exitUnavailable, "the terminal: %w", err)
		}
		if _, err := c.m.Stdout.Write(data); err != nil {
			return nil
		}
	}
	end := p.Exit()
	switch {
	case end == nil:
		return nil
	case end.ExitCode != nil:
		return exitWith(*end.ExitCode)
	case end.Signal != 0:
		return exitWith(128 + end.Signal)
	case end.Reason != "" && end.Reason != "closed":
		return fail(exitNotFound, "the terminal ended: %s", end.Reason)
	}
	return nil
}
