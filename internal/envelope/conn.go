package envelope

// Connections: conn_open connects to 127.0.0.1:Port inside the sandbox
// (a server a session runs there, which nothing outside can reach: the
// sandbox has no network of its own) and replies with the connection's
// number. It is then relayed as a terminal is: what the server sends
// comes as events of Stream StreamConn, at most ConnWindow bytes past
// what the far end acknowledged (conn_input's Acked), none before the
// first conn_input; what the far end sends goes in by conn_input's Data,
// each reply once it is written, so that a server that does not read
// holds the writer back, as TCP does. EOF closes the writing half; once
// the server has closed its side (or the connection failed, or
// conn_close came), one event of Stream StreamConnEnd ends it.
//
// An agent that predates them answers these ops "unknown op".
const (
	OpConnOpen  = "conn_open"  // Port -> Conn
	OpConnInput = "conn_input" // Conn: write Data (may be empty), take Acked, EOF half-closes
	OpConnClose = "conn_close" // Conn: close it
)

// The Streams of a connection's events.
const (
	StreamConn    = "conn"
	StreamConnEnd = "conn_end"
)

// ConnWindow is how far a connection's bytes run ahead of their
// acknowledgements; MaxConns is how many connections a session has open
// at once.
const (
	ConnWindow = 256 << 10
	MaxConns   = 32
)
