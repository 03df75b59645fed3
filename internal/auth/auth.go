// Package auth is the mutual HMAC-SHA256 challenge-response that every rmago
// connection (bootstrap, soft and shm queue pairs) runs before anything
// else: both sides prove they know the job's secret without sending it, and
// the dialer's small payload (what it wants to connect to) is bound to the
// proof so it cannot be altered in flight.
//
// Wire (all fixed size):
//
//	acceptor → dialer: magic(8) nonceA(32)
//	dialer → acceptor: nonceD(32) payload(PayloadLen) mac(32) = HMAC(secret, "dial"|role|nonceA|nonceD|payload)
//	acceptor → dialer: mac(32) = HMAC(secret, "accept"|role|nonceD|nonceA|payload)
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// PayloadLen is the size of the dialer's bound payload.
const PayloadLen = 32

// Timeout bounds the whole handshake.
const Timeout = 10 * time.Second

// ErrAuth means the peer did not prove it knows the secret, or spoke
// something else than this protocol.
var ErrAuth = errors.New("auth: peer failed authentication")

var magic = [8]byte{'r', 'm', 'a', 'g', 'o', 'A', 'U', '1'}

func mac(secret []byte, label, role string, a, b, payload []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	m.Write([]byte{byte(len(role))})
	m.Write([]byte(role))
	m.Write(a)
	m.Write(b)
	m.Write(payload)
	return m.Sum(nil)
}

// Dial runs the dialer's side on conn. role separates protocols that share
// a secret ("bootstrap", "soft-qp"), so a proof for one is useless for the other.
func Dial(conn net.Conn, secret []byte, role string, payload [PayloadLen]byte) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: empty secret", ErrAuth)
	}
	conn.SetDeadline(time.Now().Add(Timeout))
	defer conn.SetDeadline(time.Time{})
	var hello [8 + 32]byte
	if _, err := io.ReadFull(conn, hello[:]); err != nil {
		return fmt.Errorf("%w: reading challenge: %w", ErrAuth, err)
	}
	if [8]byte(hello[:8]) != magic {
		return fmt.Errorf("%w: not an rmago peer", ErrAuth)
	}
	nonceA := hello[8:]
	var msg [32 + PayloadLen + 32]byte
	if _, err := rand.Read(msg[:32]); err != nil {
		return err
	}
	copy(msg[32:], payload[:])
	copy(msg[32+PayloadLen:], mac(secret, "dial", role, nonceA, msg[:32], payload[:]))
	if _, err := conn.Write(msg[:]); err != nil {
		return fmt.Errorf("%w: sending proof: %w", ErrAuth, err)
	}
	var reply [32]byte
	if _, err := io.ReadFull(conn, reply[:]); err != nil {
		return fmt.Errorf("%w: peer refused the proof: %w", ErrAuth, err)
	}
	if !hmac.Equal(reply[:], mac(secret, "accept", role, msg[:32], nonceA, payload[:])) {
		return fmt.Errorf("%w: acceptor's proof is wrong", ErrAuth)
	}
	return nil
}

// Accept runs the acceptor's side on conn and returns the dialer's payload.
// On failure the caller must close conn without serving anything.
func Accept(conn net.Conn, secret []byte, role string) ([PayloadLen]byte, error) {
	var payload [PayloadLen]byte
	if len(secret) == 0 {
		return payload, fmt.Errorf("%w: empty secret", ErrAuth)
	}
	conn.SetDeadline(time.Now().Add(Timeout))
	defer conn.SetDeadline(time.Time{})
	var hello [8 + 32]byte
	copy(hello[:], magic[:])
	if _, err := rand.Read(hello[8:]); err != nil {
		return payload, err
	}
	if _, err := conn.Write(hello[:]); err != nil {
		return payload, fmt.Errorf("%w: sending challenge: %v", ErrAuth, err)
	}
	var msg [32 + PayloadLen + 32]byte
	if _, err := io.ReadFull(conn, msg[:]); err != nil {
		return payload, fmt.Errorf("%w: reading proof: %v", ErrAuth, err)
	}
	nonceD := msg[:32]
	copy(payload[:], msg[32:32+PayloadLen])
	if !hmac.Equal(msg[32+PayloadLen:], mac(secret, "dial", role, hello[8:], nonceD, payload[:])) {
		return payload, fmt.Errorf("%w: dialer's proof is wrong", ErrAuth)
	}
	if _, err := conn.Write(mac(secret, "accept", role, nonceD, hello[8:], payload[:])); err != nil {
		return payload, fmt.Errorf("%w: sending proof: %v", ErrAuth, err)
	}
	return payload, nil
}
