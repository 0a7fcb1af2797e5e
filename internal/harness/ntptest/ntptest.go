// Package ntptest is an SNTP v4 responder on loopback UDP for tests: it answers
// client requests (RFC 4330) with this machine's clock shifted by a settable
// offset, and a settable stratum, leap indicator, root delay and dispersion. It
// can also stay silent.
package ntptest

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Leap indicators.
const (
	LeapNone  = 0
	LeapAlarm = 3 // clock not synchronised
)

// Server is a running responder. Its setters are safe for concurrent use.
type Server struct {
	conn *net.UDPConn
	done chan struct{}

	mu        sync.Mutex
	offset    time.Duration
	stratum   uint8
	leap      uint8
	rootDelay time.Duration
	rootDisp  time.Duration
	silent    bool

	requests atomic.Int64
}

// Start listens on 127.0.0.1 at a free UDP port and answers until Close: stratum
// 2, no leap warning, root delay 1 ms, root dispersion 1 ms, offset 0.
func Start() (*Server, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	s := &Server{conn: conn, done: make(chan struct{}), stratum: 2, rootDelay: time.Millisecond, rootDisp: time.Millisecond}
	go s.serve()
	return s, nil
}

// Addr is the responder's host:port.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Close stops the responder and waits for it.
func (s *Server) Close() {
	s.conn.Close()
	<-s.done
}

// Requests counts the requests received, answered or not.
func (s *Server) Requests() int { return int(s.requests.Load()) }

// SetOffset makes the responder's time this machine's clock plus d.
func (s *Server) SetOffset(d time.Duration) { s.mu.Lock(); s.offset = d; s.mu.Unlock() }

// SetStratum sets the stratum answered: 0 is a kiss of death, 16 unsynchronised.
func (s *Server) SetStratum(n uint8) { s.mu.Lock(); s.stratum = n; s.mu.Unlock() }

// SetLeap sets the leap indicator answered (LeapAlarm: not synchronised).
func (s *Server) SetLeap(li uint8) { s.mu.Lock(); s.leap = li & 3; s.mu.Unlock() }

// SetRoot sets the root delay and root dispersion answered.
func (s *Server) SetRoot(delay, dispersion time.Duration) {
	s.mu.Lock()
	s.rootDelay, s.rootDisp = delay, dispersion
	s.mu.Unlock()
}

// SetSilent makes the responder drop requests (true) or answer them (false).
func (s *Server) SetSilent(v bool) { s.mu.Lock(); s.silent = v; s.mu.Unlock() }

func (s *Server) serve() {
	defer close(s.done)
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		recv := time.Now()
		s.requests.Add(1)
		if n < 48 || buf[0]&7 != 3 { // only client-mode packets
			continue
		}
		s.mu.Lock()
		off, stratum, leap, delay, disp, silent := s.offset, s.stratum, s.leap, s.rootDelay, s.rootDisp, s.silent
		s.mu.Unlock()
		if silent {
			continue
		}
		var p [48]byte
		p[0] = leap<<6 | 4<<3 | 4 // leap, version 4, server mode
		p[1] = stratum
		p[2] = 6    // poll 2^6 s
		p[3] = 0xec // precision 2^-20 s
		binary.BigEndian.PutUint32(p[4:], short(delay))
		binary.BigEndian.PutUint32(p[8:], short(disp))
		copy(p[12:16], "TEST")                              // reference ID
		putTime(p[16:], recv.Add(off).Add(-16*time.Second)) // reference time: last set 16 s ago
		copy(p[24:32], buf[40:48])                          // origin = the client's transmit timestamp
		putTime(p[32:], recv.Add(off))
		putTime(p[40:], time.Now().Add(off))
		_, _ = s.conn.WriteToUDP(p[:], from)
	}
}

// ntpEpochOffset is the seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix).
const ntpEpochOffset = 2208988800

func putTime(b []byte, t time.Time) {
	sec := uint64(t.Unix() + ntpEpochOffset)
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	binary.BigEndian.PutUint64(b, sec<<32|frac)
}

// short encodes d in the NTP 16.16 fixed-point short format.
func short(d time.Duration) uint32 {
	return uint32(uint64(d) << 16 / uint64(time.Second))
}
