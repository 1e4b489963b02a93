package natsembed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/sandfleet/sandfleet/internal/natscreds"
)

// User is the user Credentials makes.
const User = "sandfleet"

// ErrCredentialsMode is returned for a credentials file that others than
// its owner may read or write.
var ErrCredentialsMode = errors.New("others may read or write it")

// Credentials returns the user and password of the server whose data
// directory is dir (made if missing), from dir/nats-credentials
// (natscreds.File).
// At the first start there is none: it makes one, user sandfleet and 32
// random bytes as the password, mode 0600. A file written beforehand (by a
// test, by an operator who picks the password) is used as it is, if it is
// the owner's alone.
func Credentials(dir string) (path, user, password string, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", "", "", fmt.Errorf("credentials: %w", err)
	}
	path = filepath.Join(dir, natscreds.File)
	user, password, err = readOwn(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return path, user, password, err
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return "", "", "", err
	}
	// Written aside, then linked in: a reader never sees half a file, and
	// of two starts at once the first link wins and both use its password.
	tmp, err := os.CreateTemp(dir, "."+natscreds.File+"-*") // mode 0600
	if err != nil {
		return "", "", "", fmt.Errorf("credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(User + ":" + hex.EncodeToString(secret[:]) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return "", "", "", fmt.Errorf("credentials: %w", err)
	}
	user, password, err = readOwn(path)
	return path, user, password, err
}

// readOwn reads a credentials file that only its owner may read and write.
func readOwn(path string) (user, password string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", "", err
	}
	if !st.Mode().IsRegular() {
		return "", "", fmt.Errorf("%s: not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", "", fmt.Errorf("%s: mode %04o: %w (chmod 600 it)", path, perm, ErrCredentialsMode)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", "", err
	}
	if user, password, err = natscreds.Parse(data); err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	return user, password, nil
}

// Loopback reports whether the host of addr (host:port) is a loopback
// address or localhost: a server there is reachable from this machine
// only. An empty host (all interfaces) is not.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
