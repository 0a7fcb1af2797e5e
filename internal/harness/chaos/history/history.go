// Package history is the record a chaos client process (internal/harness/chaos/cmd/chaosclient)
// leaves behind for the checker (internal/harness/chaos): one JSON-lines file of events and,
// per session slot, one binary file of every ID it handed out.
//
// Layout of a client's output directory:
//
//	history.jsonl    one Event per line, in the order they happened in the process
//	ids-<slot>.bin   every ID the slot's sessions minted, 8 bytes each, little-endian,
//	                 in minting order; a session's IDs start at the Off of its
//	                 "acquired" event and run to the next "acquired" of the slot (or
//	                 the end of the file)
//
// Times named T and LastValid are the host's real clock (Unix nanoseconds), never a
// skewed clock injected into the client: every process of a chaos run shares one
// host, and so one real clock, with the store's time authority. Lease times are the
// server's, in Unix milliseconds.
package history

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Event kinds.
const (
	EvStart       = "start"        // the process started: Name, PID
	EvOpen        = "open"         // a session (slot S, generation G) starts Open: Req
	EvAcquired    = "acquired"     // Open returned: Leases, Layout, Off
	EvOpenFailed  = "open_failed"  // Open gave up: Err
	EvAllocAnswer = "alloc_answer" // an Alloc answer arrived: Status, Leases, Err
	EvRenewSent   = "renew_sent"   // a Renew request is being sent
	EvRenewAnswer = "renew_answer" // a Renew answer arrived: Status, Leases, Err
	EvProgress    = "progress"     // minting so far: Digest
	EvLost        = "lost"         // the lease was lost (issuing refused for good): Err, Digest
	EvFatal       = "fatal"        // the session's OnFatal ran: Err
	EvClosing     = "closing"      // issuing stops; Close (drain, Remove) follows: Digest
	EvClosed      = "closed"       // Close returned: Err
	EvExit        = "exit"         // the process exits normally
)

// Event is one line of history.jsonl.
type Event struct {
	T      int64      `json:"t"`  // host clock, Unix ns
	Ev     string     `json:"ev"` // one of the Ev… kinds
	Name   string     `json:"name,omitempty"`
	PID    int        `json:"pid,omitempty"`
	S      int        `json:"s"` // session slot
	G      int        `json:"g"` // generation: the slot's n-th session
	Req    string     `json:"req,omitempty"`
	Leases []Lease    `json:"leases,omitempty"`
	Layout *Layout    `json:"layout,omitempty"`
	Off    int64      `json:"off,omitempty"` // byte offset of the slot's ID file
	Status int        `json:"status,omitempty"`
	Err    string     `json:"err,omitempty"`
	Digest *Digest    `json:"digest,omitempty"`
	Skew   *ClockSkew `json:"skew,omitempty"`
}

// Lease is one lease as the server granted or renewed it.
type Lease struct {
	Node      int64  `json:"node"`
	Token     uint64 `json:"token"`
	NotBefore int64  `json:"nb"`  // Unix ms
	ExpiresAt int64  `json:"exp"` // Unix ms
}

// Layout is the ID layout the server prescribed.
type Layout struct {
	EpochMs       int64 `json:"epochMs"`
	TimestampBits int   `json:"tsBits"`
	NodeBits      int   `json:"nodeBits"`
	SequenceBits  int   `json:"seqBits"`
}

// Digest summarises the IDs one session minted so far.
type Digest struct {
	N   int64 `json:"n"`
	Min int64 `json:"min"`
	Max int64 `json:"max"`
	// LastValid is the host time when the latest issuing call that found the lease
	// valid started (Unix ns): the session held the lease at least until then. Zero
	// when no call found it valid.
	LastValid int64 `json:"lastValid,omitempty"`
	// Refused counts the calls the generator refused while the lease was valid
	// (window not yet open or ended, clock behind).
	Refused int64 `json:"refused,omitempty"`
}

// ClockSkew describes the wall clock injected into a client: the host clock plus
// Offset, stepped back by Step during the second half of every Period.
type ClockSkew struct {
	Offset int64 `json:"offsetMs"`
	Period int64 `json:"periodMs,omitempty"`
	Step   int64 `json:"stepMs,omitempty"`
}

