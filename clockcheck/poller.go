package clockcheck

import (
	"context"
	"errors"
	"sync"
	"time"
)

// poller runs a time source's polling goroutine and tells when the source has
// vouched once. It is the part NTPSource and KernelSource share; its zero value is
// ready. Its lock is its own: a source's poll may hold the source's lock while it
// calls synced.
type poller struct {
	mu      sync.Mutex
	syncedC chan struct{} // closed once the source has vouched
	cancel  context.CancelFunc
	done    chan struct{}
}

// start runs poll on a goroutine, the first time at once, then every interval
// (DefaultPollInterval when not positive), or after min(interval, 4 s) when poll
// failed; after each poll, after calls after (may be nil). Error: started twice,
// naming what.
func (p *poller) start(ctx context.Context, what string, interval time.Duration, poll func(context.Context) error, after func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return errors.New("clockcheck: " + what + " started already")
	}
	if p.syncedC == nil {
		p.syncedC = make(chan struct{})
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	go p.loop(ctx, interval, poll, after)
	return nil
}

func (p *poller) loop(ctx context.Context, interval time.Duration, poll func(context.Context) error, after func()) {
	defer close(p.done)
	retry := min(interval, 4*time.Second)
	for {
		wait := interval
		if err := poll(ctx); err != nil {
			wait = retry
		}
		if after != nil {
			after()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// synced records that the source vouched: wait returns from now on.
func (p *poller) synced() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.syncedC == nil {
		p.syncedC = make(chan struct{})
	}
	select {
	case <-p.syncedC:
	default:
		close(p.syncedC)
	}
}

// wait blocks until synced was called once and returns nil, or until ctx ends
// and returns ctx's error.
func (p *poller) wait(ctx context.Context) error {
	p.mu.Lock()
	if p.syncedC == nil {
		p.syncedC = make(chan struct{})
	}
	c := p.syncedC
	p.mu.Unlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop cancels the goroutine, if started, and waits for it.
func (p *poller) stop() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
