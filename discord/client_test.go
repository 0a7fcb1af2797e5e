package discord

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testToken = "s3cr3t-T0ken_abcdefghijklmnop"

// fakeTime is an injectable clock whose Sleep records the wait and advances it.
type fakeTime struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (f *fakeTime) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeTime) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, d)
	f.now = f.now.Add(d)
	return nil
}

func (f *fakeTime) Waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

type recObserver struct {
	mu        sync.Mutex
	delivered []string
	failed    []string
}

func (o *recObserver) Delivered(id string) {
	o.mu.Lock()
	o.delivered = append(o.delivered, id)
	o.mu.Unlock()
}

func (o *recObserver) Failed(id, reason string) {
	o.mu.Lock()
	o.failed = append(o.failed, id+": "+reason)
	o.mu.Unlock()
}

// reply is one scripted answer of a fake Discord.
type reply struct {
	status int
	header map[string]string
	body   string
}

// fakeDiscord answers with the scripted replies in turn, repeating the last.
type fakeDiscord struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	replies []reply
	bodies  []string
	hits    atomic.Int32
}

func newFakeDiscord(t *testing.T, replies ...reply) *fakeDiscord {
	f := &fakeDiscord{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(f.hits.Add(1))
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, string(b))
		rp := f.replies[min(n, len(f.replies))-1]
		f.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/api/webhooks/123/"+testToken || r.URL.RawQuery != "wait=true" ||
			r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s %s?%s (%s)", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"))
		}
		for k, v := range rp.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rp.status)
		io.WriteString(w, rp.body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeDiscord) URL() string { return f.srv.URL + "/api/webhooks/123/" + testToken }

func testClient(ft *fakeTime, obs Observer) *Client {
	return &Client{allowAnyURL: true, Clock: ft.Now, Sleep: ft.Sleep, Observer: obs}
}

func noToken(t *testing.T, where string, s string) {
	t.Helper()
	if strings.Contains(s, testToken) {
		t.Errorf("%s contains the token: %q", where, s)
	}
}

func checkNoToken(t *testing.T, res Result, err error) {
	t.Helper()
	if err != nil {
		noToken(t, "error", err.Error())
	}
	noToken(t, "Result.Body", res.Body)
}

func TestSendSuccessExactBody(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 200, body: `{"id":"42","content":"hi @everyone"}`})
	ft, obs := &fakeTime{}, &recObserver{}
	m := Message{
		Content: "hi @everyone",
		Embeds:  []Embed{{Title: "T", Color: 0xff0000, Fields: []Field{{Name: "a", Value: "b", Inline: true}}}},
	}
	res, err := testClient(ft, obs).Send(context.Background(), fd.URL(), m)
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	want := `{"content":"hi @everyone","embeds":[{"title":"T","color":16711680,"fields":[{"name":"a","value":"b","inline":true}]}],"allowed_mentions":{"parse":[]}}`
	if fd.bodies[0] != want {
		t.Errorf("body\n got %s\nwant %s", fd.bodies[0], want)
	}
	if res.Status != 200 || res.Attempts != 1 || res.WebhookID != "123" || res.Body != `{"id":"42","content":"hi @everyone"}` || res.Err != nil {
		t.Errorf("Result = %+v", res)
	}
	if len(obs.delivered) != 1 || obs.delivered[0] != "123" || len(obs.failed) != 0 {
		t.Errorf("observer: delivered %v failed %v", obs.delivered, obs.failed)
	}
	if w := ft.Waits(); len(w) != 0 {
		t.Errorf("waited %v", w)
	}
}

func TestSendRateLimited(t *testing.T) {
	tests := []struct {
		name string
		r    reply
		want time.Duration
	}{
		{"retry_after body", reply{status: 429, body: `{"message":"You are being rate limited.","retry_after":1.5,"global":false}`,
			header: map[string]string{"Retry-After": "9"}}, 1500 * time.Millisecond},
		{"Retry-After header", reply{status: 429, header: map[string]string{"Retry-After": "3"}}, 3 * time.Second},
		{"Retry-After date", reply{status: 429, header: map[string]string{"Retry-After": "Mon, 02 Jan 2006 15:04:12 GMT"}}, 7 * time.Second},
		{"X-RateLimit-Reset-After", reply{status: 429, header: map[string]string{"X-RateLimit-Reset-After": "0.250"}}, 250 * time.Millisecond},
		{"global", reply{status: 429, body: `{"retry_after":2,"global":true}`}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := newFakeDiscord(t, tt.r, reply{status: 200, body: `{}`})
			ft := &fakeTime{now: time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC)}
			c := testClient(ft, nil)
			res, err := c.Send(context.Background(), fd.URL(), Message{Content: "x"})
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			if res.Attempts != 2 || res.Status != 200 {
				t.Errorf("Result = %+v", res)
			}
			if w := ft.Waits(); len(w) != 1 || w[0] != tt.want {
				t.Errorf("waits %v, want [%v]", w, tt.want)
			}
		})
	}
}

