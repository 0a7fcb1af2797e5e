package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for the zero-value fields of Client.
const (
	DefaultMaxAttempts   = 5
	DefaultBaseBackoff   = time.Second
	DefaultMaxBackoff    = time.Minute
	DefaultMaxRetryAfter = 5 * time.Minute
	DefaultConcurrency   = 8
	DefaultTimeout       = 15 * time.Second

	maxAnswerBytes = 64 << 10 // an answer body is read up to this many bytes
	maxResultBody  = 512      // Result.Body keeps this many characters
)

// ErrWebhookDeleted is wrapped by Send's error when Discord answers 404: the
// webhook was deleted (or the URL is wrong). Retrying will not help.
var ErrWebhookDeleted = errors.New("discord: webhook not found (deleted, or the URL is wrong)")

// Observer is told the final outcome of each Send. Its methods must be safe for
// concurrent use and should not block. reason never contains the token.
type Observer interface {
	Delivered(webhookID string)
	Failed(webhookID string, reason string)
}

// Client posts messages to Discord webhooks. The zero value is ready to use;
// zero fields mean their default. A Client is safe for concurrent use and must
// not be copied after first use.
type Client struct {
	// HTTP does the requests. Nil means a client with DefaultTimeout per
	// request that does not follow redirects.
	HTTP *http.Client
	// Clock returns the current time; nil means time.Now. It dates
	// Retry-After headers and the global rate-limit pause.
	Clock func() time.Time
	// Sleep waits d or until ctx is done, returning ctx.Err() in that case.
	// Nil means a timer. Tests inject one that records the waits.
	Sleep func(ctx context.Context, d time.Duration) error
	// MaxAttempts bounds the attempts per Send, the first included (default 5).
	MaxAttempts int
	// BaseBackoff is the wait before the second attempt after a 5xx or a
	// transport error (default 1 s); it doubles per attempt up to MaxBackoff
	// (default 1 min), with jitter: the wait is between half and all of it.
	BaseBackoff, MaxBackoff time.Duration
	// MaxRetryAfter bounds a rate-limit wait Send accepts (default 5 min);
	// a 429 asking for longer fails at once.
	MaxRetryAfter time.Duration
	// Concurrency bounds the sends Fanout runs at once (default 8).
	Concurrency int
	// Observer, if set, is told the outcome of each Send.
	Observer Observer

	// allowAnyURL skips ValidWebhookURL, for tests against httptest servers.
	allowAnyURL bool

	mu          sync.Mutex
	globalUntil time.Time // no request before this: Discord's global rate limit
}

// Result is the outcome of one Send.
type Result struct {
	WebhookID string // the id in the URL; "" when the URL is invalid
	Status    int    // HTTP status of the last answer; 0 if none came
	Body      string // the last answer's body, cut to 512 characters, token redacted
	Attempts  int    // requests made
	Err       error  // nil on success; the error Send returned
}

// Target is one webhook Fanout sends to.
type Target struct {
	Name string // the caller's label, not sent
	URL  string
}

// payload is the JSON body of a request.
type payload struct {
	Content         string          `json:"content,omitempty"`
	Embeds          []Embed         `json:"embeds,omitempty"`
	AllowedMentions allowedMentions `json:"allowed_mentions"`
}

type allowedMentions struct {
	Parse []string `json:"parse"`
}

// rateLimitBody is the JSON body of a 429.
type rateLimitBody struct {
	RetryAfter *float64 `json:"retry_after"`
	Global     bool     `json:"global"`
	Message    string   `json:"message"`
}

// errorBody is the JSON body of other errors.
type errorBody struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

