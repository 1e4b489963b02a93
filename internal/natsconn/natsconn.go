// Package natsconn is how sandfleet's commands and tools connect to NATS:
// one set of connection options for the worker, the gateway and submit,
// credentials kept out of every log line and error.
package natsconn

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/natsurl"
)

// EnvURL names the environment variable read when --nats is not given.
const EnvURL = "NATS_URL"

// URLHelp describes --nats in the commands' help; its default is not
// printed there because NATS_URL may carry a password.
const URLHelp = "NATS server `URL`s, comma-separated (default $NATS_URL, else " + nats.DefaultURL + ")"

// ServerURL returns the server list to use: flag if set, else $NATS_URL,
// else nats.DefaultURL.
func ServerURL(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv(EnvURL); env != "" {
		return env
	}
	return nats.DefaultURL
}

// ConnectTimeout bounds each attempt to reach a server.
const ConnectTimeout = 5 * time.Second

// Config says how one process connects.
type Config struct {
	// URL is the server list, as given to --nats; "" means ServerURL("").
	URL string
	// Name is the client name the server reports (sandfleet-worker, ...).
	Name string
	// Persistent is for a long-running process: the first connect is
	// retried until it succeeds (at a fleet's start NATS may come up after
	// the worker) and reconnects never give up. Otherwise the first connect
	// fails after ConnectTimeout, as a command line tool wants.
	Persistent bool
	// Log receives the connection's events and asynchronous errors, with
	// credentials masked. Nil leaves nats.go's defaults.
	Log *slog.Logger
	// Extra options, after the others (a tenant's inbox prefix).
	Extra []nats.Option
}

// Options returns the nats.go options of c.
func (c Config) Options() []nats.Option {
	url := ServerURL(c.URL)
	opts := []nats.Option{nats.Name(c.Name), nats.Timeout(ConnectTimeout)}
	if c.Persistent {
		opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.RetryOnFailedConnect(true))
	}
	if c.Log == nil {
		return opts
	}
	log := c.Log
	var everConnected atomic.Bool
	return append(opts,
		nats.ConnectHandler(func(nc *nats.Conn) {
			everConnected.Store(true)
			log.Info("NATS connected", "url", natsurl.Redact(nc.ConnectedUrl()))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			level := slog.LevelDebug // during an outage, "disconnected" said it
			if !everConnected.Load() {
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "NATS not reachable; retrying", "url", natsurl.Redact(url), "err", natsurl.Error(err, url))
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Error("NATS connection closed", "err", natsurl.Error(err, url))
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", natsurl.Error(err, url))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "url", natsurl.Redact(nc.ConnectedUrl()))
		}),
		// Asynchronous errors, permission violations above all, would
		// otherwise only reach nats.go's default handler on stderr.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"err", natsurl.Error(err, url)}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			log.Error("NATS async error", attrs...)
		}),
	)
}

// Connect connects as c says. Its error names the servers with their
// credentials masked.
func Connect(c Config) (*nats.Conn, error) {
	url := ServerURL(c.URL)
	nc, err := nats.Connect(url, append(c.Options(), c.Extra...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach NATS at %s: %w", natsurl.Redact(url), natsurl.Error(err, url))
	}
	return nc, nil
}

// JetStream connects as c says, saying where to on c.Log when it is set,
// and returns the connection with its JetStream context. On an error
// nothing is left open.
func JetStream(c Config) (*nats.Conn, jetstream.JetStream, error) {
	if c.Log != nil {
		c.Log.Info("connecting to NATS", "url", natsurl.Redact(ServerURL(c.URL)))
	}
	nc, err := Connect(c)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