func TestSendGlobalRateLimitPausesOtherSends(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 429, header: map[string]string{"X-RateLimit-Global": "true", "Retry-After": "4"}}, reply{status: 200})
	ft := &fakeTime{now: time.Unix(1000, 0)}
	c := testClient(ft, nil)
	c.MaxAttempts = 1
	if _, err := c.Send(context.Background(), fd.URL(), Message{Content: "x"}); err == nil || !strings.Contains(err.Error(), "globally rate limited") {
		t.Fatalf("Send: %v, want globally rate limited", err)
	}
	ft.mu.Lock()
	ft.now = ft.now.Add(time.Second)
	ft.mu.Unlock()
	if _, err := c.Send(context.Background(), fd.URL(), Message{Content: "x"}); err != nil {
		t.Fatalf("second Send: %v", err)
	}
	if w := ft.Waits(); len(w) != 1 || w[0] != 3*time.Second {
		t.Errorf("waits %v, want [3s]: the rest of the global pause", w)
	}
}

func TestSendRetries5xxWithGrowingBackoff(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 500}, reply{status: 502}, reply{status: 503, body: `{"message":"upstream"}`}, reply{status: 204})
	ft := &fakeTime{}
	res, err := testClient(ft, nil).Send(context.Background(), fd.URL(), Message{Content: "x"})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if res.Attempts != 4 || res.Status != 204 {
		t.Errorf("Result = %+v", res)
	}
	w := ft.Waits()
	if len(w) != 3 {
		t.Fatalf("waits %v, want 3", w)
	}
	for i, d := range w {
		hi := time.Second << i
		if d < hi/2 || d > hi {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, d, hi/2, hi)
		}
		if i > 0 && d < w[i-1] {
			t.Errorf("wait %d = %v shorter than %v", i, d, w[i-1])
		}
	}
}

func TestSendBackoffCapped(t *testing.T) {
	c := &Client{BaseBackoff: time.Second, MaxBackoff: 10 * time.Second}
	for n := 1; n <= 40; n++ {
		if d := c.backoff(n); d > 10*time.Second || d < 0 {
			t.Fatalf("backoff(%d) = %v", n, d)
		}
	}
}

func TestSendGivesUpAfterMaxAttempts(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 500, body: `{"message":"boom ` + testToken + `"}`})
	ft, obs := &fakeTime{}, &recObserver{}
	c := testClient(ft, obs)
	c.MaxAttempts = 3
	res, err := c.Send(context.Background(), fd.URL(), Message{Content: "x"})
	if err == nil || !strings.Contains(err.Error(), "gave up after 3 attempts") || !strings.Contains(err.Error(), "500") {
		t.Fatalf("Send: %v", err)
	}
	if fd.hits.Load() != 3 || len(ft.Waits()) != 2 || res.Err != err {
		t.Errorf("hits %d waits %v res %+v", fd.hits.Load(), ft.Waits(), res)
	}
	checkNoToken(t, res, err)
	if len(obs.failed) != 1 || !strings.HasPrefix(obs.failed[0], "123: ") {
		t.Errorf("observer failed %v", obs.failed)
	}
	noToken(t, "observer reason", obs.failed[0])
}

func TestSend4xxNotRetried(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 400, body: `{"message":"Invalid Form Body","code":50035}`}, reply{status: 200})
	ft := &fakeTime{}
	res, err := testClient(ft, nil).Send(context.Background(), fd.URL(), Message{Content: "x"})
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "Invalid Form Body") {
		t.Fatalf("Send: %v", err)
	}
	if fd.hits.Load() != 1 || len(ft.Waits()) != 0 || res.Status != 400 || !strings.Contains(res.Body, "50035") {
		t.Errorf("hits %d waits %v res %+v", fd.hits.Load(), ft.Waits(), res)
	}
}

func TestSend404MeansDeleted(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 404, body: `{"message":"Unknown Webhook","code":10015}`})
	ft := &fakeTime{}
	res, err := testClient(ft, nil).Send(context.Background(), fd.URL(), Message{Content: "x"})
	if !errors.Is(err, ErrWebhookDeleted) || !strings.Contains(err.Error(), "deleted") || !strings.Contains(err.Error(), "webhook 123") {
		t.Fatalf("Send: %v, want ErrWebhookDeleted", err)
	}
	if fd.hits.Load() != 1 || res.Status != 404 {
		t.Errorf("hits %d res %+v", fd.hits.Load(), res)
	}
	checkNoToken(t, res, err)
}

