package main

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// A session's code contexts by name: listed, started explicitly (in a
// directory of their own) and ended. A cell starts its context on first
// use as well (codectx.go).

// contextNameRE is what an explicit context's name may be: a path
// segment of the HTTP API, with nothing to escape.
var contextNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func errContexts(id uint64) *envelope.Reply {
	return fail(id, sessionapi.ErrLimit, "the session keeps at most %d contexts: end one first", sessionapi.MaxContexts)
}

// install makes fresh the context of name if name still holds was (nil:
// none) and, for a new name, the session has room for it; it reports
// whether it did.
func (a *agent) install(name string, was, fresh *codeContext) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.ctxs[name]
	if c != was || (!ok && len(a.ctxs) >= sessionapi.MaxContexts) {
		return false
	}
	a.ctxs[name] = fresh
	return true
}

// newContext starts a context as OpContext asks: a name taken is
// ErrExists, not the context it names.
func (a *agent) newContext(id uint64, req *sessionapi.ContextRequest) *envelope.Reply {
	lang, known := languageOf(req.Language)
	if !known {
		return fail(id, sessionapi.ErrInvalid, "language %q: a context runs one of %s", req.Language, languageNames())
	}
	if req.Name != "" && !contextNameRE.MatchString(req.Name) {
		return fail(id, sessionapi.ErrInvalid, "context name %q: 1 to 64 letters, digits, '.', '_' or '-', not first", req.Name)
	}
	cwd := a.dir
	if req.Cwd != "" {
		var err error
		if cwd, err = a.resolve(req.Cwd); err != nil {
			return fail(id, sessionapi.ErrInvalid, "cwd: %v", err)
		}
		if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
			return fail(id, sessionapi.ErrInvalid, "cwd %q: not a directory", req.Cwd)
		}
	}
	name, bad := a.freeName(id, req, lang)
	if bad != nil {
		return bad
	}
	c, err := a.startContext(lang, cwd)
	if err != nil {
		return fail(id, sessionapi.ErrFailed, "start context %q: %v", name, err)
	}
	if !a.install(name, nil, c) {
		c.kill()
		if _, bad := a.freeName(id, req, lang); bad != nil {
			return bad
		}
		return fail(id, sessionapi.ErrExists, "context %q: started meanwhile", name)
	}
	return done(id, a.describe(name, c))
}

// freeName is the name a new context takes: the one asked, or by default
// the name a cell of its language uses, else that name and a number.
func (a *agent) freeName(id uint64, req *sessionapi.ContextRequest, lang *language) (string, *envelope.Reply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ctxs) >= sessionapi.MaxContexts {
		return "", errContexts(id)
	}
	if req.Name != "" {
		if _, taken := a.ctxs[req.Name]; taken {
			return "", fail(id, sessionapi.ErrExists, "context %q exists already", req.Name)
		}
		return req.Name, nil
	}
	base := contextName(&sessionapi.CodeRequest{Language: lang.name})
	if _, taken := a.ctxs[base]; !taken {
		return base, nil
	}
	for i := 2; ; i++ { // at most MaxContexts names are taken
		name := lang.name + "-" + strconv.Itoa(i)
		if _, taken := a.ctxs[name]; !taken {
			return name, nil
		}
	}
}

// describe is what a context's listing says of it.
func (a *agent) describe(name string, c *codeContext) sessionapi.Context {
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", c.p.pid))
	if err != nil || c.dead() {
		cwd = c.cwd
	}
	return sessionapi.Context{Name: name, Language: c.lang.name, Cwd: cwd, Cells: int(c.cells.Load()), Created: c.created.UnixMilli()}
}

func (a *agent) contexts(id uint64) *envelope.Reply {
	a.mu.Lock()
	names := make([]string, 0, len(a.ctxs))
	for n := range a.ctxs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []sessionapi.Context{}
	cs := make([]*codeContext, len(names))
	for i, n := range names {
		cs[i] = a.ctxs[n]
	}
	a.mu.Unlock()
	for i, n := range names {
		out = append(out, a.describe(n, cs[i]))
	}
	return done(id, out)
}

// endContext ends the context Name names, and forgets it: a cell that
// runs in it ends as ContextDied.
func (a *agent) endContext(id uint64, req *sessionapi.ContextRequest) *envelope.Reply {
	a.mu.Lock()
	c, ok := a.ctxs[req.Name]
	delete(a.ctxs, req.Name)
	a.mu.Unlock()
	if !ok {
		return fail(id, sessionapi.ErrNotFound, "no context %q", req.Name)
	}
	c.kill()
	return done(id, struct{}{})
}
