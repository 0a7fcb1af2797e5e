package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// encodeCommand encodes args as a RESP array of bulk strings, so an argument
// may hold spaces or quotes (a password, a sentinel's configuration).
func encodeCommand(args ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(b.String())
}

// replyError is an error reply ("-ERR …") of the server.
type replyError string

func (e replyError) Error() string { return string(e) }

// do sends one command, after AUTH pw when pw is set, and returns its reply: a
// string for a status, bulk string or integer, nil for a null, []any for an
// array; an error reply is a replyError.
func do(addr, pw string, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(c)
	if pw != "" {
		if _, err := c.Write(encodeCommand("AUTH", pw)); err != nil {
			return nil, err
		}
		if _, err := readReply(r); err != nil {
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	if _, err := c.Write(encodeCommand(args...)); err != nil {
		return nil, err
	}
	return readReply(r)
}

// doString is do for a command whose reply is a string.
func doString(addr, pw string, args ...string) (string, error) {
	v, err := do(addr, pw, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %v is not a string", args[0], v)
	}
	return s, nil
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return nil, replyError(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("bad reply %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("bad reply %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = readReply(r); err != nil {
				var re replyError
				if !errors.As(err, &re) {
					return nil, err
				}
				a[i] = re
			}
		}
		return a, nil
	default:
		return nil, fmt.Errorf("unknown reply %q", line)
	}
}

// infoField returns field's value in an INFO reply ("field:value" lines).
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}

// logTail is the end of a process's log, for a failure message.
func logTail(out *syncBuffer) string { return tail(out.String()) }
