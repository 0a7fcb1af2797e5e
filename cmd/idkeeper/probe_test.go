package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// probe is run("probe", args…) in-process: the exit status and what it printed.
func probe(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	env := func(string) (string, bool) { return "", false }
	code = run(context.Background(), append([]string{"probe"}, args...), env, &out, &errw)
	return code, out.String(), errw.String()
}

// TestProbeHTTP: 2xx is healthy (0); any other status, a redirect, a refused
// connection and a server slower than --timeout are unhealthy (1), with the
// reason, and the answer's body, on stderr.
func TestProbeHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(`{"status":"ready"}`))
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/notready":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"code":"STORE_NOT_INITIALISED"}`))
		case "/moved":
			http.Redirect(w, r, "/readyz", http.StatusFound)
		case "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	for _, c := range []struct {
		args    []string
		code    int
		wantOut string // in stdout (code 0) or stderr
	}{
		{[]string{srv.URL + "/readyz"}, exitOK, "200 OK"},
		{[]string{srv.URL + "/nocontent"}, exitOK, "204 No Content"},
		{[]string{srv.URL + "/notready"}, exitFail, "503 Service Unavailable: {\"code\":\"STORE_NOT_INITIALISED\"}"},
		{[]string{srv.URL + "/moved"}, exitFail, "302 Found"},
		{[]string{srv.URL + "/nothing"}, exitFail, "404 Not Found"},
		{[]string{"--timeout", "100ms", srv.URL + "/slow"}, exitFail, "deadline exceeded"},
	} {
		began := time.Now()
		code, out, errOut := probe(t, c.args...)
		got := out
		if c.code != exitOK {
			got = errOut
		}
		if code != c.code || !strings.Contains(got, c.wantOut) {
			t.Errorf("probe %q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, out, errOut, c.code, c.wantOut)
		}
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("probe %q took %s", c.args, d)
		}
	}

	// A refused connection: a port that was just free.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if code, _, errOut := probe(t, "http://"+addr+"/readyz"); code != exitFail || !strings.Contains(errOut, "refused") {
		t.Errorf("probe of a closed port: exit %d, stderr %q; want 1, connection refused", code, errOut)
	}
}

// TestProbeTCP: tcp://HOST:PORT is healthy while something accepts connections.
func TestProbeTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	if code, out, errOut := probe(t, "tcp://"+addr); code != exitOK || !strings.Contains(out, "connected") {
		t.Errorf("probe tcp://%s (listening): exit %d, stdout %q, stderr %q; want 0, connected", addr, code, out, errOut)
	}
	ln.Close()
	if code, _, errOut := probe(t, "tcp://"+addr); code != exitFail || errOut == "" {
		t.Errorf("probe tcp://%s (closed): exit %d, stderr %q; want 1 and the reason", addr, code, errOut)
	}
}

// TestProbeUsage: a bad command line exits 1, never 2 (which Docker reserves in a
// health check), and -h prints the usage and exits 0.
func TestProbeUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"http://127.0.0.1:1/a", "http://127.0.0.1:1/b"},
		{"--no-such-flag", "http://127.0.0.1:1/"},
		{"--timeout", "0s", "http://127.0.0.1:1/"},
		{"ftp://127.0.0.1:21/"},
		{"127.0.0.1:8080"},
		{"tcp://127.0.0.1"},
		{"tcp://127.0.0.1:1/path"},
	} {
		if code, _, errOut := probe(t, args...); code != exitFail || !strings.Contains(errOut, "probe") {
			t.Errorf("probe %q: exit %d, stderr %q; want 1 and a message", args, code, errOut)
		}
	}
	code, out, _ := probe(t, "-h")
	if code != exitOK || !strings.Contains(out, "Usage: idkeeper probe") {
		t.Errorf("probe -h: exit %d, stdout %q; want 0 and the usage", code, out)
	}
	// The command list names it.
	var out2 bytes.Buffer
	run(context.Background(), []string{"help"}, func(string) (string, bool) { return "", false }, &out2, &bytes.Buffer{})
	if !strings.Contains(out2.String(), "probe URL") {
		t.Errorf("idkeeper help does not list probe:\n%s", out2.String())
	}
}
