package client

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idkeeper/idkeeper/protocol"
)

// machineIDFiles are read in order; the first non-empty one names the machine.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// packageInit stands in for the process start time where /proc cannot tell it.
var packageInit = time.Now()

// userHZ is the unit of /proc/self/stat's start time: USER_HZ, 100 on every
// architecture Linux runs Go on.
const userHZ = 100

var processRequester = sync.OnceValues(func() (protocol.Requester, error) {
	machine, err := machineID(machineIDFiles, os.Hostname)
	if err != nil {
		return protocol.Requester{}, err
	}
	r := protocol.Requester{MachineID: machine, PID: os.Getpid(), StartedAt: processStart()}
	if err := r.Validate(); err != nil {
		return protocol.Requester{}, fmt.Errorf("idkeeper client: this process's identity: %w", err)
	}
	return r, nil
})

// ProcessRequester returns this process's identity, the default Requester of a
// Session before it adds its instance: the machine ID (/etc/machine-id, else
// /var/lib/dbus/machine-id, else the host name), the PID, and the process start time
// (from /proc on Linux, to 10 ms; elsewhere the time this package was initialised),
// in UTC to the millisecond. It is read once per process, and has no Instance.
//
// These three alone do not tell sessions apart (DESIGN §3): container images bake
// one machine ID, every container is PID 1, start times share the host's boot time
// at 10 ms resolution, and two sessions of one process share all three. Every
// Session therefore adds a random instance of its own (protocol.NewInstance).
func ProcessRequester() (protocol.Requester, error) { return processRequester() }

// machineID returns the trimmed content of the first non-empty file of paths, else
// the host name.
func machineID(paths []string, hostname func() (string, error)) (string, error) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if id := string(bytes.TrimSpace(b)); id != "" && len(id) <= protocol.MaxMachineIDLen {
			return id, nil
		}
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("idkeeper client: no machine ID in %v and no host name: %w", paths, err)
	}
	if h = strings.TrimSpace(h); h == "" {
		return "", fmt.Errorf("idkeeper client: no machine ID in %v and an empty host name", paths)
	}
	return h, nil
}

func processStart() time.Time {
	stat, err1 := os.ReadFile("/proc/self/stat")
	sys, err2 := os.ReadFile("/proc/stat")
	if err1 == nil && err2 == nil {
		if t, err := parseStart(string(stat), string(sys)); err == nil {
			return t
		}
	}
	return protocol.Millis(packageInit)
}

// parseStart computes the start time from /proc/self/stat (field 22, starttime, in
// clock ticks after boot) and /proc/stat (btime, the boot time in Unix seconds).
func parseStart(selfStat, procStat string) (time.Time, error) {
	// The command name (field 2) may hold spaces and parentheses: count fields from
	// the last ')'.
	i := strings.LastIndexByte(selfStat, ')')
	if i < 0 {
		return time.Time{}, errors.New("no command name in /proc/self/stat")
	}
	fields := strings.Fields(selfStat[i+1:])
	const startField = 22 - 3 // fields after ')' begin with field 3
	if len(fields) <= startField {
		return time.Time{}, errors.New("short /proc/self/stat")
	}
	ticks, err := strconv.ParseInt(fields[startField], 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	for line := range strings.Lines(procStat) {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			boot, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.UnixMilli(boot*1000 + ticks*1000/userHZ).UTC(), nil
		}
	}
	return time.Time{}, errors.New("no btime in /proc/stat")
}
