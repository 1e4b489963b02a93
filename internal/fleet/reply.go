package fleet

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/sandfleet/sandfleet/internal/field"
)

// ValidReplyTo checks a job's reply subject: a publishable subject outside the
// server's own ($JS, $KV, $SYS and every other "$" subject: a result
// published there would be an API request made with the worker's
// permissions) and outside the job queue (a result there would be a job).
func ValidReplyTo(s string) error {
	const at = "reply_to"
	switch {
	case !validSubject(s):
		return &field.Error{Field: at, Reason: fmt.Sprintf("%s is not a NATS subject one can publish to (no wildcards, spaces or empty tokens, at most 255 bytes)", field.Quote(s))}
	case strings.HasPrefix(s, "$"):
		return &field.Error{Field: at, Reason: fmt.Sprintf("%s is a system subject (those starting with $ are the server's)", field.Quote(s))}
	case strings.HasPrefix(s, SubjectPrefix):
		return &field.Error{Field: at, Reason: fmt.Sprintf("%s is in the job queue (%s>)", field.Quote(s), SubjectPrefix)}
	}
	return nil
}

func validSubject(s string) bool {
	if len(s) > 255 {
		return false
	}
	for _, tok := range bytes.Split([]byte(s), []byte(".")) {
		if len(tok) == 0 {
			return false
		}
		for _, c := range tok {
			if c <= ' ' || c == '*' || c == '>' || c == 0x7f {
				return false
			}
		}
	}
	return true
}

// TenantInboxPrefix is the inbox prefix of tenant t's connections
// (nats.CustomInboxPrefix): the only inboxes t may subscribe to.
func TenantInboxPrefix(t string) string { return "_INBOX." + t }

// TenantReplyTo checks that a job of tenant t replies only where t alone
// may listen.
func TenantReplyTo(t, replyTo string) error {
	if t == "" {
		return nil
	}
	if strings.HasPrefix(replyTo, TenantInboxPrefix(t)+".") || strings.HasPrefix(replyTo, "results."+t+".") {
		return nil
	}
	return &field.Error{Field: "reply_to", Reason: fmt.Sprintf("%s: a job of tenant %s replies only on %s.> or results.%s.>",
		field.Quote(replyTo), t, TenantInboxPrefix(t), t)}
}

// ReplyToFor reports why replyTo may not be the reply subject of the job
// with this ID (the subject's, which is authoritative), or nil: it must be
// a valid reply subject (ValidReplyTo) and, for a tenant's job, one only
// that tenant may listen on.
func ReplyToFor(id, replyTo string) error {
	if err := ValidReplyTo(replyTo); err != nil {
		return err
	}
	return TenantReplyTo(TenantOf(id), replyTo)
}
