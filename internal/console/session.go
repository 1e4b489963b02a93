package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessions are the console's logins. The browser's cookie holds a random
// ID; the bearer secret it stands for stays here, in the gateway's memory,
// never in the cookie: a cookie that leaks (or outlives its logout) is
// worth nothing once its session ends, and never reveals the token.
//
// They are this process's alone: a gateway that restarts forgets them
// (every viewer logs in again), and behind a load balancer a session opens
// pages on the gateway that made it only (use session affinity, or log in
// on each). Logging out ends the session where it was made.
type sessions struct {
	ttl   time.Duration
	limit int
	now   func() time.Time

	mu sync.Mutex
	// Keyed by the SHA-256 of the ID, as tokens are, so that the map's
	// comparisons leak nothing of a live ID through timing.
	byID map[[sha256.Size]byte]*login
}

// login is one session: the bearer secret it opens pages with, and when
// it ends.
type login struct {
	secret  string
	expires time.Time
}

func newSessions(ttl time.Duration, limit int) *sessions {
	return &sessions{ttl: ttl, limit: limit, now: time.Now, byID: map[[sha256.Size]byte]*login{}}
}

// open starts a session for secret and returns its ID. At the bound, the
// session nearest its end makes room: a viewer logged out that way logs
// in again, where refusing logins would lock everyone out of the console.
func (s *sessions) open(secret string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byID) >= s.limit {
		var oldest [sha256.Size]byte
		var first time.Time
		for k, l := range s.byID {
			if !now.Before(l.expires) {
				delete(s.byID, k)
				continue
			}
			if first.IsZero() || l.expires.Before(first) {
				oldest, first = k, l.expires
			}
		}
		if len(s.byID) >= s.limit {
			delete(s.byID, oldest)
		}
	}
	s.byID[sha256.Sum256([]byte(id))] = &login{secret: secret, expires: now.Add(s.ttl)}
	return id, nil
}

// secret returns the bearer secret of the live session id, "" for an ID
// that is unknown, ended or expired.
func (s *sessions) secret(id string) string {
	if id == "" {
		return ""
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.byID[k]
	if l == nil {
		return ""
	}
	if !s.now().Before(l.expires) {
		delete(s.byID, k)
		return ""
	}
	return l.secret
}

// close ends the session id.
func (s *sessions) close(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// len returns the number of sessions held, expired ones not yet swept
// included.
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}