// Writer appends events to history.jsonl, one write per line, so that a process
// killed with SIGKILL leaves only whole lines behind (and at most a torn last one,
// which ReadEvents skips). Safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Create creates dir/history.jsonl.
func Create(dir string) (*Writer, error) {
	f, err := os.OpenFile(filepath.Join(dir, "history.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f}, nil
}

// Write appends e; errors are returned, the caller decides whether they are fatal.
func (w *Writer) Write(e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err = w.f.Write(b)
	return err
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// ReadEvents reads dir/history.jsonl. A torn last line (the process was killed
// mid-write) is dropped; a malformed line elsewhere is an error.
func ReadEvents(dir string) ([]Event, error) {
	f, err := os.Open(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var pending error
	for line := 1; sc.Scan(); line++ {
		if pending != nil {
			return nil, pending
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			pending = fmt.Errorf("%s line %d: %w", f.Name(), line, err)
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// IDFile is the path of a slot's ID file.
func IDFile(dir string, slot int) string {
	return filepath.Join(dir, fmt.Sprintf("ids-%d.bin", slot))
}

// IDWriter appends IDs to a slot's file through a buffer. Off counts every ID
// written, flushed or not. Not safe for concurrent use.
type IDWriter struct {
	f   *os.File
	w   *bufio.Writer
	off int64
	buf [8]byte
}

// CreateIDs creates the slot's ID file.
func CreateIDs(dir string, slot int) (*IDWriter, error) {
	f, err := os.Create(IDFile(dir, slot))
	if err != nil {
		return nil, err
	}
	return &IDWriter{f: f, w: bufio.NewWriterSize(f, 64<<10)}, nil
}

// Off is the byte offset the next ID goes to.
func (w *IDWriter) Off() int64 { return w.off }

// Write appends ids.
func (w *IDWriter) Write(ids []int64) error {
	for _, id := range ids {
		binary.LittleEndian.PutUint64(w.buf[:], uint64(id))
		if _, err := w.w.Write(w.buf[:]); err != nil {
			return err
		}
	}
	w.off += int64(8 * len(ids))
	return nil
}

// Flush writes the buffer to the file.
func (w *IDWriter) Flush() error { return w.w.Flush() }

// Close flushes and closes the file.
func (w *IDWriter) Close() error {
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadIDs reads the IDs of a slot's file between byte offsets from and to (to < 0:
// the end of the file). A file cut short (the process was killed before a flush)
// yields what it holds; a torn last ID is dropped.
func ReadIDs(path string, from, to int64) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	end := st.Size() &^ 7
	if to >= 0 && to < end {
		end = to
	}
	if from >= end {
		return nil, nil
	}
	b := make([]byte, end-from)
	if _, err := f.ReadAt(b, from); err != nil && err != io.EOF {
		return nil, err
	}
	ids := make([]int64, len(b)/8)
	for i := range ids {
		ids[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return ids, nil
}

// ParseAnswer decodes the leases (and, for Alloc, the layout) of a 200 answer of
// Alloc or Renew (DESIGN §10). A body the client library would call malformed
// yields nil leases.
func ParseAnswer(body []byte) ([]Lease, *Layout) {
	var ans struct {
		Layout *struct {
			Epoch         time.Time `json:"epoch"`
			TimestampBits int       `json:"timestampBits"`
			NodeBits      int       `json:"nodeBits"`
			SequenceBits  int       `json:"sequenceBits"`
		} `json:"layout"`
		Leases []struct {
			NodeID       int64     `json:"nodeId"`
			NotBefore    time.Time `json:"notBefore"`
			ExpiresAt    time.Time `json:"expiresAt"`
			FencingToken uint64    `json:"fencingToken"`
		} `json:"leases"`
	}
	if json.Unmarshal(body, &ans) != nil {
		return nil, nil
	}
	var layout *Layout
	if l := ans.Layout; l != nil {
		layout = &Layout{EpochMs: l.Epoch.UnixMilli(), TimestampBits: l.TimestampBits, NodeBits: l.NodeBits, SequenceBits: l.SequenceBits}
	}
	out := make([]Lease, 0, len(ans.Leases))
	for _, l := range ans.Leases {
		out = append(out, Lease{Node: l.NodeID, Token: l.FencingToken, NotBefore: l.NotBefore.UnixMilli(), ExpiresAt: l.ExpiresAt.UnixMilli()})
	}
	return out, layout
}