var defaultHTTP = &http.Client{
	Timeout: DefaultTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// Send posts m, after Fit, to the webhook at rawURL with ?wait=true, so that
// Discord answers with the message it created. It validates rawURL with
// ValidWebhookURL first.
//
// A 2xx answer is success. A 429 is retried after the wait Discord asks for:
// retry_after (seconds) in the JSON body, else the Retry-After header, else
// X-RateLimit-Reset-After, else the backoff; a global rate limit pauses every
// Send of this Client for that time. A 5xx or a transport error is retried with
// exponential backoff and jitter. Any other status fails at once; 404 wraps
// ErrWebhookDeleted. At most MaxAttempts requests are made and every wait ends
// when ctx does, in which case the error wraps ctx.Err().
//
// The Result is filled in on failure too; Result.Err is the error returned.
// Neither contains the token.
func (c *Client) Send(ctx context.Context, rawURL string, m Message) (Result, error) {
	res, err := c.send(ctx, rawURL, m)
	res.Err = err
	if c.Observer != nil {
		if err == nil {
			c.Observer.Delivered(res.WebhookID)
		} else {
			c.Observer.Failed(res.WebhookID, err.Error())
		}
	}
	return res, err
}

func (c *Client) send(ctx context.Context, rawURL string, m Message) (Result, error) {
	var res Result
	if !c.allowAnyURL {
		if err := ValidWebhookURL(rawURL); err != nil {
			return res, err
		}
	}
	u, id, token, ok := splitWebhook(rawURL)
	if !ok {
		return res, fmt.Errorf("%w: path must be %s{id}/{token}", ErrInvalidWebhookURL, webhookPathPrefix)
	}
	res.WebhookID = id
	q := *u
	q.RawQuery = "wait=true"
	q.Fragment = ""
	target := q.String()
	redact := func(s string) string { return strings.ReplaceAll(s, token, "••••") }

	m = m.Fit()
	body, err := json.Marshal(payload{
		Content:         m.Content,
		Embeds:          m.Embeds,
		AllowedMentions: allowedMentions{Parse: []string{}},
	})
	if err != nil {
		return res, fmt.Errorf("discord: webhook %s: encode message: %w", id, err)
	}

	attempts := c.maxAttempts()
	var lastErr error
	for attempt := 1; attempt <= attempts; attempt++ {
		if err := c.waitGlobal(ctx); err != nil {
			return res, stopped(id, err, lastErr)
		}
		res.Attempts = attempt
		a := c.do(ctx, target, body, redact)
		res.Status, res.Body = a.status, a.body
		switch {
		case a.err == nil && a.status >= 200 && a.status < 300:
			return res, nil
		case a.err != nil:
			if ctx.Err() != nil {
				return res, fmt.Errorf("discord: webhook %s: %w", id, ctx.Err())
			}
			lastErr = fmt.Errorf("discord: webhook %s: %s", id, redact(a.err.Error()))
		case a.status == http.StatusTooManyRequests:
			wait, global, known := c.retryAfter(a)
			if known && wait > c.maxRetryAfter() {
				return res, fmt.Errorf("discord: webhook %s: rate limited for %v, longer than %v", id, wait, c.maxRetryAfter())
			}
			if !known {
				wait = c.backoff(attempt)
			}
			scope := "rate limited"
			if global {
				scope = "globally rate limited"
				c.setGlobal(wait)
			}
			lastErr = fmt.Errorf("discord: webhook %s: %s (429)", id, scope)
			if attempt == attempts {
				return res, fmt.Errorf("%w (gave up after %d attempts)", lastErr, attempt)
			}
			if global {
				continue // waitGlobal does the waiting
			}
			if err := c.sleep(ctx, wait); err != nil {
				return res, stopped(id, err, lastErr)
			}
			continue
		case a.status >= 500:
			lastErr = fmt.Errorf("discord: webhook %s: server error %d%s", id, a.status, a.message)
		case a.status == http.StatusNotFound:
			return res, fmt.Errorf("discord: webhook %s: %w%s", id, ErrWebhookDeleted, a.message)
		default:
			return res, fmt.Errorf("discord: webhook %s: rejected with status %d%s", id, a.status, a.message)
		}
		if attempt == attempts {
			break
		}
		if err := c.sleep(ctx, c.backoff(attempt)); err != nil {
			return res, stopped(id, err, lastErr)
		}
	}
	return res, fmt.Errorf("%w (gave up after %d attempts)", lastErr, res.Attempts)
}

// stopped is the error of a Send that ctx ended, naming the last failure if any.
func stopped(id string, err, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("discord: webhook %s: %w", id, err)
	}
	return fmt.Errorf("%w (then stopped: %w)", lastErr, err)
}

// answer is what one request produced.
type answer struct {
	status  int
	header  http.Header
	raw     []byte // body, up to maxAnswerBytes
	body    string // redacted and cut for Result.Body
	message string // ": <Discord's message>" for errors, or ""
	err     error  // transport error, token-free
}

func (c *Client) do(ctx context.Context, target string, body []byte, redact func(string) string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return answer{err: errors.New("cannot build request")}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "DiscordBot (https://github.com/idkeeper/idkeeper, 1) idkeeper")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error repeats the URL, token and all
		}
		return answer{err: fmt.Errorf("request failed: %s", redact(err.Error()))}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes)) // let the connection be reused
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	a.body = truncate(redact(strings.ToValidUTF8(string(raw), "\uFFFD")), maxResultBody)
	if resp.StatusCode >= 300 {
		var eb errorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Message != "" {
			a.message = ": " + truncate(redact(eb.Message), 200)
		}
	}
	return a
}

