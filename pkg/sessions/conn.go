package sessions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// Ports: a server a session runs on its sandbox's loopback, reached from
// outside through the session's worker, with no network opened. OpExpose
// lets a port be reached (at most MaxPorts a session; they are kept in
// its record, Info.Ports), OpUnexpose stops it, OpPorts lists them. OpConn
// opens one TCP connection to an exposed port: its bytes then flow on
// ConnSubject(id, stream, "in") and (…, "out") with the messages and
// flow control of a terminal's (pty.go), and one more message in:
//
//	in   'e'              the writing half is closed (EOF)
//
// and a 'd' sent as a request is answered once the sandbox has taken it
// (empty, or the error it failed with), so that a writer goes as fast as
// the server reads and no faster. A Conn is the client's end, a
// net.Conn.

// ConnEOF is the message that closes a connection's writing half.
const ConnEOF byte = 'e'

// Bounds of ports and connections.
const (
	MaxPorts     = 8        // exposed ports a session
	MinPort      = 1024     // the lowest port that may be exposed
	MaxConnInput = 32 << 10 // bytes of one 'd' message in
)

// ValidPort says why port cannot be exposed, or nil.
func ValidPort(port int) error {
	if port < MinPort || port > 65535 {
		return sessionapi.Errorf(sessionapi.ErrInvalid, "port %d: %d to 65535", port, MinPort)
	}
	return nil
}

// ConnSubject is the subject of one direction ("in" or "out") of a
// connection's stream.
func ConnSubject(id, stream, dir string) string {
	return subjectPrefix + id + ".conn." + stream + "." + dir
}

// PortRequest exposes or unexposes a port.
type PortRequest struct {
	Port int `json:"port"`
}

// ConnRequest opens a connection to an exposed port.
type ConnRequest struct {
	Stream string `json:"stream"`
	Port   int    `json:"port"`
	// Exposure, if not 0, is the exposure of Port the connection is for
	// (Info.PortExposure): another one's is refused, ErrNotFound.
	Exposure int `json:"exposure,omitempty"`
}

// ConnInfo is an open connection: its number in the session, and its
// subjects.
type ConnInfo struct {
	Conn int    `json:"conn"`
	In   string `json:"in"`
	Out  string `json:"out"`
}

// Expose lets port of session id be reached; it returns the ports
// exposed.
func (c *Client) Expose(ctx context.Context, id string, port int) ([]int, error) {
	var out []int
	err := c.Do(ctx, id, sessionapi.OpExpose, "", PortRequest{Port: port}, &out, 0)
	return out, err
}

// Unexpose stops port of session id being reached (connections open stay
// until they end); it returns the ports still exposed.
func (c *Client) Unexpose(ctx context.Context, id string, port int) ([]int, error) {
	var out []int
	err := c.Do(ctx, id, sessionapi.OpUnexpose, "", PortRequest{Port: port}, &out, 0)
	return out, err
}

// Ports returns the ports session id exposes.
func (c *Client) Ports(ctx context.Context, id string) ([]int, error) {
	var out []int
	err := c.Do(ctx, id, sessionapi.OpPorts, "", nil, &out, 0)
	return out, err
}

// Conn is a TCP connection to a port a session exposes. Read and Write
// may be called from two goroutines at once; Close from any.
type Conn struct {
	Info ConnInfo
	p    *pipe
	addr portAddr

	rmu  sync.Mutex // one Read at a time
	rest []byte     // what the last message held past the last Read

	dmu sync.Mutex
	rdl time.Time // the read deadline
	wdl time.Time // the write deadline
}

var _ net.Conn = (*Conn)(nil)

// OpenConn connects to port of session id, which must be exposed.
func (c *Client) OpenConn(ctx context.Context, id string, port int) (*Conn, error) {
	return c.OpenExposureConn(ctx, id, port, 0)
}

