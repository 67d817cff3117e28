package swim

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"tempest/wire"
)

// KeySize is the length of a gossip key: AES-256.
const KeySize = 32

// Config configures a Node.
type Config struct {
	// NodeName must be unique in the cluster; roles use their node id.
	NodeName string
	// BindAddr and BindPort are where memberlist listens, UDP and TCP on
	// the same port. Port 0 picks a free port.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are what peers are told to dial when
	// the bind address is not reachable as-is (0.0.0.0, NAT). Empty/0
	// means derive them from the bind address.
	AdvertiseAddr string
	AdvertisePort int

	// Meta is published to every member; it must encode to at most
	// MaxMetaSize bytes.
	Meta NodeMeta

	// Profile names the timing profile: ProfileLAN, ProfileFastLAN,
	// ProfileLocal or ProfileTest.
	Profile string

	// Keys are the gossip encryption keys, each KeySize bytes; Keys[0]
	// encrypts, all of them decrypt. Empty means gossip is neither
	// encrypted nor authenticated, which only tests should do: production
	// always sets Keys (derived from the cluster secret, current and
	// previous, so the SWIM plane rotates with the data plane). Encryption
	// cannot be switched on later; SetKeys needs a node started with keys.
	Keys [][]byte

	// Embedder, if set, supplies this node's ack payload and receives its
	// peers'. See StateEmbedder for its constraints.
	Embedder StateEmbedder
	// Events receives membership changes; nil fields are skipped.
	Events EventHandler

	// BroadcastTimeout bounds how long UpdateMeta waits for the new
	// metadata to be handed to gossip.
	BroadcastTimeout time.Duration

	// Logger receives memberlist's logs and the node's own; nil discards.
	Logger *slog.Logger
}

// DefaultConfig returns a configuration for a datacenter's LAN, the
// fastlan profile, on memberlist's usual port. NodeName and Meta.Role must
// still be set.
func DefaultConfig() Config {
	return Config{
		BindAddr:         "0.0.0.0",
		BindPort:         7946,
		Profile:          ProfileFastLAN,
		BroadcastTimeout: 5 * time.Second,
	}
}

// Validate reports every problem with the configuration at once, each
// naming its field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	// badErr keeps err in the chain so callers can errors.Is for it.
	badErr := func(field string, err error) {
		errs = append(errs, fmt.Errorf("%s: %w", field, err))
	}

	if c.NodeName == "" {
		bad("NodeName", "required")
	}
	if c.BindAddr == "" {
		bad("BindAddr", "required (use 0.0.0.0 for all interfaces)")
	} else if net.ParseIP(c.BindAddr) == nil {
		bad("BindAddr", "%q is not an IP address", c.BindAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		bad("BindPort", "%d out of range 0-65535", c.BindPort)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		bad("AdvertiseAddr", "%q is not an IP address", c.AdvertiseAddr)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		bad("AdvertisePort", "%d out of range 0-65535", c.AdvertisePort)
	}
	for _, err := range c.Meta.problems() {
		badErr("Meta", err)
	}
	if _, err := profileConfig(c.Profile); err != nil {
		badErr("Profile", err)
	}
	if len(c.Keys) > 0 {
		for _, err := range keyProblems(c.Keys) {
			badErr("Keys", err)
		}
	}
	if c.BroadcastTimeout <= 0 {
		bad("BroadcastTimeout", "must be positive, got %s", c.BroadcastTimeout)
	}

	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("swim config: %w", errors.Join(errs...))
}

// problems lists everything wrong with m, size included.
func (m NodeMeta) problems() []error {
	var errs []error
	switch m.Role {
	case wire.RoleGate, wire.RoleManager, wire.RoleWorker:
	case "":
		errs = append(errs, errors.New("Role required"))
	default:
		errs = append(errs, fmt.Errorf("Role %q unknown", m.Role))
	}
	if m.QUICAddr != "" {
		if _, _, err := net.SplitHostPort(m.QUICAddr); err != nil {
			errs = append(errs, fmt.Errorf("QUICAddr %q: %w", m.QUICAddr, err))
		}
	}
	if _, err := EncodeNodeMeta(m); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkKeys validates a key list for use: at least one key, each KeySize
// bytes, no duplicates (a duplicate usually means a derivation bug).
func checkKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("at least one key required")
	}
	return errors.Join(keyProblems(keys)...)
}

func keyProblems(keys [][]byte) []error {
	var errs []error
	for i, k := range keys {
		if len(k) != KeySize {
			errs = append(errs, fmt.Errorf("key %d is %d bytes, want %d", i, len(k), KeySize))
		}
		for j := range i {
			if bytes.Equal(keys[j], k) {
				errs = append(errs, fmt.Errorf("key %d duplicates key %d", i, j))
				break
			}
		}
	}
	return errs
}
