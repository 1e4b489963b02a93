package sessionhost

// Observer is told what happens to the host's sessions, for its metrics.
// Its methods are called from the host's goroutines and must not block.
type Observer interface {
	// Created: a session started on this host.
	Created()
	// Restored: a session resumed on this host from its last checkpoint
	// (a persisted session whose worker was lost, or a resume).
	Restored()
	// Ended: a session of this host ended, with its reason
	// (sessions.EndDeleted, EndIdle, EndLifetime, EndLost, EndShutdown).
	Ended(reason string)
}

type noObserver struct{}

func (noObserver) Created()     {}
func (noObserver) Restored()    {}
func (noObserver) Ended(string) {}
