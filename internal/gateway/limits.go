package gateway

import (
	"net/http"
	"sync"
)

// slots bounds one kind of long request (long polls, event streams,
// batches, batch bodies arriving) three ways at once: so many on the whole
// gateway, so many for any one token, and so many for any one tenant (all
// its tokens together). Without the last two, one client holding every
// slot of a kind would get every other client 429.
type slots struct {
	kind      string // the metric's kind label
	noun      string // what a slot is, in the 429's message
	total     int
	perToken  int
	perTenant int

	mu      sync.Mutex
	busy    int
	tokens  map[string]int
	tenants map[string]int
}

func newSlots(kind, noun string, total, perToken, perTenant int) *slots {
	return &slots{kind: kind, noun: noun, total: total, perToken: perToken, perTenant: perTenant,
		tokens: map[string]int{}, tenants: map[string]int{}}
}

// limitTenant is the tenant whose allowance a token's long requests count
// against besides the token's own, "" for none: its Tenant.
func (t *Token) limitTenant() string { return t.Tenant }

// take takes a slot of s for tok (nil: an open gateway's caller, bound by
// the gateway-wide limit only), or answers 429 at once: a gateway at its
// bound sheds load rather than queueing requests it may not serve in time.
func (g *Gateway) take(s *slots, tok *Token) (release func(), err error) {
	var name, tenant string
	if tok != nil {
		name, tenant = tok.Name, tok.limitTenant()
	}
	bound := s.acquire(name, tenant)
	if bound == "" {
		g.metrics.slots.With(s.kind).Inc()
		return func() {
			s.release(name, tenant)
			g.metrics.slots.With(s.kind).Dec()
		}, nil
	}
	g.metrics.refused.With(s.kind, bound).Inc()
	var e *Error
	switch bound {
	case boundGateway:
		e = apiErr(http.StatusTooManyRequests, CodeTooManyRequests, "this gateway has %d %s already; retry later", s.total, s.noun)
	case boundToken:
		e = apiErr(http.StatusTooManyRequests, CodeTooManyRequests, "token %q has %d %s already, the most one token may; retry later", name, s.perToken, s.noun)
	default:
		e = apiErr(http.StatusTooManyRequests, CodeTooManyRequests, "tenant %q has %d %s already, the most one tenant may; retry later", tenant, s.perTenant, s.noun)
	}
	e.RetryAfter = g.cfg.RetryAfter
	return nil, e
}

// The bounds a slot may be refused by (the metric's bound label).
const (
	boundGateway = "gateway"
	boundToken   = "token"
	boundTenant  = "tenant"
)

// acquire takes a slot for token name and tenant ("" for none), or
// returns the bound that refuses it; all three are checked and counted
// under one lock, so no two requests both take the last slot.
func (s *slots) acquire(name, tenant string) (refusedBy string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.busy >= s.total:
		return boundGateway
	case name != "" && s.tokens[name] >= s.perToken:
		return boundToken
	case tenant != "" && s.tenants[tenant] >= s.perTenant:
		return boundTenant
	}
	s.busy++
	if name != "" {
		s.tokens[name]++
	}
	if tenant != "" {
		s.tenants[tenant]++
	}
	return ""
}

// release gives back a slot acquire took.
func (s *slots) release(name, tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy--
	if name != "" {
		if s.tokens[name]--; s.tokens[name] == 0 {
			delete(s.tokens, name)
		}
	}
	if tenant != "" {
		if s.tenants[tenant]--; s.tenants[tenant] == 0 {
			delete(s.tenants, tenant)
		}
	}
}