func TestSendCancelStopsRetries(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 503})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &Client{allowAnyURL: true, BaseBackoff: time.Hour, MaxBackoff: time.Hour} // the real sleep
	go func() {
		for fd.hits.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, fd.URL(), Message{Content: "x"})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Send: %v, want context.Canceled", err)
		}
		noToken(t, "error", err.Error())
	case <-time.After(10 * time.Second):
		t.Fatal("Send did not stop when ctx was cancelled")
	}
	if n := fd.hits.Load(); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestSendTransportErrorHidesToken(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL + "/api/webhooks/123/" + testToken
	srv.Close() // connection refused from now on
	ft := &fakeTime{}
	c := testClient(ft, nil)
	c.MaxAttempts = 2
	res, err := c.Send(context.Background(), u, Message{Content: "x"})
	if err == nil || !strings.Contains(err.Error(), "request failed") {
		t.Fatalf("Send: %v", err)
	}
	if res.Attempts != 2 || len(ft.Waits()) != 1 {
		t.Errorf("res %+v waits %v", res, ft.Waits())
	}
	checkNoToken(t, res, err)
}

func TestSendValidatesURL(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 200})
	obs := &recObserver{}
	c := &Client{Observer: obs} // no test bypass
	_, err := c.Send(context.Background(), fd.URL(), Message{Content: "x"})
	if !errors.Is(err, ErrInvalidWebhookURL) {
		t.Fatalf("Send to %s: %v, want ErrInvalidWebhookURL", fd.srv.URL, err)
	}
	if fd.hits.Load() != 0 {
		t.Error("a request was made to an invalid URL")
	}
	noToken(t, "error", err.Error())
	if len(obs.failed) != 1 {
		t.Errorf("observer failed %v", obs.failed)
	}
}

func TestSendReadsBoundedBody(t *testing.T) {
	fd := newFakeDiscord(t, reply{status: 200, body: strings.Repeat("x", 1<<20)})
	res, err := testClient(&fakeTime{}, nil).Send(context.Background(), fd.URL(), Message{Content: "x"})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if runes(res.Body) > maxResultBody {
		t.Errorf("Result.Body is %d chars", runes(res.Body))
	}
}

func TestFanoutSlowWebhookDoesNotDelayOthers(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // runs before hung.Close

	got := make(chan string, 2)
	healthy := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- name
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := healthy("a"), healthy("b")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := &recObserver{}
	c := &Client{allowAnyURL: true, Observer: obs}
	targets := []Target{
		{Name: "hung", URL: hung.URL + "/api/webhooks/1/" + testToken},
		{Name: "a", URL: a.URL + "/api/webhooks/2/" + testToken},
		{Name: "b", URL: b.URL + "/api/webhooks/3/" + testToken},
	}
	results := make(chan []Result, 1)
	go func() { results <- c.Fanout(ctx, targets, Message{Content: "x"}) }()

	deadline := time.After(5 * time.Second)
	for range 2 {
		select {
		case <-got:
		case <-deadline:
			t.Fatal("healthy webhooks were not delivered to while one hung")
		}
	}
	// Fanout is still waiting on the hung webhook; both healthy sends are done.
	waitFor(t, func() bool { obs.mu.Lock(); defer obs.mu.Unlock(); return len(obs.delivered) == 2 })
	cancel()
	var rs []Result
	select {
	case rs = <-results:
	case <-time.After(5 * time.Second):
		t.Fatal("Fanout did not return after ctx was cancelled")
	}
	if len(rs) != 3 {
		t.Fatalf("%d results", len(rs))
	}
	if !errors.Is(rs[0].Err, context.Canceled) || rs[0].WebhookID != "1" {
		t.Errorf("hung result %+v", rs[0])
	}
	for i, r := range rs[1:] {
		if r.Err != nil || r.Status != http.StatusNoContent {
			t.Errorf("result %d = %+v", i+1, r)
		}
	}
}

func TestFanoutBoundsConcurrency(t *testing.T) {
	var cur, peak atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
	}))
	t.Cleanup(srv.Close)
	c := &Client{allowAnyURL: true, Concurrency: 3}
	targets := make([]Target, 12)
	for i := range targets {
		targets[i].URL = srv.URL + "/api/webhooks/9/" + testToken
	}
	for i, r := range c.Fanout(context.Background(), targets, Message{Content: "x"}) {
		if r.Err != nil {
			t.Errorf("result %d: %v", i, r.Err)
		}
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Errorf("peak concurrency %d, want 1..3", p)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5s")
}
