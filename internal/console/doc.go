// Package console is sandfleet's web console, served by the gateway (and
// so by `worker --embedded`): server-rendered HTML pages of the fleet, its
// jobs, batches and workspaces, and a little plain JavaScript for live
// updates. Templates and assets are embedded; nothing is fetched from
// elsewhere.
//
//	GET  /                       the fleet: workers, queues, dead letters
//	GET  /jobs                   recent jobs: queue, status, label, ID
//	GET  /jobs/{id}              a job: code, files, limits, attempts, timing,
//	                             result, artifacts, its output live while it runs
//	POST /jobs/{id}/cancel       cancel it (an operator's token, CSRF-checked)
//	GET  /batches[/{name}]       batches; one batch's progress, pass rates, plots
//	GET  /workspaces[/{name}]    workspaces; one's revisions and their jobs
//	GET  /sessions[/{id}]        the viewer's sessions; one's record, its recent
//	                             cells and their figures, processes, a terminal
//	GET  /login, POST /login, POST /logout
//	GET  /static/...             the style sheet and the script
//
// Lists come from the job index (internal/jobindex), paged by sequence and
// filtered within a bound, never from a listing of RESULTS; RESULTS stays
// the authority for a job's page and for a listed job still marked
// running.
//
// Every value is escaped by html/template, the script writes job output
// with textContent, and a Content-Security-Policy forbids inline script,
// so a job that prints <script> shows it as text. A job's display
// outputs are shown only as images (data: URLs of the types display.go
// names, their bytes decoded first); markup and SVG are never rendered. The console takes the
// gateway's bearer tokens, from the Authorization header or, after the
// login form, a session of its own: a random ID in an HttpOnly
// SameSite=Strict cookie, the token kept in the gateway's memory only,
// ended by logout or its TTL (session.go). Forms carry a CSRF token
// derived from the session's ID (or the header's token) and must come
// from the same origin. A token of role=read sees every
// page but cannot cancel. Each viewer reads through its own scope's client
// and sees that scope alone: a tenant's token its tenant's jobs, batches
// and workspaces, a token of no tenant no tenant's. An open console (no tokens) answers on loopback
// names only.
package console
