package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/internal/harness/registrytest"
)

// Driver is a running driver program, spoken to over its stdin and stdout.
type Driver struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *registrytest.SyncBuffer

	mu      sync.Mutex
	nextID  int
	replies map[int]chan Message
	events  []Event
	used    int  // events before this index were consumed by event steps
	stuck   bool // a call went unanswered: Stop does not ask it to quit
	changed chan struct{}
	exited  chan struct{}
}

// Message is one line of a driver, decoded.
type Message map[string]any

// Event is an unsolicited line of a driver and when it arrived.
type Event struct {
	At  time.Time
	Msg Message
}

// Str returns member k as a string ("" when absent or not a string).
func (m Message) Str(k string) string { s, _ := m[k].(string); return s }

// driverReady bounds how long a driver may take to load (an interpreter's start on
// a loaded machine, many drivers starting at once) before it answers.
const driverReady = 60 * time.Second

// StartDriver starts argv in dir and waits until the driver answers a state
// command, so that no step's time limit counts the driver's own start.
func StartDriver(dir string, argv []string) (*Driver, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	d := &Driver{cmd: cmd, stderr: &registrytest.SyncBuffer{}, replies: map[int]chan Message{},
		changed: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = d.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d.stdin = in
	go d.read(out)
	if _, err := d.Call(map[string]any{"op": "state"}, driverReady); err != nil {
		d.Stop()
		return nil, fmt.Errorf("start %v: %w", argv, err)
	}
	return d, nil
}

func (d *Driver) read(out io.Reader) {
	defer close(d.exited)
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m Message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			fmt.Fprintf(d.stderr, "[harness] driver wrote a line that is not JSON: %q\n", sc.Text())
			continue
		}
		d.mu.Lock()
		if id, ok := m["id"].(float64); ok {
			if ch := d.replies[int(id)]; ch != nil {
				ch <- m
				delete(d.replies, int(id))
			}
		} else {
			d.events = append(d.events, Event{At: time.Now(), Msg: m})
			close(d.changed)
			d.changed = make(chan struct{})
		}
		d.mu.Unlock()
	}
}

// Call sends a command (an id is added) and waits up to timeout for its reply.
func (d *Driver) Call(cmd map[string]any, timeout time.Duration) (Message, error) {
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	ch := make(chan Message, 1)
	d.replies[id] = ch
	d.mu.Unlock()
	cmd["id"] = id
	b, _ := json.Marshal(cmd)
	if _, err := d.stdin.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("driver: write %s: %w", cmd["op"], err)
	}
	select {
	case m := <-ch:
		return m, nil
	case <-d.exited:
		return nil, fmt.Errorf("driver exited while answering %s", cmd["op"])
	case <-time.After(timeout):
		d.mu.Lock()
		d.stuck = true
		d.mu.Unlock()
		return nil, fmt.Errorf("driver did not answer %s within %v", cmd["op"], timeout)
	}
}

// AwaitEvent waits up to within for an event not consumed yet that match
// accepts; it consumes it and every event before it.
func (d *Driver) AwaitEvent(within time.Duration, match func(Message) bool) (Event, bool) {
	end := time.After(within)
	for {
		d.mu.Lock()
		for i := d.used; i < len(d.events); i++ {
			if match(d.events[i].Msg) {
				d.used = i + 1
				e := d.events[i]
				d.mu.Unlock()
				return e, true
			}
		}
		ch := d.changed
		d.mu.Unlock()
		select {
		case <-ch:
		case <-end:
			return Event{}, false
		}
	}
}

// Events returns every event so far.
func (d *Driver) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Event(nil), d.events...)
}

// Stop asks the driver to quit, then kills it if it has not exited within 5 s. A
// driver that left a call unanswered only gets the end of its stdin and 1 s.
func (d *Driver) Stop() {
	d.mu.Lock()
	stuck := d.stuck
	d.mu.Unlock()
	if !stuck {
		_, _ = d.Call(map[string]any{"op": "quit"}, 5*time.Second)
	}
	d.stdin.Close()
	wait := 5 * time.Second
	if stuck {
		wait = time.Second
	}
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		d.cmd.Process.Kill()
		<-done
	}
}

// Stderr is what the driver logged.
func (d *Driver) Stderr() string { return d.stderr.String() }