// retryAfter reads the wait a 429 asks for. known is false when it names none.
func (c *Client) retryAfter(a answer) (wait time.Duration, global, known bool) {
	var rb rateLimitBody
	if json.Unmarshal(a.raw, &rb) == nil {
		global = rb.Global
	}
	if strings.EqualFold(a.header.Get("X-RateLimit-Global"), "true") || a.header.Get("X-RateLimit-Scope") == "global" {
		global = true
	}
	if rb.RetryAfter != nil {
		if d, ok := seconds(*rb.RetryAfter); ok {
			return d, global, true
		}
	}
	if h := strings.TrimSpace(a.header.Get("Retry-After")); h != "" {
		if f, err := strconv.ParseFloat(h, 64); err == nil {
			if d, ok := seconds(f); ok {
				return d, global, true
			}
		} else if t, err := http.ParseTime(h); err == nil {
			return max(t.Sub(c.now()), 0), global, true
		}
	}
	if h := strings.TrimSpace(a.header.Get("X-RateLimit-Reset-After")); h != "" {
		if f, err := strconv.ParseFloat(h, 64); err == nil {
			if d, ok := seconds(f); ok {
				return d, global, true
			}
		}
	}
	return 0, global, false
}

// seconds converts a non-negative number of seconds; huge values saturate.
func seconds(f float64) (time.Duration, bool) {
	if f != f || f < 0 { // NaN or negative
		return 0, false
	}
	if f > float64(24*time.Hour/time.Second) {
		return 24 * time.Hour, true
	}
	return time.Duration(f * float64(time.Second)), true
}

// backoff is the wait after failed attempt n (1-based): BaseBackoff·2^(n-1),
// capped at MaxBackoff, then jittered into [d/2, d].
func (c *Client) backoff(n int) time.Duration {
	base, maxB := c.BaseBackoff, c.MaxBackoff
	if base <= 0 {
		base = DefaultBaseBackoff
	}
	if maxB <= 0 {
		maxB = DefaultMaxBackoff
	}
	d := base
	for i := 1; i < n && d < maxB; i++ {
		d *= 2
	}
	d = min(d, maxB)
	half := d / 2
	return half + rand.N(d-half+1)
}

func (c *Client) setGlobal(wait time.Duration) {
	until := c.now().Add(wait)
	c.mu.Lock()
	if until.After(c.globalUntil) {
		c.globalUntil = until
	}
	c.mu.Unlock()
}

// waitGlobal waits out a global rate limit, if one is in force.
func (c *Client) waitGlobal(ctx context.Context) error {
	c.mu.Lock()
	until := c.globalUntil
	c.mu.Unlock()
	if d := until.Sub(c.now()); d > 0 {
		return c.sleep(ctx, d)
	}
	return ctx.Err()
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return defaultHTTP
}

func (c *Client) maxAttempts() int {
	if c.MaxAttempts > 0 {
		return c.MaxAttempts
	}
	return DefaultMaxAttempts
}

func (c *Client) maxRetryAfter() time.Duration {
	if c.MaxRetryAfter > 0 {
		return c.MaxRetryAfter
	}
	return DefaultMaxRetryAfter
}

// Fanout sends m to every target concurrently, at most Concurrency at a time,
// and returns when all are done, with results[i] for targets[i]. Each target
// has its own goroutine and retries, so a slow or dead webhook holds only its
// own slot; set ctx's deadline to bound the whole call. A target still waiting
// for a slot when ctx ends gets a Result whose Err wraps ctx.Err().
func (c *Client) Fanout(ctx context.Context, targets []Target, m Message) []Result {
	results := make([]Result, len(targets))
	n := c.Concurrency
	if n <= 0 {
		n = DefaultConcurrency
	}
	m = m.Fit()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				_, id, _, _ := splitWebhook(t.URL)
				results[i] = Result{WebhookID: id, Err: stopped(id, ctx.Err(), nil)}
				if c.Observer != nil {
					c.Observer.Failed(id, results[i].Err.Error())
				}
				return
			}
			defer func() { <-sem }()
			results[i], _ = c.Send(ctx, t.URL, m)
		})
	}
	wg.Wait()
	return results
}
