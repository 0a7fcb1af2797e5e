// Package discordtest is a fake Discord for tests: an httptest TLS server that
// answers webhook calls the way Discord does and records them.
//
// Webhook URLs stay real ("https://discord.com/api/webhooks/{id}/{token}"), so
// they pass discord.ValidWebhookURL; the *http.Client from Server.HTTPClient
// sends every request, whatever its host, to the fake. Nothing leaves the
// loopback interface.
package discordtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idkeeper/idkeeper/discord"
)

// Call is one request the fake received for a known webhook.
type Call struct {
	WebhookID string
	Message   discord.Message
	Status    int       // what the fake answered
	At        time.Time // the wall clock when it arrived
}

// Reply is a scripted answer: Status, optional headers, and a body ("" means a
// body like Discord's for that status). Delay holds the answer back that long,
// or until the request is cancelled.
type Reply struct {
	Status int
	Header map[string]string
	Body   string
	Delay  time.Duration
}

// Server is the fake Discord. Its methods are safe for concurrent use.
type Server struct {
	srv *httptest.Server

	mu      sync.Mutex
	hooks   map[string]*hook
	calls   []Call
	nextMsg int
	notify  chan struct{}
}

type hook struct {
	token   string
	replies []Reply // answered in turn; the last repeats; none: 200
	served  int
}

// New starts a fake Discord, closed when the test ends.
func New(t testing.TB) *Server {
	s := &Server{hooks: map[string]*hook{}, notify: make(chan struct{})}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// Webhook registers a webhook and returns its URL; id must be 1 to 20 digits,
// as Discord's are. Its answers are the replies
// in turn (the last one repeating), or 200 with the created message when none
// is given. A call to an unregistered id is answered 404 "Unknown Webhook", one
// with another token 401, as Discord does.
func (s *Server) Webhook(id string, replies ...Reply) string {
	token := "tok_" + id + "_abcdefghijklmnopqrstuvwxyz0123456789"
	s.mu.Lock()
	s.hooks[id] = &hook{token: token, replies: replies}
	s.mu.Unlock()
	return "https://discord.com/api/webhooks/" + id + "/" + token
}

// HTTPClient returns a client that sends every request to the fake and trusts
// its certificate; it does not follow redirects, like discord's default.
func (s *Server) HTTPClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(s.srv.Certificate())
	addr := s.srv.Listener.Addr().String()
	var d net.Dialer
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			// httptest's certificate names example.com.
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "example.com"},
			ForceAttemptHTTP2: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Calls returns every call so far, in arrival order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// CallsTo returns the calls to one webhook, in arrival order.
func (s *Server) CallsTo(id string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.WebhookID == id {
			out = append(out, c)
		}
	}
	return out
}

// WaitCalls waits until at least n calls have arrived and returns them; the
// test fails when they have not within timeout.
func (s *Server) WaitCalls(t testing.TB, n int, timeout time.Duration) []Call {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got, ch := len(s.calls), s.notify
		s.mu.Unlock()
		if got >= n {
			return s.Calls()
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("discordtest: %d calls after %v, want %d", got, timeout, n)
		}
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	id, token, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/api/webhooks/"), "/")
	if r.Method != http.MethodPost || !ok || !strings.HasPrefix(r.URL.Path, "/api/webhooks/") {
		answer(w, Reply{Status: http.StatusNotFound, Body: `{"message": "404: Not Found", "code": 0}`}, "")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var m discord.Message
	if err == nil {
		err = json.Unmarshal(body, &m)
	}
	if err != nil {
		answer(w, Reply{Status: http.StatusBadRequest, Body: `{"message": "Cannot send an empty message", "code": 50006}`}, "")
		return
	}

	s.mu.Lock()
	h := s.hooks[id]
	var rp Reply
	switch {
	case h == nil:
		rp = Reply{Status: http.StatusNotFound, Body: `{"message": "Unknown Webhook", "code": 10015}`}
	case h.token != token:
		rp = Reply{Status: http.StatusUnauthorized, Body: `{"message": "Invalid Webhook Token", "code": 50027}`}
	case len(h.replies) == 0:
		rp = Reply{Status: http.StatusOK}
	default:
		rp = h.replies[min(h.served, len(h.replies)-1)]
		h.served++
	}
	s.nextMsg++
	msgID := strconv.Itoa(1_000_000 + s.nextMsg)
	if h != nil {
		s.calls = append(s.calls, Call{WebhookID: id, Message: m, Status: rp.Status, At: time.Now()})
		close(s.notify)
		s.notify = make(chan struct{})
	}
	s.mu.Unlock()

	if rp.Delay > 0 {
		select {
		case <-time.After(rp.Delay):
		case <-r.Context().Done():
			return
		}
	}
	created := ""
	if rp.Status/100 == 2 {
		b, _ := json.Marshal(map[string]any{"id": msgID, "webhook_id": id, "channel_id": "1", "content": m.Content, "embeds": m.Embeds})
		created = string(b)
	}
	answer(w, rp, created)
}

func answer(w http.ResponseWriter, rp Reply, created string) {
	for k, v := range rp.Header {
		w.Header().Set(k, v)
	}
	body := rp.Body
	if body == "" {
		switch {
		case rp.Status/100 == 2:
			body = created
		case rp.Status == http.StatusTooManyRequests:
			body = `{"message": "You are being rate limited.", "retry_after": 1, "global": false}`
		default:
			body = fmt.Sprintf(`{"message": %q, "code": 0}`, http.StatusText(rp.Status))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rp.Status)
	_, _ = io.WriteString(w, body)
}