// OpenExposureConn connects to port of session id while it is still
// exposure number exposure of it (any exposure: 0).
func (c *Client) OpenExposureConn(ctx context.Context, id string, port, exposure int) (*Conn, error) {
	if !ValidID(id) {
		return nil, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	req := ConnRequest{Stream: randomStream(), Port: port, Exposure: exposure}
	cn := &Conn{addr: portAddr{id: id, port: port}}
	p, err := c.openPipe(ctx, id, sessionapi.OpConn, ConnSubject, req.Stream, req, &cn.Info, func() string { return cn.Info.In })
	if err != nil {
		return nil, err
	}
	cn.p = p
	return cn, nil
}

// connWriteWait bounds one write's wait for the sandbox to take it when
// no deadline is set: as long as the agent's own bound on a write, and
// some.
const connWriteWait = 40 * time.Second

func (cn *Conn) deadline(d *time.Time) (context.Context, context.CancelFunc) {
	cn.dmu.Lock()
	t := *d
	cn.dmu.Unlock()
	if t.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), t)
}

// Read reads what the server sent; io.EOF once it closed its side.
func (cn *Conn) Read(b []byte) (int, error) {
	cn.rmu.Lock()
	defer cn.rmu.Unlock()
	for len(cn.rest) == 0 {
		ctx, cancel := cn.deadline(&cn.rdl)
		data, err := cn.p.read(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, os.ErrDeadlineExceeded
		}
		if err != nil {
			return 0, err
		}
		cn.rest = data
	}
	n := copy(b, cn.rest)
	cn.rest = cn.rest[n:]
	return n, nil
}

// Write sends b to the server, a piece at a time, each once the sandbox
// took the one before.
func (cn *Conn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), MaxConnInput)]
		if err := cn.send(append([]byte{PTYData}, chunk...)); err != nil {
			return n, err
		}
		n += len(chunk)
		b = b[len(chunk):]
	}
	return n, nil
}

func (cn *Conn) send(msg []byte) error {
	ctx, cancel := cn.deadline(&cn.wdl)
	defer cancel()
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, connWriteWait)
		defer cancel()
	}
	rep, err := cn.p.nc.RequestWithContext(ctx, cn.Info.In, msg)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return os.ErrDeadlineExceeded
	case errors.Is(err, nats.ErrNoResponders):
		cn.p.end(&PTYExit{Reason: "lost: the session's worker does not answer"})
		return net.ErrClosed
	case err != nil:
		return err
	case len(rep.Data) > 0:
		return fmt.Errorf("sessions: %s", rep.Data)
	}
	return nil
}

// CloseWrite closes the writing half: the server reads an end of file.
func (cn *Conn) CloseWrite() error { return cn.send([]byte{ConnEOF}) }

// Close closes the connection.
func (cn *Conn) Close() error {
	cn.p.close()
	return nil
}

// LocalAddr and RemoteAddr name the session's port.
func (cn *Conn) LocalAddr() net.Addr  { return cn.addr }
func (cn *Conn) RemoteAddr() net.Addr { return cn.addr }

// SetDeadline sets both deadlines. A deadline set while a Read or Write
// waits applies from the next.
func (cn *Conn) SetDeadline(t time.Time) error {
	cn.dmu.Lock()
	cn.rdl, cn.wdl = t, t
	cn.dmu.Unlock()
	return nil
}

func (cn *Conn) SetReadDeadline(t time.Time) error {
	cn.dmu.Lock()
	cn.rdl = t
	cn.dmu.Unlock()
	return nil
}

func (cn *Conn) SetWriteDeadline(t time.Time) error {
	cn.dmu.Lock()
	cn.wdl = t
	cn.dmu.Unlock()
	return nil
}

// portAddr is a session's port as a net.Addr.
type portAddr struct {
	id   string
	port int
}

func (a portAddr) Network() string { return "sandfleet-session" }
func (a portAddr) String() string  { return a.id + ":" + strconv.Itoa(a.port) }
